//! Panics in a request's tasks fail that request, not the child. A bug
//! reached by one request (in the policy, a parser, a delivery step) closes
//! that client's connection, is logged and counted; every other connection
//! and the cache go on. The child still aborts, as Varnish's does, on a
//! panic anywhere else (the runtime, the expiry and ban threads, the
//! control channel), where no one request can take the blame.

use std::cell::Cell;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::task::{Context, Poll};

thread_local! {
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// Is this thread polling a contained task right now? (The panic hook
/// lets such a panic unwind to [`Contained`] instead of aborting.)
pub fn in_contained_task() -> bool {
    DEPTH.with(|d| d.get() > 0)
}

/// A future whose panics become `Err(message)`.
pub struct Contained<F> {
    inner: Pin<Box<F>>,
}

pub fn contain<F: Future>(f: F) -> Contained<F> {
    Contained { inner: Box::pin(f) }
}

impl<F: Future> Future for Contained<F> {
    type Output = Result<F::Output, String>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        DEPTH.with(|d| d.set(d.get() + 1));
        let r = catch_unwind(AssertUnwindSafe(|| self.inner.as_mut().poll(cx)));
        DEPTH.with(|d| d.set(d.get() - 1));
        match r {
            Ok(Poll::Ready(v)) => Poll::Ready(Ok(v)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(payload) => Poll::Ready(Err(message(&*payload))),
        }
    }
}

/// The text of a panic's payload.
pub fn message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panicking_task_gives_its_message_and_the_thread_goes_on() {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let r = contain(async {
            tokio::task::yield_now().await;
            let v: Vec<u8> = Vec::new();
            v[usize::from(in_contained_task())]
        })
        .await;
        std::panic::set_hook(prev);
        assert!(r.unwrap_err().contains("index out of bounds"));
        assert!(!in_contained_task());
        assert_eq!(contain(async { 7 }).await, Ok(7));
    }
}
