//! Compiled VCL programs run against arbitrary requests: a runtime error
//! fails the request (VCL_Error), it never panics. Two halves, chosen by
//! the first byte: the corpus programs (cache-d/tests/vcl plus one full of
//! arithmetic and string functions) against a request made of the input,
//! or the input as a program (literal addresses only: no DNS) against a
//! fixed request. Every client and backend subroutine runs.
#![no_main]

use std::sync::OnceLock;

use bytes::Bytes;
use cache_d::vcl::compile::{compile, VclPolicy};
use cache_d::vcl::model::{Action, Bereq, Beresp, Headers, NoEnv, ObjView, Req, Resp, Sub, Task};
use cache_d::vcl::policy::Policy;
use libfuzzer_sys::fuzz_target;

const ARITH: &str = r#"vcl 4.1;
import std;
backend default { .host = "127.0.0.1"; .port = "8080"; }
sub vcl_recv {
    set req.http.a = std.integer(req.http.n, 0) / std.integer(req.http.d, 1);
    set req.http.b = std.integer(req.http.n, 0) * std.integer(req.http.d, 1) + std.integer(req.http.n, 0) - 1;
    set req.http.c = std.real(req.http.n, 0.0) * std.real(req.http.d, 1.0) / std.real(req.http.d, 1.0);
    set req.http.e = std.duration(req.http.n, 1s) * std.integer(req.http.d, 1) + now;
    set req.http.f = regsuball(req.url, "(.)(.)", "\2\1\0\\&");
    set req.http.g = std.querysort(req.url) + std.tolower(req.http.n) + std.toupper(req.http.d);
    set req.http.h = std.ip(req.http.n, "192.0.2.1") + ":" + std.port(std.ip(req.http.n, "192.0.2.1"));
    set req.http.i = std.time(req.http.n, now) - now;
    set req.url = regsub(req.url, "^/x", req.http.n);
    if (req.http.r) { return (synth(std.integer(req.http.r, 200), req.http.n)); }
    if (req.http.s) { set req.http.x = req.http.s; }
    ban("req.url ~ " + req.http.n);
}
sub vcl_synth { set resp.reason = req.http.n; set resp.status = std.integer(req.http.d, 200); synthetic(req.http.n); return (deliver); }
sub vcl_deliver { set resp.http.x = resp.status * std.integer(req.http.n, 1); set resp.reason = req.http.d; }
sub vcl_backend_fetch { set bereq.url = bereq.http.n; set bereq.method = bereq.http.d; }
sub vcl_backend_response { set beresp.ttl = std.duration(bereq.http.n, 10s) * std.integer(bereq.http.d, 1); set beresp.grace = beresp.ttl * -1; set beresp.status = std.integer(bereq.http.d, 200); }
"#;

fn load(src: &str) -> Option<VclPolicy> {
    let p = cache_d::vcl::parse_source("fuzz.vcl", src).ok()?;
    if !literal_addresses_only(&p.items) {
        return None;
    }
    VclPolicy::load("fuzz", compile(&p).ok()?).ok()
}

fn literal_addresses_only(items: &[cache_d::vcl::ast::Item]) -> bool {
    use cache_d::vcl::ast::{Expr, FieldValue, Item};
    items.iter().all(|i| match i {
        Item::Acl { entries, .. } => entries.iter().all(|e| e.addr.parse::<std::net::IpAddr>().is_ok()),
        Item::Backend { fields, .. } => fields
            .iter()
            .all(|f| f.name != "host" || matches!(&f.value, FieldValue::Expr(Expr::Str(s, _)) if s.parse::<std::net::IpAddr>().is_ok())),
        _ => true,
    })
}

fn corpus() -> &'static Vec<VclPolicy> {
    static C: OnceLock<Vec<VclPolicy>> = OnceLock::new();
    C.get_or_init(|| {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../cache-d/tests/vcl");
        let mut srcs: Vec<String> = std::fs::read_dir(dir)
            .map(|d| d.flatten().filter_map(|e| std::fs::read_to_string(e.path()).ok()).collect())
            .unwrap_or_default();
        srcs.push(ARITH.to_string());
        srcs.iter().filter_map(|s| load(&s.replace("ORIGIN_PORT", "8080"))).collect()
    })
}

/// A request from bytes: "METHOD URL" on the first line, headers after.
fn request(data: &[u8]) -> Req {
    let text = String::from_utf8_lossy(data);
    let mut lines = text.split('\n');
    let first = lines.next().unwrap_or("");
    let (method, url) = first.split_once(' ').unwrap_or(("GET", first));
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (Bytes::copy_from_slice(n.trim().as_bytes()), Bytes::copy_from_slice(v.trim().as_bytes())))
        .collect();
    Req {
        method: Bytes::copy_from_slice(method.as_bytes()),
        url: Bytes::copy_from_slice(url.as_bytes()),
        minor: 1,
        headers: Headers(headers),
        server_ip: "127.0.0.1".into(),
        client_ip: Some("10.1.2.3".parse().unwrap()),
        ..Req::default()
    }
}

fn run_all(p: &VclPolicy, req: &Req) {
    let ends = Some(cache_d::vcl::model::Ends::direct("10.1.2.3:5555".parse().unwrap(), "127.0.0.1:80".parse().unwrap()));
    for sub in [Sub::Recv, Sub::Hash, Sub::Hit, Sub::Miss, Sub::Pass, Sub::Pipe, Sub::Purge, Sub::Synth, Sub::Deliver] {
        let mut r = req.clone();
        let mut key = Vec::new();
        let mut body = Vec::new();
        let mut resp = Resp {
            status: 200,
            reason: Bytes::from_static(b"OK"),
            headers: req.headers.clone(),
            is_streaming: false,
            do_esi: false,
            ..Resp::default()
        };
        let obj = ObjView { status: 200, headers: req.headers.clone(), ttl: 10.0, grace: 10.0, hits: 3, ..ObjView::default() };
        let mut t = Task::new(&NoEnv);
        t.ends = ends.as_ref();
        t.req = Some(&mut r);
        match sub {
            Sub::Hash => t.key = Some(&mut key),
            Sub::Hit => t.obj = Some(&obj),
            Sub::Synth => {
                t.resp = Some(&mut resp);
                t.body = Some(&mut body);
            }
            Sub::Deliver => t.resp = Some(&mut resp),
            _ => {}
        }
        let a = p.call(sub, &mut t);
        let _ = (a == Action::Fail, t.failed);
    }
    let mut bereq = Bereq::from_req(req, 7);
    for sub in [Sub::BackendFetch, Sub::BackendResponse, Sub::BackendError] {
        let mut b = bereq.clone();
        let mut beresp = Beresp { status: 200, headers: req.headers.clone(), ttl: 120.0, ..Beresp::default() };
        let mut body = Vec::new();
        let mut t = Task::new(&NoEnv);
        t.bereq = Some(&mut b);
        if sub != Sub::BackendFetch {
            t.beresp = Some(&mut beresp);
        }
        if sub == Sub::BackendError {
            t.body = Some(&mut body);
        }
        let _ = p.call(sub, &mut t);
    }
    bereq.headers = Headers::default();
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    if mode % 2 == 0 {
        let req = request(rest);
        for p in corpus() {
            run_all(p, &req);
        }
    } else if let Some(p) = load(&String::from_utf8_lossy(rest)) {
        run_all(&p, &request(b"GET /x?b=1&a=2\nHost: example.com\nN: -9223372036854775808\nD: -1\nCookie: a=b"));
    }
});
