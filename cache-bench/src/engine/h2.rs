//! HTTP/2 load (`--h2`): each of the -c connections (prior knowledge on
//! http://, ALPN h2 on https://) carries `--streams` request loops at
//! once, each taking the next due request as an HTTP/1 connection does.
//! A connection that fails is opened again; a stream reset counts as an
//! error on its request alone. The `h2` crate frames; windows are wide
//! (16 MiB a stream) so large bodies are not held back by the client.

use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use h2::client::SendRequest;

use super::conn::connect;
use super::ctx::{next_due, record, Ctx, Pace, Picker, Resp};
use super::http1::header_facts;
use super::streams::{stream_loop, Shared};
use crate::stats::ErrorKind;

pub(super) async fn connection(ctx: Rc<Ctx>, index: usize) {
    let timeout = Duration::from_secs_f64(ctx.plan.timeout_s.max(0.001));
    let streams = ctx.plan.streams.max(1);
    let mut first = None;
    let mut pace = Pace::new(&ctx);
    loop {
        let base = match first.take() {
            Some(b) => b,
            None => match next_due(&ctx, &mut pace).await {
                Some(b) => b,
                None => break,
            },
        };
        let send = match tokio::time::timeout(timeout, open(&ctx)).await {
            Ok(Ok(s)) => s,
            _ => {
                record(&ctx, base, Instant::now(), Err(ErrorKind::Connect));
                tokio::time::sleep(Duration::from_millis(1)).await;
                continue;
            }
        };
        let shared = Shared::new(base);
        let loops: Vec<_> = (0..streams)
            .map(|k| {
                let pick = Picker::new(&ctx, index * streams + k, ctx.plan.conns * streams);
                tokio::task::spawn_local(stream_loop(ctx.clone(), send.clone(), shared.clone(), pick, exchange))
            })
            .collect();
        for l in loops {
            let _ = l.await;
        }
        if !shared.broken.get() {
            break;
        }
        first = None;
    }
}

/// Connect and shake hands; the connection is driven by a task of its own.
async fn open(ctx: &Ctx) -> std::io::Result<SendRequest<Bytes>> {
    let s = connect(&ctx.target).await?;
    let (send, conn) = h2::client::Builder::new()
        .initial_window_size(16 << 20)
        .initial_connection_window_size(64 << 20)
        .handshake(s)
        .await
        .map_err(std::io::Error::other)?;
    tokio::task::spawn_local(async move {
        let _ = conn.await;
    });
    Ok(send)
}

/// One request on a stream; an error says whether the connection is gone
/// (true) or only the stream was reset.
async fn exchange(send: &mut SendRequest<Bytes>, ctx: &Ctx, url: usize) -> Result<Resp, (ErrorKind, bool)> {
    let t = &ctx.target.h2;
    let mut req = http::Request::builder().method(ctx.plan.method.as_str()).uri(format!("{}://{}{}", t.scheme, t.authority, t.paths[url]));
    for (n, v) in &ctx.plan.headers {
        if !n.eq_ignore_ascii_case("host") {
            req = req.header(n.as_str(), v.as_str());
        }
    }
    let req = req.body(()).map_err(|_| (ErrorKind::Io, false))?;
    let failed = |e: h2::Error| (ErrorKind::Io, !e.is_reset() || e.is_go_away());
    std::future::poll_fn(|cx| send.poll_ready(cx)).await.map_err(failed)?;
    let body = ctx.plan.body.as_ref();
    let (resp, mut out) = send.send_request(req, body.is_none()).map_err(failed)?;
    if let Some(b) = body {
        out.send_data(Bytes::copy_from_slice(b.as_bytes()), true).map_err(failed)?;
    }
    let resp = resp.await.map_err(failed)?;
    let first_byte = Instant::now();
    let status = resp.status().as_u16();
    let head_bytes: usize = resp.headers().iter().map(|(n, v)| n.as_str().len() + v.len() + 4).sum();
    let (_, _, _, hit) = header_facts(resp.headers().iter().map(|(n, v)| (n.as_str(), v.as_bytes())));
    let mut stream = resp.into_body();
    let mut n = 0u64;
    while let Some(chunk) = stream.data().await {
        let chunk = chunk.map_err(failed)?;
        let _ = stream.flow_control().release_capacity(chunk.len());
        n += chunk.len() as u64;
    }
    Ok(Resp { status, body: n, bytes: n + head_bytes as u64, hit, close: false, first_byte })
}
