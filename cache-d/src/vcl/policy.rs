//! The policy interface: the subroutines the engine calls at each step of
//! a request (Varnish's vcl_recv ... vcl_backend_error). Compiled VCL
//! ([`crate::vcl::compile`]) implements [`Policy`] and falls back to the
//! built-in subroutines ([`crate::vcl::builtin`]) when one does not return.

use common::log::vsl::Tag;

use crate::backend::pool::Backend;
use crate::vcl::builtin::builtin;
use crate::vcl::model::{Action, Sub, Task};

/// The policy: what runs at each step of the request. Each subroutine has
/// Varnish's built-in behaviour unless a policy overrides it.
pub trait Policy: Send + Sync {
    /// The name shown in VCL_use records.
    fn name(&self) -> &str {
        "boot"
    }
    /// Does the policy have code of its own for `sub`? (The engine skips
    /// building views, such as `obj` for vcl_hit, that only it would read.)
    fn defines(&self, _sub: Sub) -> bool {
        false
    }
    /// Can the policy turn ESI on (beresp.do_esi)? Its requests then keep
    /// their headers as they arrived: an include starts from them.
    fn may_esi(&self) -> bool {
        false
    }
    /// Run `sub`.
    fn call(&self, sub: Sub, t: &mut Task<'_>) -> Action {
        builtin(sub, t)
    }
    /// The program is being discarded (vcl_fini).
    fn fini(&self) {}
    /// The backend called `name` (None: the default one), if the policy
    /// declares backends; a director named picks by `key` where it hashes
    /// (the request's hash inputs, or its URL).
    fn backend(&self, _name: Option<&str>, _key: &[u8]) -> Option<std::sync::Arc<Backend>> {
        None
    }
    /// Every backend the policy declares, in order (and those its dynamic
    /// directors made so far).
    fn backends(&self) -> Vec<std::sync::Arc<Backend>> {
        Vec::new()
    }
    /// The directors vcl_init made, for backend.list (see
    /// [`crate::backend::probe::DirectorRow`]).
    fn directors(&self) -> Vec<crate::backend::probe::DirectorRow> {
        Vec::new()
    }
    /// The child took the policy on: its backends get their counters in
    /// `seg` and their probes start (and so do backends made later).
    fn start(&self, seg: &std::sync::Arc<common::segment::SegmentWriter>) {
        for b in self.backends() {
            crate::backend::probe::start(&b, seg.clone());
        }
    }
}

/// Run `sub` of `policy`, logging VCL_call and VCL_return to the task's
/// transaction.
pub fn run_sub(policy: &dyn Policy, sub: Sub, t: &mut Task<'_>) -> Action {
    t.record(Tag::VclCall, sub.word().as_bytes());
    let a = policy.call(sub, t);
    t.record(Tag::VclReturn, a.word().as_bytes());
    a
}

/// The built-in policy and nothing else.
pub struct Builtin;
impl Policy for Builtin {}
