//! Parameters next to varnishd 7.1's (issue 34): the same names, types,
//! units, limits, flags and defaults in `param.show -j`, the same `param.show`
//! lines, and each of varnishd's defaults taken by `param.set`.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::util::*;

/// cachekit's own parameters (not in varnishd 7.1).
const OURS: &[&str] = &[
    "brotli_quality",
    "event_loops",
    "h2_rapid_reset",
    "h2_rapid_reset_limit",
    "h2_rapid_reset_period",
    "h3_0rtt",
    "h3_alt_svc_max_age",
    "h3_conn_window",
    "h3_idle_timeout",
    "h3_max_concurrent_streams",
    "h3_max_field_section_size",
    "h3_retry_above",
    "h3_send_window",
    "h3_stream_window",
    "http_brotli_support",
    "max_connections",
    "reqbody_min_rate",
    "send_buffer",
    "stale_if_error",
    "timeout_req",
    "timeout_reqbody",
    "tls_cert_warn",
    "transit_buffer",
];

/// Limits where cache-d differs on purpose: (parameter, field, why).
const LIMITS_DIFFER: &[(&str, &str, &str)] = &[
    ("h2_header_table_size", "maximum", "varnishd truncates a larger value to 32 bits; cache-d refuses it"),
    ("h2_max_header_list_size", "maximum", "the same"),
    ("timeout_idle", "maximum", "cache-d bounds an idle wait to an hour"),
    ("vsl_reclen", "maximum", "varnishd's follows vsl_buffer; cache-d's log records hold at most 4084 bytes"),
    ("vsl_space", "minimum", "cache-d's log ring works from 64k (tests use small rings)"),
];

/// `param.show -j`'s parameters by name, from cache-d (cache-adm) or
/// varnishd (varnishadm).
fn show_json(tool: &str, dir: &Path) -> BTreeMap<String, Value> {
    let out = Command::new(tool).arg("-n").arg(dir).args(["param.show", "-j"]).output().unwrap();
    assert!(out.status.success(), "{tool} param.show -j: {}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{tool} param.show -j: {e}"));
    let items = v.as_array().expect("a JSON array").iter().skip(3);
    items.map(|p| (p["name"].as_str().unwrap().to_string(), p.clone())).collect()
}

/// `param.show`'s lines by name.
fn show_lines(tool: &str, dir: &Path) -> BTreeMap<String, String> {
    let out = Command::new(tool).arg("-n").arg(dir).arg("param.show").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines().filter_map(|l| Some((l.split(' ').next()?.to_string(), l.to_string()))).collect()
}

/// A value's JSON type and its units: what "the same type" means here.
fn kind(p: &Value) -> (String, String) {
    let t = match &p["value"] {
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Object(_) => "object",
        _ => "none",
    };
    (t.to_string(), p["units"].as_str().unwrap_or("").to_string())
}

/// What cache-d's description says when the parameter does nothing here.
fn inert(p: &Value) -> bool {
    let d = p["description"].as_str().unwrap_or("");
    d.contains("No effect in cache-d") || d.contains("accepted for Varnish's command lines")
}

#[test]
fn params_as_varnishd() {
    if !have("varnishd") || !have("varnishadm") {
        eprintln!("params_as_varnishd: skipped, varnishd or varnishadm is not installed");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let v = Varnishd::start(&tmp.path().join("v"), "127.0.0.1:9");
    let d = Daemon::start(&tmp.path().join("c"), "127.0.0.1:9", &[]);
    let theirs = show_json("varnishadm", &v.dir);
    let ours = show_json(bin("cache-adm").to_str().unwrap(), &d.dir);
    assert!(theirs.len() >= 100, "varnishd lists {} parameters", theirs.len());

    let mut differ = Vec::new();
    for (name, t) in &theirs {
        let Some(o) = ours.get(name) else {
            differ.push(format!("{name}: missing"));
            continue;
        };
        if t["implemented"] != o["implemented"] {
            differ.push(format!("{name}: implemented {} here, {} in varnishd", o["implemented"], t["implemented"]));
        }
        if t["implemented"] == false {
            continue;
        }
        if kind(t) != kind(o) {
            differ.push(format!("{name}: type {:?} here, {:?} in varnishd", kind(o), kind(t)));
        }
        for field in ["minimum", "maximum"] {
            let known = LIMITS_DIFFER.iter().any(|(n, f, _)| n == name && *f == field);
            if t[field] != o[field] && !known {
                differ.push(format!("{name}: {field} {} here, {} in varnishd", o[field], t[field]));
            }
        }
        // Varnish's flags, but must_restart where a parameter does nothing here.
        let flags = |p: &Value| -> Vec<String> {
            let all = p["flags"].as_array().cloned().unwrap_or_default();
            all.iter().filter_map(|f| f.as_str()).filter(|f| *f != "must_restart" || !inert(o)).map(String::from).collect()
        };
        if flags(t) != flags(o) {
            differ.push(format!("{name}: flags {:?} here, {:?} in varnishd", flags(o), flags(t)));
        }
        // Defaults where cache-d gives the parameter a meaning (the inert
        // ones keep varnishd's too, but cc_command and such are the build's).
        if !inert(o) && t["default"] != o["default"] {
            differ.push(format!("{name}: default {} here, {} in varnishd", o["default"], t["default"]));
        }
    }
    let extra: Vec<_> = ours.keys().filter(|n| !theirs.contains_key(*n)).map(String::as_str).collect();
    assert_eq!(extra, OURS, "cache-d's parameters beyond varnishd's are cachekit's own");
    assert!(differ.is_empty(), "param.show -j differs from varnishd's:\n{}", differ.join("\n"));
}

#[test]
fn param_show_lines_and_set_as_varnishd() {
    if !have("varnishd") || !have("varnishadm") {
        eprintln!("param_show_lines_and_set_as_varnishd: skipped, varnishd or varnishadm is not installed");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let v = Varnishd::start(&tmp.path().join("v"), "127.0.0.1:9");
    let d = Daemon::start(&tmp.path().join("c"), "127.0.0.1:9", &[]);
    let adm = bin("cache-adm");
    let theirs = show_json("varnishadm", &v.dir);
    let (their_lines, our_lines) = (show_lines("varnishadm", &v.dir), show_lines(adm.to_str().unwrap(), &d.dir));
    let mut differ = Vec::new();
    for (name, t) in &theirs {
        // Paths and compiler commands are the build's.
        let build = t["flags"].as_array().is_some_and(|f| f.iter().any(|f| f == "build_options"));
        if !build && their_lines.get(name) != our_lines.get(name) {
            differ.push(format!("varnishd: {:?}\ncache-d:  {:?}", their_lines.get(name), our_lines.get(name)));
        }
        // Each of varnishd's defaults is a value cache-d takes (the
        // strings with spaces aside: cache-adm would split them).
        let Some(def) = t["default"].as_str().filter(|s| !s.contains(' ')) else { continue };
        let o = Command::new(&adm).arg("-n").arg(&d.dir).args(["param.set", name, def]).output().unwrap();
        if !o.status.success() {
            differ.push(format!("param.set {name} {def}: {}{}", stdout(&o), stderr(&o)));
        }
    }
    // Values off their defaults show the same in both.
    let set = [
        ("http_req_size", "65536"),
        ("workspace_client", "131072"),
        ("fetch_maxchunksize", "1048576"),
        ("acceptor_sleep_decay", "0.5"),
        ("thread_pool_max", "unlimited"),
        ("pool_req", "1,2,3"),
        ("debug", "+syncvsl,+lck"),
        ("timeout_idle", "1.5"),
        ("default_ttl", "42"),
        ("vsl_mask", "+Hash,-Timestamp"),
    ];
    for (tool, dir) in [("varnishadm", &v.dir), (adm.to_str().unwrap(), &d.dir)] {
        for (name, value) in set {
            let o = Command::new(tool).arg("-n").arg(dir).args(["param.set", name, value]).output().unwrap();
            assert!(o.status.success(), "{tool} param.set {name} {value}: {}", stdout(&o));
        }
    }
    let (their_lines, our_lines) = (show_lines("varnishadm", &v.dir), show_lines(adm.to_str().unwrap(), &d.dir));
    for (name, _) in set {
        if their_lines.get(name) != our_lines.get(name) {
            differ.push(format!("after param.set, varnishd: {:?}\ncache-d:  {:?}", their_lines.get(name), our_lines.get(name)));
        }
    }
    // Refused values: the same words and status.
    let bad = [
        "default_ttl -5",
        "default_ttl abc",
        "acceptor_sleep_decay 2",
        "ban_dups maybe",
        "thread_pools abc",
        "thread_pools 0",
        "http_max_hdr 010",
        "http_req_size lots",
        "http_req_size 1",
        "workspace_thread 1M",
        "pool_req 1,2",
        "pool_req a,2,3",
        "pool_req 1,2,x",
        "pool_req 3,2,1",
        "feature bogus",
        "debug +x",
        "vsl_mask -Foo",
        "no_such_param 1",
    ];
    for words in bad {
        let args: Vec<&str> = std::iter::once("param.set").chain(words.split(' ')).collect();
        let said = |tool: &str, dir: &Path| {
            let o = Command::new(tool).arg("-n").arg(dir).args(&args).output().unwrap();
            format!("{}{}", stdout(&o), stderr(&o)).replace("cache-adm: ", "")
        };
        let (t, o) = (said("varnishadm", &v.dir), said(adm.to_str().unwrap(), &d.dir));
        if t != o {
            differ.push(format!("param.set {words}: varnishd says {t:?}\ncache-d says {o:?}"));
        }
    }
    assert!(differ.is_empty(), "{}", differ.join("\n"));
    // accept_filter is known but not available on Linux, in both.
    for (tool, dir) in [("varnishadm", &v.dir), (adm.to_str().unwrap(), &d.dir)] {
        let o = Command::new(tool).arg("-n").arg(dir).args(["param.set", "accept_filter", "on"]).output().unwrap();
        let said = format!("{}{}", stdout(&o), stderr(&o));
        assert!(said.contains("parameter \"accept_filter\" is not available on this platform."), "{tool}: {said}");
    }
}

/// A request runs with the parameters in force when it arrives: a change
/// made while a kept connection waited for it applies to it (each request
/// keeps one snapshot of them, taken when its head has arrived).
#[test]
fn a_parameter_change_applies_to_the_next_request_on_a_kept_connection() {
    use std::io::{Read, Write};
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start(&tmp.path().join("i"), &format!("127.0.0.1:{}", origin.port), &[]);
    let mut c = std::net::TcpStream::connect(("127.0.0.1", d.port)).unwrap();
    c.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
    let mut get = || {
        c.write_all(b"GET /size/10?max_age=60 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while !got.windows(4).any(|w| w == b"\r\n\r\n") || got.len() < got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4 + 10 {
            let n = c.read(&mut buf).unwrap();
            assert!(n > 0, "closed: {}", String::from_utf8_lossy(&got));
            got.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&got).contains("Accept-Ranges: bytes")
    };
    assert!(get() && get(), "a hit with range support says Accept-Ranges");
    let o = run("cache-adm", &["-n", d.dir.to_str().unwrap(), "param.set", "http_range_support", "off"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!get(), "the same connection's next request runs with the change");
}

/// The kernel send buffer (`ss -m`'s tb) of the server's end of the
/// established connection from local port `client_port`.
fn server_sndbuf(server_port: u16, client_port: u16) -> u64 {
    let filter = format!("( sport = :{server_port} and dport = :{client_port} )");
    let o = Command::new("ss").args(["-tmnH", "state", "established", &filter]).output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    let tb = out.split([',', '(', ')']).find_map(|f| f.strip_prefix("tb"));
    tb.and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("no tb in ss's answer: {out:?}"))
}

#[test]
fn send_buffer_sizes_each_client_socket_accepted_after_a_change() {
    if !have("ss") {
        return;
    }
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start(&tmp.path().join("i"), &format!("127.0.0.1:{}", origin.port), &[]);
    let connect = || {
        let mut c = Client::connect(d.port);
        // One exchange: the connection is accepted and served.
        assert_eq!(c.get("/size/10", "").status, 200);
        let port = c.local_port();
        (c, port)
    };
    // The default, 512k: Linux doubles what is asked.
    let (_first, p1) = connect();
    assert_eq!(server_sndbuf(d.port, p1), 2 * 512 * 1024);
    let o = run("cache-adm", &["-n", d.dir.to_str().unwrap(), "param.set", "send_buffer", "64k"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (_second, p2) = connect();
    assert_eq!(server_sndbuf(d.port, p2), 2 * 64 * 1024, "a connection accepted after the change");
    assert_eq!(server_sndbuf(d.port, p1), 2 * 512 * 1024, "one accepted before keeps its buffer");
}
