//! A connection that can leave its event loop between two polls: HTTP/2,
//! whose streams run inside the connection's one future (see `h2::serve`)
//! and whose socket the h2 crate owns, so it cannot wait for a request
//! boundary as an HTTP/1 connection does.
//!
//! The future is boxed, and polled through a waker of its own that
//! forwards to whichever task polls it now. So what it left waiting on
//! one loop (a socket's readiness, a timer, a channel, a stream's flow
//! control) wakes it on the next, whether or not the next poll reaches
//! it. Its socket follows at its first read or write there
//! (`listen::movable`); timers made on the old loop stay on that loop's
//! wheel and still wake it; tasks it spawned (background fetches) finish
//! where they were spawned.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::task::{waker_ref, ArcWake, AtomicWaker};

use crate::child::loops::take_move;

/// A connection's future, and the waker its wait-points know.
pub struct Roaming {
    fut: Pin<Box<dyn Future<Output = ()> + Send>>,
    wake: Arc<Forward>,
}

/// Wakes the task polling the connection now.
struct Forward(AtomicWaker);

impl ArcWake for Forward {
    fn wake_by_ref(me: &Arc<Self>) {
        me.0.wake();
    }
}

impl Roaming {
    pub fn new(fut: impl Future<Output = ()> + Send + 'static) -> Roaming {
        Roaming { fut: Box::pin(fut), wake: Arc::new(Forward(AtomicWaker::new())) }
    }

    /// Poll it in this task until it ends (None), or until this loop is
    /// asked to shed a connection (see `loops::take_move`) and this one
    /// goes: it comes back between two polls, to go on in another task.
    pub fn run(self) -> Run {
        Run(Some(self))
    }
}

/// The future of `Roaming::run`.
pub struct Run(Option<Roaming>);

impl Future for Run {
    type Output = Option<Roaming>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Roaming>> {
        let me = self.get_mut();
        let Some(r) = me.0.as_mut() else { return Poll::Ready(None) };
        if take_move() {
            return Poll::Ready(me.0.take());
        }
        r.wake.0.register(cx.waker());
        let waker = waker_ref(&r.wake);
        match r.fut.as_mut().poll(&mut Context::from_waker(&waker)) {
            Poll::Ready(()) => {
                me.0 = None;
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    use tokio::io::AsyncReadExt;

    use super::*;
    use crate::child::loops::Loops;
    use crate::listen::movable::Movable;

    fn on() -> String {
        std::thread::current().name().unwrap_or("").to_string()
    }

    /// A connection asked to move while it waits goes on on the other loop:
    /// what woke it on the first (a Notify) is seen on the second, its
    /// socket is read there, and a timer made on the first still wakes it.
    #[test]
    fn a_connection_moves_between_polls_with_its_socket_and_timers() {
        let loops = Loops::start(2).unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (sock, _) = listener.accept().unwrap();
        sock.set_nonblocking(true).unwrap();
        let notify = Arc::new(tokio::sync::Notify::new());
        let (said, heard) = mpsc::channel();
        let (moved_tx, moved) = mpsc::channel();
        let n = notify.clone();
        loops.spawn_on(0, move |open| async move {
            let conn = Roaming::new(async move {
                let mut s = Movable::register(sock).unwrap();
                let mut buf = [0u8; 8];
                let k = s.read(&mut buf).await.unwrap();
                said.send((on(), buf[..k].to_vec())).unwrap();
                let timer = tokio::time::sleep(Duration::from_millis(200));
                n.notified().await;
                said.send((on(), b"notified".to_vec())).unwrap();
                let k = s.read(&mut buf).await.unwrap();
                let joined = matches!(s, Movable::On(_, tag) if tag == crate::child::loops::here());
                said.send((on(), [&buf[..k], format!(" joined {joined}").as_bytes()].concat())).unwrap();
                let t = Instant::now();
                timer.await;
                said.send((on(), format!("timer {}", t.elapsed() < Duration::from_secs(5)).into_bytes())).unwrap();
            });
            moved_tx.send(conn.run().await).unwrap();
            drop(open);
        });
        let hear = || heard.recv_timeout(Duration::from_secs(5)).unwrap();
        client.write_all(b"one").unwrap();
        assert_eq!(hear(), ("cache-loop-0".into(), b"one".to_vec()));
        loops.shed(0, 1);
        notify.notify_one();
        let conn = moved.recv_timeout(Duration::from_secs(5)).unwrap().expect("the connection came back to move");
        let (done_tx, done) = mpsc::channel();
        loops.spawn_on(1, move |open| async move {
            done_tx.send(conn.run().await.is_none()).unwrap();
            drop(open);
        });
        assert_eq!(hear(), ("cache-loop-1".into(), b"notified".to_vec()));
        client.write_all(b"two").unwrap();
        // Read on the second loop, its socket in that loop's poller now.
        assert_eq!(hear(), ("cache-loop-1".into(), b"two joined true".to_vec()));
        assert_eq!(hear(), ("cache-loop-1".into(), b"timer true".to_vec()));
        assert!(done.recv_timeout(Duration::from_secs(5)).unwrap(), "it ended on the second loop");
        loops.shutdown(Duration::from_secs(1));
    }
}
