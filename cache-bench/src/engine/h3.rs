//! HTTP/3 load (`--h3`): each of the -c connections is a QUIC connection
//! from a UDP socket of its own (kept when the connection is opened again,
//! as a client keeps its socket: quinn, on the run's rustls client with
//! ALPN h3), and
//! carries `--streams` request loops at once, as with `--h2`. The
//! handshake (and with --new-conn one per request) counts in the latency
//! of the request that waited for it. A connection that fails is opened
//! again; a stream reset counts as an error on its request alone.

use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};

use super::ctx::{next_due, record, Ctx, Pace, Picker, Resp};
use super::http1::header_facts;
use super::streams::{stream_loop, Shared};
use crate::stats::ErrorKind;

type Sender = h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>;

pub(super) async fn connection(ctx: Rc<Ctx>, index: usize) {
    let timeout = Duration::from_secs_f64(ctx.plan.timeout_s.max(0.001));
    let streams = ctx.plan.streams.max(1);
    let mut pace = Pace::new(&ctx);
    let Some(endpoint) = endpoint(&ctx) else {
        let base = next_due(&ctx, &mut pace).await;
        if let Some(b) = base {
            record(&ctx, b, Instant::now(), Err(ErrorKind::Connect));
        }
        return;
    };
    let mut first = None;
    loop {
        let base = match first.take() {
            Some(b) => b,
            None => match next_due(&ctx, &mut pace).await {
                Some(b) => b,
                None => break,
            },
        };
        let (conn, send) = match tokio::time::timeout(timeout, open(&ctx, &endpoint)).await {
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
        drop(send);
        conn.close(quinn::VarInt::from_u32(0x100), b"");
        if !shared.broken.get() {
            break;
        }
    }
    endpoint.wait_idle().await;
}

/// A client endpoint (a UDP socket) with quinn's configuration from the
/// run's TLS one (ALPN h3) and wide windows, so that large bodies are not
/// held back by the client.
fn endpoint(ctx: &Ctx) -> Option<quinn::Endpoint> {
    let tls = ctx.target.tls.as_ref()?;
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls.config.clone()).ok()?;
    let mut t = quinn::TransportConfig::default();
    t.stream_receive_window(quinn::VarInt::from_u32(16 << 20)).receive_window(quinn::VarInt::from_u32(64 << 20));
    let mut c = quinn::ClientConfig::new(Arc::new(crypto));
    c.transport_config(Arc::new(t));
    let local: std::net::SocketAddr = if ctx.target.addr.is_ipv6() { "[::]:0" } else { "0.0.0.0:0" }.parse().ok()?;
    let mut endpoint = quinn::Endpoint::client(local).ok()?;
    endpoint.set_default_client_config(c);
    Some(endpoint)
}

/// A QUIC connection and its HTTP/3 session; the session's driver runs
/// in a task of its own.
async fn open(ctx: &Ctx, endpoint: &quinn::Endpoint) -> std::io::Result<(quinn::Connection, Sender)> {
    let tls = ctx.target.tls.as_ref().ok_or_else(|| std::io::Error::other("--h3 without TLS"))?;
    let name = match &tls.name {
        rustls::pki_types::ServerName::DnsName(d) => d.as_ref().to_string(),
        other => other.to_str().into_owned(),
    };
    let conn = endpoint.connect(ctx.target.addr, &name).map_err(std::io::Error::other)?.await.map_err(std::io::Error::other)?;
    let (mut driver, send) = h3::client::new(h3_quinn::Connection::new(conn.clone())).await.map_err(std::io::Error::other)?;
    tokio::task::spawn_local(async move {
        let _ = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
    });
    Ok((conn, send))
}

/// One request on a stream; an error says whether the connection is gone
/// (true) or only the stream failed.
async fn exchange(send: &mut Sender, ctx: &Ctx, url: usize) -> Result<Resp, (ErrorKind, bool)> {
    let t = &ctx.target.h2;
    let mut req = http::Request::builder().method(ctx.plan.method.as_str()).uri(format!("https://{}{}", t.authority, t.paths[url]));
    for (n, v) in &ctx.plan.headers {
        if !n.eq_ignore_ascii_case("host") {
            req = req.header(n.as_str(), v.as_str());
        }
    }
    if let Some(b) = &ctx.plan.body {
        req = req.header("content-length", b.len());
    }
    let req = req.body(()).map_err(|_| (ErrorKind::Io, false))?;
    // (Its variants cannot be matched outside the crate.)
    let conn_gone = |e: h3::error::StreamError| (ErrorKind::Io, format!("{e:?}").starts_with("ConnectionError"));
    let mut stream = send.send_request(req).await.map_err(conn_gone)?;
    if let Some(b) = &ctx.plan.body {
        stream.send_data(Bytes::copy_from_slice(b.as_bytes())).await.map_err(conn_gone)?;
    }
    stream.finish().await.map_err(conn_gone)?;
    let resp = stream.recv_response().await.map_err(conn_gone)?;
    let first_byte = Instant::now();
    let status = resp.status().as_u16();
    let head_bytes: usize = resp.headers().iter().map(|(n, v)| n.as_str().len() + v.len() + 4).sum();
    let (_, _, _, hit) = header_facts(resp.headers().iter().map(|(n, v)| (n.as_str(), v.as_bytes())));
    let mut n = 0u64;
    while let Some(chunk) = stream.recv_data().await.map_err(conn_gone)? {
        n += chunk.remaining() as u64;
    }
    Ok(Resp { status, body: n, bytes: n + head_bytes as u64, hit, close: false, first_byte })
}
