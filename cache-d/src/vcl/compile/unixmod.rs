//! `import unix;`: Varnish 7.1's bundled vmod_unix: the user and group
//! of the process at the other end of a Unix socket listener (the
//! session's peer credentials, read with SO_PEERCRED when it opened, kept
//! on [`Ends`]). As vmod_unix: in vcl_init or vcl_fini the task fails; on
//! a TCP listener a VCL_Error is logged and uid()/gid() return -1,
//! user()/group() nothing.
//!
//! [`Ends`]: crate::vcl::model::Ends

use common::log::vsl::Tag;

use super::program::*;
use super::vmod::one_arg;
use crate::vcl::ast::*;
use crate::vcl::diag::VclError;
use crate::vcl::model::Task;

/// The peer's uid (or gid), or -1 with vmod_unix's log record or failure.
fn id(t: &mut Task<'_>, gid: bool) -> i64 {
    if t.req.is_none() && t.bereq.is_none() {
        fail(t, "vmod unix failure: may not be called in vcl_init or vcl_fini".into());
        return -1;
    }
    let (uds, cred) = match t.ends.as_ref() {
        Some(e) => (e.path.is_some(), e.peer_cred),
        None => (false, None),
    };
    match cred {
        Some((u, g)) => i64::from(if gid { g } else { u }),
        None => {
            let why = if uds { "could not read peer credentials" } else { "not listening on a Unix domain socket" };
            t.record(Tag::VclError, format!("vmod unix error: {why}").as_bytes());
            -1
        }
    }
}

/// The name of a user (or group) id, from the system's databases.
fn name_of(id: u32, group: bool) -> Option<String> {
    let mut buf = vec![0u8; 16 * 1024];
    let mut out: *mut libc::c_char = std::ptr::null_mut();
    // SAFETY: the *_r functions write into `buf` (of the length given)
    // and the record; `out` points into them when they succeed.
    unsafe {
        if group {
            let mut g: libc::group = std::mem::zeroed();
            let mut res: *mut libc::group = std::ptr::null_mut();
            if libc::getgrgid_r(id, &mut g, buf.as_mut_ptr().cast(), buf.len(), &mut res) == 0 && !res.is_null() {
                out = g.gr_name;
            }
            name(out)
        } else {
            let mut p: libc::passwd = std::mem::zeroed();
            let mut res: *mut libc::passwd = std::ptr::null_mut();
            if libc::getpwuid_r(id, &mut p, buf.as_mut_ptr().cast(), buf.len(), &mut res) == 0 && !res.is_null() {
                out = p.pw_name;
            }
            name(out)
        }
    }
}

/// A C string (NULL: None), copied.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string.
unsafe fn name(p: *const libc::c_char) -> Option<String> {
    (!p.is_null()).then(|| std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned())
}

/// A function of vmod_unix; None for a name that is not one.
pub(super) fn call(name: &str, args: &[Expr], pos: Pos, sc: &Scope<'_>) -> Option<Result<ExprFn, VclError>> {
    let f = name.strip_prefix("unix.")?;
    if !matches!(f, "uid" | "gid" | "user" | "group") {
        return None;
    }
    if let Err(e) = one_arg(args, name, 0, pos, sc) {
        return Some(Err(e));
    }
    let gid = matches!(f, "gid" | "group");
    Some(Ok(match f {
        "uid" | "gid" => Box::new(move |t, _| Val::Int(id(t, gid))),
        _ => Box::new(move |t, _| {
            let n = id(t, gid);
            if n < 0 {
                return Val::None;
            }
            match name_of(n as u32, gid) {
                Some(s) => Val::Str(s),
                None => {
                    t.record(Tag::VclError, b"vmod unix error: could not read peer credentials: Success");
                    Val::None
                }
            }
        }),
    }))
}
