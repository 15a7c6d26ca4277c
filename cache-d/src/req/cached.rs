//! The request body vmod bodyaccess reads ([`crate::vcl::model::BodyAccess`]).
//! varnishd reads a body inside std.cache_req_body(); cache-d reads it once
//! vcl_recv is over (see `recv::cache_body`). A bodyaccess function that
//! asks for it while vcl_recv runs has it read here and then, on an
//! HTTP/1 connection, blocking this worker thread for the read (tokio's
//! `block_in_place`: the worker's other tasks move to another thread). An
//! HTTP/2 stream's body comes through its connection's task, which is this
//! one, so it cannot be waited for here: there the body is not available in
//! vcl_recv. A failed read is kept for vcl_recv's end to answer as a failed
//! std.cache_req_body() read is answered.

use bytes::Bytes;

use common::counters::C;

use crate::error::{Error, Side};
use crate::http1::head::Framing;
use crate::req::transport::Transport;
use crate::shared::Shared;

/// What of a request the read needs (the request's fields, borrowed apart
/// from the ones the subroutine's task holds).
pub struct Source<'r, T> {
    pub conn: &'r mut T,
    pub sh: &'r Shared,
    pub framing: &'r mut Framing,
    pub cached: &'r mut Option<Bytes>,
    pub body_rx: &'r mut u64,
    pub continue_pending: &'r mut bool,
    pub error: &'r mut Option<Error>,
    /// May the body be read now (vcl_recv of a top-level HTTP/1 request)?
    pub may_read: bool,
}

impl<T: Transport> crate::vcl::model::BodyAccess for Source<'_, T> {
    fn cached(&mut self, limit: u64) -> Option<Bytes> {
        if let Some(b) = self.cached.as_ref() {
            return Some(b.clone());
        }
        let multi = tokio::runtime::Handle::try_current().is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        if !self.may_read || !multi || *self.framing == Framing::None || self.error.is_some() {
            return None;
        }
        match tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(self.read(limit))) {
            Ok(b) => {
                *self.cached = Some(b.clone());
                Some(b)
            }
            Err(e) => {
                *self.error = Some(e);
                None
            }
        }
    }
}

impl<T: Transport> Source<'_, T> {
    /// The body whole (100 Continue first if the client waits for it), as
    /// `recv::cache_body` reads it.
    async fn read(&mut self, limit: u64) -> Result<Bytes, Error> {
        let too_big = || Error::new(Side::Internal, "Request body too big to cache");
        // The values, not a parameters guard, across the awaits below
        // (see Shared::params).
        let (send_timeout, idle_send_timeout, timeout_idle) = {
            let p = self.sh.params();
            (p.send_timeout, p.idle_send_timeout, p.timeout_idle)
        };
        if *self.continue_pending {
            *self.continue_pending = false;
            self.conn.arm_send(send_timeout, idle_send_timeout);
            if tokio::io::AsyncWriteExt::write_all(self.conn.out(), b"HTTP/1.1 100 Continue\r\n\r\n").await.is_err() {
                return Err(Error::new(Side::Client, "client closed before 100 Continue"));
            }
        }
        let mut body = crate::util::Capped { v: Vec::new(), cap: usize::try_from(limit).unwrap_or(usize::MAX) };
        let m = self.conn.copy_body(*self.framing, false, &mut body, Side::Internal, timeout_idle).await;
        let m = m.map_err(|e| if e.side == Side::Internal { too_big() } else { e })?;
        self.sh.seg.add(C::SReqBodybytes, m.rx);
        *self.body_rx += m.rx;
        *self.framing = Framing::None;
        Ok(Bytes::from(body.v))
    }
}
