//! The compiled vcl_recv of the WordPress policy (tests/vcl/wordpress.vcl),
//! against the built-in policy, on a request with analytics cookies that
//! takes the regsuball path.
//!
//! Also `req.url ~` on the hit path: a static asset's request through
//! the regexes real policies put first in vcl_recv (the measure issue 34
//! asked for the regex engine's choice).
//!
//! Run: `cargo bench -p cache-d --bench vcl`.

use std::sync::Arc;

use bytes::Bytes;
use cache_d::vcl::compile::{compile, VclPolicy};
use cache_d::vcl::model::{Headers, NoEnv, Req, Sub, Task};
use cache_d::vcl::policy::{Builtin, Policy};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

fn req() -> Req {
    let h = |n: &'static str, v: &'static str| (Bytes::from_static(n.as_bytes()), Bytes::from_static(v.as_bytes()));
    Req {
        method: Bytes::from_static(b"GET"),
        url: Bytes::from_static(b"/2026/11/hello-world/"),
        minor: 1,
        headers: Headers(vec![
            h("Host", "blog.example.com"),
            h("User-Agent", "Mozilla/5.0"),
            h("Accept", "text/html"),
            h("Cookie", "_ga=GA1.2.3; _gid=GA1.2.4"),
        ]),
        server_ip: "127.0.0.1".into(),
        client_ip: Some("127.0.0.1".parse().unwrap()),
        ..Req::default()
    }
}

fn recv(c: &mut Criterion) {
    let src = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/vcl/wordpress.vcl")).expect("corpus file");
    let prog = cache_d::vcl::parse_source("wordpress.vcl", &src.replace("ORIGIN_PORT", "8080")).expect("parses");
    let vcl = VclPolicy { name: "wordpress".into(), prog: Arc::new(compile(&prog).expect("compiles")) };
    let base = req();
    let mut g = c.benchmark_group("vcl_recv");
    g.throughput(Throughput::Elements(1));
    g.bench_function("wordpress.vcl (compiled)", |b| {
        b.iter(|| {
            let mut r = base.clone();
            let mut t = Task::new(&NoEnv);
            t.req = Some(&mut r);
            vcl.call(Sub::Recv, &mut t)
        })
    });
    g.bench_function("built-in policy", |b| {
        b.iter(|| {
            let mut r = base.clone();
            let mut t = Task::new(&NoEnv);
            t.req = Some(&mut r);
            Builtin.call(Sub::Recv, &mut t)
        })
    });
    g.finish();
}

/// The first matches of a typical vcl_recv, as public policies write them.
const MATCHES: &str = r#"vcl 4.1;
backend b { .host = "127.0.0.1"; }
sub vcl_recv {
    if (req.url ~ "^/(wp-admin|wp-login\.php|admin|user|cart|checkout|account)") { return (pass); }
    if (req.url ~ "[?&](utm_[a-z]+|gclid|fbclid|mc_[a-z]+|_ga)=") {
        set req.url = regsuball(req.url, "(utm_[a-z]+|gclid|fbclid|mc_[a-z]+|_ga)=[^&]*&?", "");
    }
    if (req.url ~ "(?i)\.(css|js|png|gif|jpe?g|svg|ico|woff2?|ttf|eot|webp|avif)(\?.*)?$") {
        unset req.http.Cookie;
        return (hash);
    }
    if (req.http.Cookie ~ "(wordpress_logged_in|PHPSESSID|SESS[a-z0-9]+)=") { return (pass); }
    return (hash);
}
"#;

fn url_match(c: &mut Criterion) {
    let prog = cache_d::vcl::parse_source("matches.vcl", MATCHES).expect("parses");
    let vcl = VclPolicy { name: "matches".into(), prog: Arc::new(compile(&prog).expect("compiles")) };
    let mut base = req();
    base.url = Bytes::from_static(b"/wp-content/themes/shop/assets/app.min.CSS?ver=6.4.2");
    let mut g = c.benchmark_group("req.url ~");
    g.throughput(Throughput::Elements(1));
    g.bench_function("static asset, 4 regexes (hit path)", |b| {
        b.iter(|| {
            let mut r = base.clone();
            let mut t = Task::new(&NoEnv);
            t.req = Some(&mut r);
            vcl.call(Sub::Recv, &mut t)
        })
    });
    g.finish();
}

criterion_group!(benches, recv, url_match);
criterion_main!(benches);
