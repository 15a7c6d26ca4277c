//! The syntax tree of a VCL program. Every node keeps the byte offset of
//! its first token (`at`) in its source file (`file`, an index into the
//! program's file list), so later stages can report positions.

/// Where something is: a file index and a byte offset in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Pos {
    pub file: usize,
    pub at: usize,
    pub len: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    Str(String, Pos),
    Int(i64, Pos),
    Real(f64, Pos),
    Duration(f64, Pos),
    Bytes(u64, Pos),
    /// A name: a variable (`req.url`), a backend, an ACL, `true`/`false`.
    Name(String, Pos),
    Call {
        name: String,
        args: Vec<Expr>,
        /// The argument's name where it was given as `name = value`.
        names: Vec<Option<String>>,
        pos: Pos,
    },
    Not(Box<Expr>, Pos),
    Neg(Box<Expr>, Pos),
    Binary {
        op: &'static str,
        left: Box<Expr>,
        right: Box<Expr>,
        pos: Pos,
    },
}

impl Expr {
    pub fn pos(&self) -> Pos {
        match self {
            Expr::Str(_, p) | Expr::Int(_, p) | Expr::Real(_, p) | Expr::Duration(_, p) | Expr::Bytes(_, p) | Expr::Name(_, p) => *p,
            Expr::Call { pos, .. } | Expr::Binary { pos, .. } => *pos,
            Expr::Not(_, p) | Expr::Neg(_, p) => *p,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    /// `set target op value;` with op one of = += -= *= /=.
    Set {
        target: String,
        op: &'static str,
        value: Expr,
        pos: Pos,
    },
    Unset {
        target: String,
        pos: Pos,
    },
    If {
        branches: Vec<(Expr, Vec<Stmt>)>,
        otherwise: Option<Vec<Stmt>>,
        pos: Pos,
    },
    /// `return (action)` or `return (action(args))`.
    Return {
        action: String,
        args: Vec<Expr>,
        pos: Pos,
    },
    Call {
        sub: String,
        pos: Pos,
    },
    /// `new name = constructor(args);` (vcl_init).
    New {
        name: String,
        ctor: Expr,
        pos: Pos,
    },
    /// A function called for its effect: `std.log(...)`, `hash_data(...)`.
    Expr(Expr),
    Block(Vec<Stmt>),
}

/// A `.name = value` field in a backend or probe.
#[derive(Clone, Debug, PartialEq)]
pub enum FieldValue {
    Expr(Expr),
    Block(Vec<Field>),
    /// A probe given by name.
    Name(String),
    /// A blob literal (`:base64:`, a backend's .preamble).
    Blob(Vec<u8>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Field {
    pub name: String,
    pub value: FieldValue,
    pub pos: Pos,
}

#[derive(Clone, Debug, PartialEq)]
pub struct AclEntry {
    pub negated: bool,
    pub addr: String,
    pub mask: Option<u8>,
    pub pos: Pos,
    /// In parentheses: a name that does not resolve is skipped (with a
    /// warning in Varnish), not an error.
    pub para: bool,
    /// `include "file";` in the ACL's body: `addr` is the file, read when
    /// the program is (see `parse_into`).
    pub include: bool,
}

/// An ACL's flags (`acl name +log -pedantic { ... }`, Varnish 7.1's).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AclFlags {
    /// Log a VCL_acl record for each match test.
    pub log: bool,
    /// An entry with bits set past its mask is an error (the default).
    pub pedantic: bool,
}

impl Default for AclFlags {
    fn default() -> AclFlags {
        AclFlags { log: false, pedantic: true }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Item {
    Version {
        version: String,
        pos: Pos,
    },
    Import {
        module: String,
        pos: Pos,
    },
    /// `include "file";`, or `include +glob "pattern";` (every file
    /// matching, in name order).
    Include {
        path: String,
        glob: bool,
        pos: Pos,
    },
    /// `none`: `backend name none;`, a backend never contacted (fetches
    /// through it fail).
    Backend {
        name: String,
        fields: Vec<Field>,
        none: bool,
        pos: Pos,
    },
    Probe {
        name: String,
        fields: Vec<Field>,
        pos: Pos,
    },
    Acl {
        name: String,
        flags: AclFlags,
        entries: Vec<AclEntry>,
        pos: Pos,
    },
    Sub {
        name: String,
        body: Vec<Stmt>,
        pos: Pos,
    },
}

/// A whole program: its files (name, source) and items, includes expanded.
#[derive(Clone, Debug, Default)]
pub struct Program {
    pub files: Vec<(String, String)>,
    pub items: Vec<Item>,
}
