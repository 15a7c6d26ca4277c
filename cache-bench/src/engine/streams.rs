//! What `--h2` and `--h3` share: a connection's `--streams` request loops,
//! each taking the next due request as an HTTP/1 connection does, until
//! the connection breaks (or has served its `--requests-per-conn`).

use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use super::ctx::{expected, next_due, record, Ctx, Pace, Picker, Resp};
use crate::stats::ErrorKind;

/// What a connection's stream loops share.
pub(super) struct Shared {
    /// A request slot taken before connecting, for the first loop.
    pub first: Cell<Option<Instant>>,
    /// The connection failed (or served its --requests-per-conn): the
    /// loops stop and it is opened again.
    pub broken: Cell<bool>,
    used: Cell<u64>,
}

impl Shared {
    pub fn new(first: Instant) -> Rc<Shared> {
        Rc::new(Shared { first: Cell::new(Some(first)), broken: Cell::new(false), used: Cell::new(0) })
    }
}

/// One stream loop: `exchange` sends a request on `send` and reads its
/// answer; its error says whether the connection is gone (true) or only
/// the stream failed.
pub(super) async fn stream_loop<S>(
    ctx: Rc<Ctx>,
    mut send: S,
    shared: Rc<Shared>,
    mut pick: Picker,
    exchange: impl AsyncFn(&mut S, &Ctx, usize) -> Result<Resp, (ErrorKind, bool)>,
) {
    let timeout = Duration::from_secs_f64(ctx.plan.timeout_s.max(0.001));
    let mut pace = Pace::new(&ctx);
    while !shared.broken.get() {
        let base = match shared.first.take() {
            Some(b) => b,
            None => match next_due(&ctx, &mut pace).await {
                Some(b) => b,
                None => return,
            },
        };
        let url = pick.next(&ctx);
        let outcome = match tokio::time::timeout(timeout, exchange(&mut send, &ctx, url)).await {
            Err(_) => Err((ErrorKind::Timeout, true)),
            Ok(r) => r,
        };
        let done = Instant::now();
        shared.used.set(shared.used.get() + 1);
        if matches!(outcome, Err((_, true))) || ctx.plan.requests_per_conn.is_some_and(|n| shared.used.get() >= n) {
            shared.broken.set(true);
        }
        record(&ctx, base, done, outcome.map_err(|(k, _)| k).and_then(|r| expected(&ctx.plan, r)));
    }
}
