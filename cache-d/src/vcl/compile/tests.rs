//! The compiler's unit tests.

use super::program::in_net;
use super::*;
use crate::vcl::model::Headers;
use crate::vcl::model::{Bereq, Beresp, Ends, ObjView, Req, Resp};
use crate::vcl::parse_source;
use bytes::Bytes;
use std::sync::Mutex;

fn load(vcl: &str) -> VclPolicy {
    let p = parse_source("t.vcl", vcl).unwrap_or_else(|e| panic!("{e}"));
    let c = compile(&p).unwrap_or_else(|e| panic!("{}", e.render(&p.files)));
    VclPolicy::load("t", c).unwrap()
}

fn compile_err(src: &str) -> String {
    let p = parse_source("t.vcl", &format!("vcl 4.1;\nimport std;\nbackend default {{ .host = \"127.0.0.1\"; }}\n{src}")).unwrap();
    match compile(&p) {
        Ok(_) => panic!("compiled: {src}"),
        Err(e) => e.render(&p.files),
    }
}

fn req(url: &str, hdrs: &[(&str, &str)]) -> Req {
    Req {
        method: Bytes::from_static(b"GET"),
        url: Bytes::copy_from_slice(url.as_bytes()),
        minor: 1,
        headers: Headers(hdrs.iter().map(|(n, v)| (Bytes::copy_from_slice(n.as_bytes()), Bytes::copy_from_slice(v.as_bytes()))).collect()),
        server_ip: "127.0.0.1".into(),
        client_ip: Some("10.1.2.3".parse().unwrap()),
        ..Req::default()
    }
}

fn recv_url(vcl: &str, url: &str, hdrs: &[(&str, &str)]) -> (Action, String, Headers) {
    let pol = load(vcl);
    let mut r = req(url, hdrs);
    let a = {
        let ends = Ends::direct("10.1.2.3:5555".parse().unwrap(), "127.0.0.1:80".parse().unwrap());
        let mut t = Task::new(&NoEnv);
        t.req = Some(&mut r);
        t.ends = Some(&ends);
        pol.call(Sub::Recv, &mut t)
    };
    (a, String::from_utf8_lossy(&r.url).into_owned(), r.headers)
}

#[test]
fn std_functions_and_regsub() {
    assert_eq!(querysort("/a?b=2&a=1&&c"), "/a?a=1&b=2&c");
    assert_eq!(querysort("/a?"), "/a?", "as Varnish 7.1");
    assert_eq!(querysort("/foo/bar?&"), "/foo/bar?", "as Varnish 7.1");
    assert_eq!(querysort("/a"), "/a");
    let vcl = r#"vcl 4.1;
        import std;
        sub vcl_recv {
            set req.url = std.querysort(req.url);
            set req.http.X-N = std.integer(req.http.X-Num, 7) + 1;
            set req.http.X-D = std.duration("90s", 1s) + 30s;
            set req.http.X-R = regsub(req.url, "^/(\w+)\?.*$", "\1!");
            set req.http.X-Real = std.real("2.5", 0.0) * 2;
            set req.http.X-Ip = std.ip("bogus", "192.0.2.1");
            set req.http.X-Port = std.port(client.ip);
            set req.http.X-T = std.time("Thu, 01 Jan 1970 00:01:40 GMT", now) + 20s;
            set req.http.X-Append = "a";
            set req.http.X-Append += "b";
            return (hash);
        }"#;
    let (r, url, h) = recv_url(vcl, "/page?z=1&a=2", &[("X-Num", "41")]);
    assert_eq!(r, Action::Hash);
    assert_eq!(url, "/page?a=2&z=1");
    assert_eq!(h.get("x-n").unwrap(), &b"42"[..]);
    assert_eq!(h.get("x-d").unwrap(), &b"120.000"[..]);
    assert_eq!(h.get("x-r").unwrap(), &b"page!"[..]);
    assert_eq!(h.get("x-real").unwrap(), &b"5.000"[..]);
    assert_eq!(h.get("x-ip").unwrap(), &b"192.0.2.1"[..]);
    assert_eq!(h.get("x-port").unwrap(), &b"5555"[..]);
    assert_eq!(h.get("x-t").unwrap(), &b"Thu, 01 Jan 1970 00:02:00 GMT"[..]);
    assert_eq!(h.get("x-append").unwrap(), &b"ab"[..]);
    let (_, _, h) = recv_url(vcl, "/p", &[("X-Num", "lots")]);
    assert_eq!(h.get("x-n").unwrap(), &b"8"[..], "the fallback");
    // Without a fallback, a value that does not convert fails the task.
    let vcl = "vcl 4.1; import std; sub vcl_recv { set req.http.X-N = -std.integer(req.http.X-Num); return (hash); }";
    let (r, _, h) = recv_url(vcl, "/p", &[("X-Num", "-204")]);
    assert_eq!((r, h.get("x-n").map(|v| &v[..])), (Action::Hash, Some(&b"204"[..])));
    assert_eq!(recv_url(vcl, "/p", &[("X-Num", "lots")]).0, Action::Fail);
    // The remainder of INTs; by 0, the task fails.
    let vcl = "vcl 4.1; import std; sub vcl_recv { set req.http.X-R = 22302 % std.integer(req.http.X-Num); return (hash); }";
    assert_eq!(recv_url(vcl, "/p", &[("X-Num", "10000")]).2.get("x-r").map(|v| &v[..]), Some(&b"2302"[..]));
    assert_eq!(recv_url(vcl, "/p", &[("X-Num", "0")]).0, Action::Fail);
}

#[test]
fn acls_pick_the_longest_prefix() {
    let vcl = r#"vcl 4.1;
        acl inner { "10.0.0.0"/8; ! "10.1.0.0"/16; "10.1.2.3"; }
        sub vcl_recv { if (client.ip ~ inner) { return (pass); } }"#;
    // 10.1.2.3 is in /8, excluded by /16, included again by /32.
    assert_eq!(recv_url(vcl, "/", &[("Host", "x")]).0, Action::Pass);
    assert!(in_net("10.1.9.9".parse().unwrap(), "10.1.0.0".parse().unwrap(), 16));
    assert!(!in_net("11.0.0.1".parse().unwrap(), "10.0.0.0".parse().unwrap(), 8));
    // Falls through to the built-in policy when the sub does not return.
    let (r, _, _) = recv_url("vcl 4.1; sub vcl_recv { set req.http.X = \"1\"; }", "/", &[("Host", "x"), ("Cookie", "a=b")]);
    assert_eq!(r, Action::Pass, "the built-in policy passes cookies");
}

#[test]
fn variables_are_checked_per_subroutine() {
    let e = compile_err("sub vcl_recv { set beresp.ttl = 1s; }");
    assert!(e.contains("'beresp.ttl' cannot be set in vcl_recv") && e.contains("vcl_backend_response"), "{e}");
    let e = compile_err("sub vcl_backend_response { set req.url = \"/\"; }");
    assert!(e.contains("'req.url' cannot be set in vcl_backend_response"), "{e}");
    // (obj.ttl is readable in vcl_deliver in Varnish 7.1; obj.status is not.)
    let e = compile_err("sub vcl_deliver { if (obj.status == 200) { return (deliver); } }");
    assert!(e.contains("'obj.status' is not available in vcl_deliver"), "{e}");
    let e = compile_err("sub vcl_hit { set obj.ttl = 1s; }");
    assert!(e.contains("read only"), "{e}");
    assert!(compile_err("sub vcl_recv { set req.nonsense = 1; }").contains("Unknown variable 'req.nonsense'"));
    // A user sub is checked in every context that calls it.
    let e = compile_err("sub f { set req.http.x = bereq.url; } sub vcl_backend_fetch { call f; }");
    assert!(e.contains("'req.http.x' cannot be set in vcl_backend_fetch"), "{e}");
    assert!(compile_err("sub vcl_recv { synthetic(\"x\"); }").contains("synthetic() cannot be used in vcl_recv"));
    assert!(compile_err("sub vcl_recv { hash_data(req.url); }").contains("hash_data() cannot be used in vcl_recv"));
    assert!(compile_err("sub vcl_recv { unset req.url; }").contains("cannot be unset"));
    assert!(compile_err("sub vcl_recv { set req.backend_hint = nothere; }").contains("Unknown variable 'nothere'"));
    assert!(compile_err("sub vcl_recv { set req.http.x = std.nothing(1); }").contains("not supported yet"));
    assert!(compile_err("sub vcl_init { new rr = directors.round_robin(); }").contains("import directors;"));
    assert!(compile_err("sub vcl_recv { new rr = std.tolower(\"x\"); }").contains("only allowed in vcl_init"));
    let decl = |src: &str| {
        let p = parse_source("t.vcl", &format!("vcl 4.1;\n{src}")).unwrap();
        compile(&p).err().map(|e| e.render(&p.files)).unwrap_or_default()
    };
    assert!(decl("backend b { .host = \"127.0.0.1\"; .bogus = 1; }").contains("Unknown field: 'bogus'"));
    assert!(decl("backend b { .port = \"80\"; }").contains("Mandatory field 'host' missing"));
    assert!(decl("backend b { .host = \"127.0.0.1\"; .connect_timeout = \"5\"; }").contains("takes a duration"));
    assert!(decl("backend b { .host = \"no-such-host.invalid\"; }").contains("could not be resolved"));
    assert!(decl("backend b { .host = \"127.0.0.1\"; .probe = { .window = 3; .threshold = 5; } }").contains("larger than .window"));
    assert!(decl("probe p { .url = \"/\"; .request = \"GET / HTTP/1.1\"; }").contains("not both"));
    assert!(decl("backend b { .host = \"127.0.0.1\"; } backend b { .host = \"127.0.0.1\"; }").contains("redefined"));
    assert!(decl(
        "backend b { .host = \"127.0.0.1\"; .port = \"8080\"; .connect_timeout = 1s; .first_byte_timeout = 5s; .max_connections = 50; .probe = { .url = \"/health\"; .interval = 5s; .timeout = 1s; .window = 5; .threshold = 3; } }"
    )
    .is_empty());
}

#[test]
fn synth_builds_the_response_and_body() {
    let pol = load(
        r#"vcl 4.1;
        sub vcl_recv { if (req.url == "/old") { return (synth(750, "")); } }
        sub vcl_synth {
            if (resp.status == 750) {
                set resp.status = 301;
                set resp.http.Location = "https://example.com" + req.url;
                return (deliver);
            }
            set resp.http.Content-Type = "text/plain";
            synthetic("custom " + resp.status + " " + resp.reason);
            return (deliver);
        }"#,
    );
    let mut r = req("/old", &[("Host", "a")]);
    let a = {
        let mut t = Task::new(&NoEnv);
        t.req = Some(&mut r);
        pol.call(Sub::Recv, &mut t)
    };
    assert_eq!(a, Action::Synth(750, "Unknown HTTP Status".into()));
    let mut resp = Resp { status: 750, reason: Bytes::from_static(b""), ..Resp::default() };
    let mut body = Vec::new();
    let mut t = Task::new(&NoEnv);
    t.req = Some(&mut r);
    t.resp = Some(&mut resp);
    t.body = Some(&mut body);
    assert_eq!(pol.call(Sub::Synth, &mut t), Action::Deliver);
    assert_eq!((resp.status, &resp.reason[..]), (301, &b"Moved Permanently"[..]));
    assert_eq!(resp.headers.get("location").unwrap(), &b"https://example.com/old"[..]);
    let mut resp = Resp { status: 404, reason: Bytes::from_static(b"Not Found"), ..Resp::default() };
    let mut body = Vec::new();
    let mut t = Task::new(&NoEnv);
    t.req = Some(&mut r);
    t.resp = Some(&mut resp);
    t.body = Some(&mut body);
    pol.call(Sub::Synth, &mut t);
    assert_eq!(body, b"custom 404 Not Found");
}

#[test]
fn backend_and_hit_subroutines() {
    let pol = load(
        r#"vcl 4.1;
        sub vcl_backend_fetch { set bereq.http.X-Fetch = bereq.url; }
        sub vcl_backend_response {
            if (bereq.url ~ "^/static/") { set beresp.ttl = 1h; unset beresp.http.Set-Cookie; }
            if (beresp.status >= 500) { return (retry); }
            if (bereq.url ~ "^/private/") { return (pass(30s)); }
        }
        sub vcl_hit {
            if (obj.ttl >= 0s) { return (deliver); }
            if (obj.ttl + obj.grace > 0s && obj.hits < 3) { return (deliver); }
            return (miss);
        }"#,
    );
    let mut bereq = Bereq { url: Bytes::from_static(b"/static/a.css"), ..Bereq::default() };
    let mut t = Task::new(&NoEnv);
    t.bereq = Some(&mut bereq);
    assert_eq!(pol.call(Sub::BackendFetch, &mut t), Action::Fetch);
    assert_eq!(bereq.headers.get("x-fetch").unwrap(), &b"/static/a.css"[..]);
    let resp = |url: &'static str, status: u16| {
        let mut bereq = Bereq { url: Bytes::from_static(url.as_bytes()), ..Bereq::default() };
        let mut b = Beresp { status, ttl: 120.0, ..Beresp::default() };
        b.headers.set("Set-Cookie", Bytes::from_static(b"a=b"));
        let mut t = Task::new(&NoEnv);
        t.bereq = Some(&mut bereq);
        t.beresp = Some(&mut b);
        let a = pol.call(Sub::BackendResponse, &mut t);
        (a, b)
    };
    let (a, b) = resp("/static/a.css", 200);
    assert_eq!((a, b.ttl, b.uncacheable), (Action::Deliver, 3600.0, false), "Set-Cookie removed, so cacheable");
    let (a, b) = resp("/x", 200);
    assert_eq!((a, b.uncacheable), (Action::Deliver, true), "the built-in policy: Set-Cookie makes it uncacheable");
    assert_eq!(resp("/x", 503).0, Action::Retry);
    assert_eq!(resp("/private/x", 200).0, Action::PassFor(30.0));
    let hit = |ttl: f64, hits: u64| {
        let obj = ObjView { ttl, grace: 10.0, hits, ..ObjView::default() };
        let mut r = req("/", &[]);
        let mut t = Task::new(&NoEnv);
        t.req = Some(&mut r);
        t.obj = Some(&obj);
        pol.call(Sub::Hit, &mut t)
    };
    assert_eq!(hit(5.0, 100), Action::Deliver);
    assert_eq!(hit(-5.0, 1), Action::Deliver);
    assert_eq!(hit(-5.0, 3), Action::Miss);
    assert_eq!(hit(-15.0, 0), Action::Miss);
}

struct Recorder(Mutex<Vec<String>>);
impl crate::vcl::model::Env for Recorder {
    fn ban(&self, spec: &str) -> Result<(), String> {
        if spec.contains("~") || spec.contains("==") {
            self.0.lock().unwrap().push(spec.to_string());
            Ok(())
        } else {
            Err("expected an operator".into())
        }
    }
    fn healthy(&self, _: Option<&str>) -> bool {
        false
    }
}

#[test]
fn ban_log_and_runtime_failures() {
    let pol = load(
        r#"vcl 4.1;
        import std;
        # No probe has run yet and none counts as good: sick.
        backend default { .host = "127.0.0.1"; .probe = { .url = "/health"; .initial = 0; } }
        sub vcl_recv {
            if (req.method == "BAN") {
                ban("obj.http.x-url ~ " + req.url);
                ban("nonsense");
                std.log("banned " + req.url);
                return (synth(200, "Ban added"));
            }
            if (!std.healthy(req.backend_hint)) { set req.http.X-Sick = "1"; }
            set req.http.X-Evil = req.http.X-In;
            return (hash);
        }"#,
    );
    let env = Recorder(Mutex::new(Vec::new()));
    let mut log = common::log::vsl::Batch::with_reclen(255);
    let mut r = req("/news", &[]);
    r.method = Bytes::from_static(b"BAN");
    let a = {
        let mut t = Task::new(&env);
        t.req = Some(&mut r);
        t.log = Some((&mut log, 7, common::log::vsl::Side::Client));
        pol.call(Sub::Recv, &mut t)
    };
    assert_eq!(a, Action::Synth(200, "Ban added".into()));
    assert_eq!(*env.0.lock().unwrap(), vec!["obj.http.x-url ~ /news".to_string()]);
    let text: Vec<String> = common::log::vsl::Records::new(log.as_bytes())
        .map(|r| format!("{} {}", r.tag.name(), String::from_utf8_lossy(r.payload)))
        .collect();
    assert!(text.iter().any(|l| l == "VCL_Error ban(): expected an operator"), "{text:?}");
    assert!(text.iter().any(|l| l == "VCL_Log banned /news"), "{text:?}");
    // A header value with CR LF would split the message: fail.
    let mut r = req("/", &[("X-In", "a\r\nInjected: 1")]);
    let mut t = Task::new(&env);
    t.req = Some(&mut r);
    assert_eq!(pol.call(Sub::Recv, &mut t), Action::Fail);
    assert!(t.failed.unwrap().starts_with("Bad header "));
    assert_eq!(r.headers.get("x-sick").unwrap(), &b"1"[..]);
    assert!(r.headers.get("x-evil").is_none());
}

#[test]
fn init_fail_refuses_the_load() {
    let p = parse_source("t.vcl", "vcl 4.1; sub vcl_init { return (fail); }").unwrap();
    let e = VclPolicy::load("t", compile(&p).unwrap()).err().unwrap();
    assert!(e.contains("Failed initialization"), "{e}");
    let p = parse_source("t.vcl", "vcl 4.1; sub vcl_init { return (ok); } sub vcl_fini { return (ok); }").unwrap();
    assert!(VclPolicy::load("t", compile(&p).unwrap()).is_ok());
}

#[test]
fn init_adding_a_null_backend_fails() {
    // A hash director whose only member is sick picks no backend (NULL).
    let src = "vcl 4.1; import directors; probe p { .initial = 0; }
        backend b { .host = \"127.0.0.1\"; .port = \"1\"; .probe = p; }
        sub vcl_init { new h = directors.hash(); h.add_backend(b, 1.0);
            new rr = directors.round_robin(); rr.add_backend(h.backend(\"k\")); }";
    let p = parse_source("t.vcl", src).unwrap();
    let e = VclPolicy::load("t", compile(&p).unwrap()).err().unwrap();
    assert!(e.ends_with("rr: None backend cannot be added"), "{e}");
}

#[test]
fn arithmetic() {
    use Val::*;
    assert_eq!(arith("+", Int(2), Int(3)), Ok(Int(5)));
    assert_eq!(arith("*", Dur(10.0), Int(3)), Ok(Dur(30.0)));
    assert_eq!(arith("/", Dur(10.0), Dur(4.0)), Ok(Real(2.5)));
    assert_eq!(arith("-", Time(100.0), Time(40.0)), Ok(Dur(60.0)));
    assert_eq!(arith("+", Time(100.0), Dur(5.0)), Ok(Time(105.0)));
    assert_eq!(arith("+", Str("a".into()), Int(1)), Ok(Str("a1".into())));
    assert_eq!(arith("+", None, Str("x".into())), Ok(Str("x".into())));
    assert!(arith("/", Int(1), Int(0)).is_err());
    assert!(compare("<", &Dur(-1.0), &Dur(0.0)));
    assert!(compare("==", &Str("a".into()), &Str("a".into())));
    assert!(!compare("==", &None, &Str(String::new())));
    assert!(compare("!=", &None, &Str("x".into())));
    assert!(compare(">=", &Int(3), &Real(2.5)));
}

#[test]
fn builtin_vcl_text_decides_as_the_native_builtin() {
    let p = parse_source("builtin.vcl", crate::vcl::BUILTIN_VCL).unwrap_or_else(|e| panic!("{e}"));
    let vcl = VclPolicy::load("builtin", compile(&p).unwrap_or_else(|e| panic!("{}", e.render(&p.files)))).unwrap();
    let cases: &[(&str, &[(&str, &str)])] = &[
        ("GET", &[("Host", "a")]),
        ("GET", &[("Host", "Example.COM")]),
        ("HEAD", &[("Host", "a")]),
        ("POST", &[("Host", "a")]),
        ("GET", &[("Host", "a"), ("Cookie", "x=1")]),
        ("GET", &[("Host", "a"), ("Authorization", "Basic x")]),
        ("BREW", &[("Host", "a")]),
        ("PRI", &[("Host", "a")]),
        ("GET", &[]),
        ("PRI", &[]),
    ];
    for (method, hdrs) in cases {
        let run = |pol: &dyn Policy| {
            let mut r = req("/x", hdrs);
            r.method = Bytes::copy_from_slice(method.as_bytes());
            let a = {
                let mut t = Task::new(&NoEnv);
                t.req = Some(&mut r);
                pol.call(Sub::Recv, &mut t)
            };
            let mut key = Vec::new();
            let ends = Ends::direct("10.1.2.3:5555".parse().unwrap(), "127.0.0.1:80".parse().unwrap());
            let mut t = Task::new(&NoEnv);
            t.ends = Some(&ends);
            t.req = Some(&mut r);
            t.key = Some(&mut key);
            pol.call(Sub::Hash, &mut t);
            (a, r.headers.get("host").cloned(), key)
        };
        assert_eq!(run(&vcl), run(&crate::vcl::policy::Builtin), "{method} {hdrs:?}");
    }
    let beresps: &[(f64, &[(&str, &str)])] = &[
        (120.0, &[]),
        (0.0, &[]),
        (60.0, &[("Set-Cookie", "a=b")]),
        (60.0, &[("Cache-Control", "private, max-age=60")]),
        (60.0, &[("Cache-Control", "No-Store")]),
        (60.0, &[("Surrogate-Control", "max-age=60"), ("Cache-Control", "no-cache")]),
        (60.0, &[("Surrogate-Control", "no-store")]),
        (60.0, &[("Vary", "*")]),
    ];
    for (ttl, hdrs) in beresps {
        for uncacheable in [false, true] {
            let run = |pol: &dyn Policy| {
                let mut bereq = Bereq { uncacheable, ..Bereq::default() };
                let mut b = Beresp { status: 200, ttl: *ttl, headers: req("/", hdrs).headers, ..Beresp::default() };
                let mut t = Task::new(&NoEnv);
                t.bereq = Some(&mut bereq);
                t.beresp = Some(&mut b);
                let a = pol.call(Sub::BackendResponse, &mut t);
                (a, b.ttl, b.uncacheable)
            };
            assert_eq!(run(&vcl), run(&crate::vcl::policy::Builtin), "{ttl} {hdrs:?} {uncacheable}");
        }
    }
    let synth = |pol: &dyn Policy| {
        let mut r = Req { xid: 9, ..Req::default() };
        let mut resp = Resp { status: 503, reason: Bytes::from_static(b"Backend fetch failed"), ..Resp::default() };
        let mut body = Vec::new();
        let mut t = Task::new(&NoEnv);
        t.req = Some(&mut r);
        t.resp = Some(&mut resp);
        t.body = Some(&mut body);
        pol.call(Sub::Synth, &mut t);
        (body, resp.headers.get("content-type").cloned())
    };
    assert_eq!(synth(&vcl), synth(&crate::vcl::policy::Builtin));
}

#[test]
fn varnish7_builtin_calls_and_body_variables() {
    let pol = load(
        r#"vcl 4.1;
        sub vcl_recv {
            if (req.url == "/x") { set req.http.Cookie = "a=1"; }
            call vcl_builtin_recv;
            set req.http.X-After = "yes";
            return (hash);
        }
        sub vcl_synth { set resp.body = "plain " + resp.status; return (deliver); }"#,
    );
    let (a, _, h) = {
        let mut r = req("/x", &[("Host", "a")]);
        let mut t = Task::new(&NoEnv);
        t.req = Some(&mut r);
        let a = pol.call(Sub::Recv, &mut t);
        (a, (), r.headers)
    };
    assert_eq!(a, Action::Pass, "the built-in half returned pass for the cookie");
    assert!(h.get("x-after").is_none());
    let mut r = req("/y", &[("Host", "a")]);
    let mut t = Task::new(&NoEnv);
    t.req = Some(&mut r);
    assert_eq!(pol.call(Sub::Recv, &mut t), Action::Hash);
    assert_eq!(r.headers.get("x-after").unwrap(), &b"yes"[..], "fell through the built-in half");
    let mut resp = Resp { status: 404, ..Resp::default() };
    let mut body = Vec::new();
    let mut t = Task::new(&NoEnv);
    t.resp = Some(&mut resp);
    t.body = Some(&mut body);
    pol.call(Sub::Synth, &mut t);
    assert_eq!(body, b"plain 404");
    assert!(compile_err("sub vcl_deliver { call vcl_builtin_recv; }").contains("can only be called from vcl_recv"));
    let p = parse_source("t.vcl", "vcl 4.1; sub vcl_recv { std.log(\"x\"); }").unwrap();
    assert!(compile(&p).err().unwrap().msg.contains("import std;"));
}

#[test]
fn every_listed_function_compiles() {
    let arity = |f: &str| match f {
        "regsub" | "regsuball" => "req.url, \"a\", \"b\"",
        "std.integer" | "std.real" | "std.duration" | "std.time" | "std.ip" | "std.syslog" => "\"1\", \"2\"",
        "std.random" => "1, 2",
        "std.real2time" | "std.real2integer" | "std.time2real" | "std.time2integer" => "1.5, now",
        "std.rollback" => "req",
        "var.set" | "var.set_string" | "var.global_set" => "\"a\", \"1\"",
        "var.set_int" => "\"a\", 1",
        "var.set_real" => "\"a\", 1.5",
        "var.set_duration" => "\"a\", 1s",
        "var.set_ip" => "\"a\", client.ip",
        "var.set_backend" => "\"a\", req.backend_hint",
        "var.clear" => "",
        "str.startswith" | "str.endswith" | "str.contains" => "\"abc\", \"b\"",
        "str.take" | "str.split" => "\"abc\", 1",
        "header.append" | "header.get" | "header.remove" => "req.http.a, \"b\"",
        "header.copy" => "req.http.a, req.http.b",
        "header.regsub" => "req, \"a\", \"b\"",
        "header.dyn" => "req, \"a\"",
        "blob.encode" => "HEX, blob=std.blobread(\"x\")",
        "std.collect" => "req.http.x",
        "std.healthy" => "req.backend_hint",
        "std.port" => "client.ip",
        "std.ban_error" => "",
        "std.syntax" => "4.1",
        "std.late_100_continue" => "true",
        "std.cache_req_body" => "10KB",
        "cookie.set" => "\"a\", \"1\"",
        "cookie.format_date" | "cookie.format_rfc1123" => "now, 1m",
        f if f.starts_with("tls.") || f.starts_with("purge.") || f == "cookie.clean" || f == "cookie.get_string" => "",
        f if f.starts_with("proxy.") || f.starts_with("unix.") => "",
        "std.strstr" | "std.fnmatch" => "\"a\", \"b\"",
        "std.strftime" => "now, \"%Y\"",
        "std.round" => "1.5",
        "blob.decode" | "blob.transcode" => "HEX, encoded=\"ab\"",
        "blob.equal" | "blob.same" => "std.blobread(\"x\"), std.blobread(\"y\")",
        "blob.length" => "std.blobread(\"x\")",
        "blob.sub" => "std.blobread(\"x\"), 1B",
        f if f.starts_with("vsthrottle.") => "\"k\", 1, 1s, 1s",
        "bodyaccess.hash_req_body" | "bodyaccess.len_req_body" => "",
        "bodyaccess.log_req_body" => "\"p\", 3",
        "saintmode.blacklist" => "10s",
        "saintmode.status" | "tcp.dump_info" | "tcp.get_estimated_rtt" => "",
        "tcp.set_socket_pace" => "1000",
        _ => "\"x\"",
    };
    for &f in FUNCTIONS {
        let sub = match f {
            "hash_data" => "vcl_hash",
            "synthetic" => "vcl_synth",
            f if f.starts_with("purge.") => "vcl_hit",
            _ => "vcl_recv",
        };
        let src = format!(
            "vcl 4.1;\nimport std;\nimport tls;\nimport xkey;\nimport purge;\nimport blob;\nimport directors;\nimport cookie;\nimport proxy;\nimport unix;\nimport vsthrottle;\nimport bodyaccess;\nimport saintmode;\nimport tcp;\nimport var;\nimport str;\nimport header;\nsub {sub} {{ {f}({}); }}",
            arity(f)
        );
        let p = parse_source("t.vcl", &src).unwrap();
        compile(&p).unwrap_or_else(|e| panic!("{f}: {}", e.render(&p.files)));
    }
}

#[test]
fn shard_director_keys_and_options() {
    let pol = load(
        r#"vcl 4.1;
        import directors;
        backend s1 { .host = "127.0.0.1"; .port = "9001"; }
        backend s2 { .host = "127.0.0.1"; .port = "9002"; }
        backend s3 { .host = "127.0.0.1"; .port = "9003"; }
        backend s4 { .host = "127.0.0.1"; .port = "9004"; }
        sub vcl_init {
            new sh = directors.shard();
            sh.add_backend(s1); sh.add_backend(s2); sh.add_backend(s3); sh.add_backend(s4);
            sh.set_warmup(0.0);
            sh.set_rampup(30s);
            sh.reconfigure();
        }
        sub vcl_recv {
            if (req.http.X-Mode == "key") { set req.backend_hint = sh.backend(by=KEY, key=sh.key(req.http.X-User)); }
            elsif (req.http.X-Mode == "url") { set req.backend_hint = sh.backend(by=URL); }
            elsif (req.http.X-Mode == "alt") { set req.backend_hint = sh.backend(by=URL, alt=1, warmup=0.0, rampup=false); }
            elsif (req.http.X-Mode == "lazy") { set req.backend_hint = sh.backend(resolve=LAZY); }
            else { set req.backend_hint = sh.backend(); }
        }"#,
    );
    let hint = |url: &str, hdrs: &[(&str, &str)]| {
        let mut r = req(url, hdrs);
        r.headers.set("Host", Bytes::from_static(b"localhost"));
        let mut t = Task::new(&NoEnv);
        t.req = Some(&mut r);
        assert_eq!(pol.call(Sub::Recv, &mut t), Action::Hash);
        r.backend_hint.unwrap_or_default()
    };
    // by=HASH in vcl_recv: a member at once, by the URL (as by=URL);
    // resolve=LAZY: the director itself, picked at fetch time.
    assert_eq!(hint("/a", &[]), hint("/a", &[("X-Mode", "url")]));
    assert_eq!(hint("/a", &[("X-Mode", "lazy")]), "sh");
    // by=URL: a member, the same one each time; alt=1 another one.
    let urls: Vec<String> = (0..400).map(|i| format!("/u/{i}")).collect();
    let by_url: Vec<String> = urls.iter().map(|u| hint(u, &[("X-Mode", "url")])).collect();
    assert!(by_url.iter().all(|m| m.starts_with('s')));
    assert_eq!(by_url, urls.iter().map(|u| hint(u, &[("X-Mode", "url")])).collect::<Vec<_>>());
    for m in ["s1", "s2", "s3", "s4"] {
        let n = by_url.iter().filter(|b| *b == m).count();
        assert!((60..140).contains(&n), "{m} got {n} of 400 URLs");
    }
    assert!(urls.iter().zip(&by_url).all(|(u, m)| hint(u, &[("X-Mode", "alt")]) != *m));
    // by=KEY: the user decides, not the URL.
    let u7 = hint("/one", &[("X-Mode", "key"), ("X-User", "user7")]);
    assert_eq!(hint("/two", &[("X-Mode", "key"), ("X-User", "user7")]), u7);
    // At fetch time the director picks by the request's hash inputs.
    let pick = |key: &str| pol.backend(Some("sh"), key.as_bytes()).map(|b| b.name.clone()).unwrap();
    let picks: std::collections::HashSet<String> = (0..100).map(|i| pick(&format!("/h/{i}localhost"))).collect();
    assert_eq!(picks.len(), 4, "{picks:?}");
    assert_eq!(pick("/h/1localhost"), pick("/h/1localhost"));

    let bad = compile_err(
        "import directors;\nsub vcl_init { new sh = directors.shard(); }\nsub vcl_recv { set req.backend_hint = sh.backend(by=FOO); }",
    );
    assert!(bad.contains("by must be one of HASH, URL, KEY, BLOB"), "{bad}");
    let bad = compile_err(
        "import directors;\nsub vcl_init { new sh = directors.shard(); }\nsub vcl_recv { set req.backend_hint = sh.backend(by=KEY); }",
    );
    assert!(bad.contains("needs key="), "{bad}");
}

/// Real programs, mangled: every mutation is an error or a program,
/// never a panic (named arguments, directors and all).
#[test]
fn mangled_corpus_never_panics() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vcl");
    let snippets = [
        "(",
        ")",
        "{",
        "}",
        ";",
        ",",
        "=",
        "by=",
        "key=",
        "alt=",
        "\"",
        "{\"",
        "\"}",
        "sh.backend(",
        "directors.shard()",
        "new x = ",
        "return (",
        "req.http.",
        "+",
        "-",
        "1s",
        "0x",
        "~",
        "!",
        "&&",
        "||",
        "/*",
        "#",
        "\n",
        "vcl_recv",
        "sub ",
        "call ",
        "import directors;",
        ".add_backend(",
    ];
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut rnd = |n: usize| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % n.max(1) as u64) as usize
    };
    let mut compiled = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let src = std::fs::read_to_string(entry.unwrap().path()).unwrap().replace("ORIGIN_PORT", "8080");
        for _ in 0..1000 {
            let mut s: Vec<char> = src.chars().collect();
            for _ in 0..1 + rnd(4) {
                let at = rnd(s.len());
                match rnd(3) {
                    0 => {
                        let end = (at + rnd(12)).min(s.len());
                        s.drain(at..end);
                    }
                    1 => {
                        let sn = snippets[rnd(snippets.len())];
                        for (i, c) in sn.chars().enumerate() {
                            s.insert(at + i, c);
                        }
                    }
                    _ => {
                        let from = rnd(s.len());
                        let piece: Vec<char> = s[from..(from + rnd(20)).min(s.len())].to_vec();
                        for (i, c) in piece.into_iter().enumerate() {
                            s.insert((at + i).min(s.len()), c);
                        }
                    }
                }
            }
            let text: String = s.into_iter().collect();
            // Compile only programs whose hosts are literal addresses:
            // compiling resolves names, and a test sends no DNS query.
            let literal = |p: &crate::vcl::Program| {
                use crate::vcl::ast::{Expr, FieldValue, Item};
                p.items.iter().all(|i| match i {
                    Item::Acl { entries, .. } => entries.iter().all(|e| e.addr.parse::<std::net::IpAddr>().is_ok()),
                    Item::Backend { fields, .. } => fields.iter().all(|f| {
                        f.name != "host" || matches!(&f.value, FieldValue::Expr(Expr::Str(s, _)) if s.parse::<std::net::IpAddr>().is_ok())
                    }),
                    _ => true,
                })
            };
            if let Ok(p) = parse_source("m.vcl", &text).map_err(|e| e.to_string()) {
                if !literal(&p) {
                    continue;
                }
                match compile(&p) {
                    Ok(_) => compiled += 1,
                    Err(e) => {
                        let _ = e.render(&p.files);
                    }
                }
            }
        }
    }
    assert!(compiled > 0, "some mutations still compile");
}

#[test]
fn dynamic_directors_are_checked_where_they_are_written() {
    let cases: [(&str, &str, &str); 8] = [
        ("sub vcl_init { new d = dynamic.director(bogus = 1); }", "no argument 'bogus'", "Line 5 Pos"),
        ("sub vcl_init { new d = dynamic.director(probe = nope); }", "Probe 'nope' is not declared", "Line 5 Pos"),
        ("sub vcl_init { new d = dynamic.director(whitelist = nope); }", "ACL 'nope' is not declared", "Line 5 Pos"),
        ("sub vcl_init { new d = dynamic.director(port = \"x\"); }", "is not a port", "Line 5 Pos"),
        ("sub vcl_init { new d = dynamic.director(ttl_from = dns); }", "needs a resolver", "Line 5 Pos"),
        ("sub vcl_init { new r = dynamic.resolver(); r.add_nameserver(\"not-an-ip\"); }", "is not an address", "Line 5 Pos"),
        ("sub vcl_init { new r = dynamic.resolver(); }\nsub vcl_recv { r.set_timeout(1s); }", "vcl_init only", "Line 6 Pos"),
        (
            "sub vcl_init { new d = dynamic.director(); }\nsub vcl_recv { set req.backend_hint = d.service(\"x\"); }",
            ".service()",
            "Line 6 Pos",
        ),
    ];
    for (src, msg, at) in cases {
        let e = compile_err(&format!("import dynamic;\n{src}"));
        assert!(e.contains(msg) && e.contains(at), "{src}:\n{e}");
    }
    let e = compile_err("sub vcl_init { new d = dynamic.director(); }");
    assert!(e.contains("import dynamic"), "{e}");
    // A program with only a dynamic director needs no backend.
    let p = parse_source(
        "t.vcl",
        "vcl 4.1;\nimport dynamic;\nsub vcl_init { new d = dynamic.director(port = \"8080\"); }\nsub vcl_recv { set req.backend_hint = d.backend(\"127.0.0.1\"); }\n",
    )
    .unwrap();
    let c = compile(&p).unwrap_or_else(|e| panic!("{}", e.render(&p.files)));
    assert!(c.declares_directors && c.backend.is_none());
}

#[test]
fn hash_data_logs_each_piece_and_keys_them_joined() {
    let pol = load(
        r#"vcl 4.1;
        backend default { .host = "127.0.0.1"; }
        sub vcl_hash { hash_data("1" + req.http.foo + "3" + req.http.none); hash_data(1 + 2 + "x"); hash_data(req.http.none); }"#,
    );
    let mut log = common::log::vsl::Batch::with_reclen(255);
    let mut r = req("/p", &[("foo", "bar"), ("Host", "h")]);
    let mut key = Vec::new();
    let mut t = Task::new(&NoEnv);
    t.req = Some(&mut r);
    t.key = Some(&mut key);
    t.log = Some((&mut log, 7, common::log::vsl::Side::Client));
    assert_eq!(pol.call(Sub::Hash, &mut t), Action::Lookup);
    drop(t);
    assert_eq!(key, b"1bar3\x003x\x00\x00/p\x00h\x00");
    let text: Vec<String> =
        common::log::vsl::Records::new(log.as_bytes()).filter(|r| r.tag == Tag::Hash).map(|r| r.text().into_owned()).collect();
    assert_eq!(text, ["1", "bar", "3", "3x", "/p", "h"]);
}
