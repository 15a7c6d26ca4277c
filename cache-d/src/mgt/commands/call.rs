//! One admin command being answered: who asks (the manager's state), the
//! words as typed, and the reply's shape.

use common::adm::status;

use crate::mgt::state::Mgr;
use crate::util::now;

/// A reply: the CLI status code and the body.
pub type Reply = (u16, String);

/// A command and what it was called with.
pub struct Call<'a> {
    pub mgr: &'a Mgr,
    /// The words as typed (`argv[0]` may be an alias such as `purge`).
    pub argv: &'a [String],
    /// The command's own name (aliases resolved).
    pub name: &'a str,
    /// The arguments after the name.
    pub rest: &'a [String],
    /// The first argument is `-j`: answer in JSON.
    pub json: bool,
}

impl Call<'_> {
    /// The arguments without the `-j` flag (only the first argument can be
    /// one, as in Varnish).
    pub fn positional(&self) -> Vec<&str> {
        let skip = usize::from(self.json);
        self.rest[skip..].iter().map(String::as_str).collect()
    }

    /// Is `flag` among the arguments (`-l`, `-v`, `-z`...)?
    pub fn has(&self, flag: &str) -> bool {
        self.rest.iter().any(|a| a == flag)
    }

    /// A JSON reply (`[2, [argv...], time, data]`).
    pub fn json_reply(&self, data: serde_json::Value) -> Reply {
        (status::OK, json(2, self.argv, data))
    }

    /// A JSON reply whose items follow the header one by one
    /// (`[2, [argv...], time, item, item...]`), as Varnish's lists.
    pub fn json_items(&self, items: Vec<serde_json::Value>) -> Reply {
        let argv: Vec<&str> = self.argv.iter().map(String::as_str).collect();
        let mut v = vec![serde_json::json!(2), serde_json::json!(argv), serde_json::json!((now() * 1000.0).round() / 1000.0)];
        v.extend(items);
        (status::OK, serde_json::to_string_pretty(&v).unwrap_or_default())
    }

    /// The command again with its own name, for the child.
    pub fn relayed(&self) -> Vec<String> {
        let mut a = self.argv.to_vec();
        a[0] = self.name.to_string();
        a
    }
}

/// JSON answer: `[ver, [argv...], time, data]`.
pub fn json(ver: u32, args: &[String], data: serde_json::Value) -> String {
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let v = serde_json::json!([ver, argv, (now() * 1000.0).round() / 1000.0, data]);
    serde_json::to_string_pretty(&v).unwrap_or_default()
}

/// Answers shared by several commands.
pub fn too_few() -> Reply {
    (status::TOOFEW, "Too few parameters".into())
}

pub fn too_many() -> Reply {
    (status::TOOMANY, "Too many parameters".into())
}

pub fn unknown() -> Reply {
    (status::UNKNOWN, "Unknown request.\nType 'help' for more info.".into())
}
