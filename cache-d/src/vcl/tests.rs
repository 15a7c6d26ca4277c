//! Parser tests: a realistic policy parses into the expected shape; errors
//! point at file, line and column; old spellings get migration hints.

use super::ast::*;
use super::*;

const WORDPRESS: &str = r#"
vcl 4.1;
import std;

backend default {
    .host = "127.0.0.1";
    .port = "8080";
    .connect_timeout = 3.5s;
    .probe = {
        .url = "/healthz";
        .interval = 5s;
        .window = 5;
        .threshold = 3;
    }
}

acl purgers {
    "localhost";
    "127.0.0.1";
    "10.0.0.0"/8;
    ! "10.0.0.13";
}

sub vcl_recv {
    if (req.method == "PURGE") {
        if (!client.ip ~ purgers) {
            return (synth(405, "Not allowed."));
        }
        return (purge);
    }
    if (req.url ~ "^/wp-(admin|login)" || req.http.Cookie ~ "wordpress_logged_in_") {
        return (pass);
    } elseif (req.url ~ "\.(css|js|png|jpg)(\?.*)?$") {
        unset req.http.Cookie;
    } else {
        set req.http.Cookie = regsuball(req.http.Cookie, "(^|;\s*)(_ga|_gid)=[^;]*", "");
    }
    set req.http.X-Forwarded-Proto = "https";
    std.log("recv:" + req.url);
}

sub vcl_backend_response {
    if (bereq.url ~ "\.(css|js|png|jpg)$") {
        set beresp.ttl = 7d;
        set beresp.grace = 1h + 30m;
    }
    if (beresp.status >= 500 && beresp.status < 600) {
        return (abandon);
    }
}

sub vcl_deliver {
    set resp.http.X-Cache = {"hit or "} + "miss";
    call log_it;
}

sub log_it { std.log("done"); }
"#;

fn subs(p: &Program) -> Vec<&str> {
    p.items.iter().filter_map(|i| if let Item::Sub { name, .. } = i { Some(name.as_str()) } else { None }).collect()
}

#[test]
fn a_realistic_policy_parses() {
    let p = parse_source("wordpress.vcl", WORDPRESS).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(subs(&p), vec!["vcl_recv", "vcl_backend_response", "vcl_deliver", "log_it"]);
    let acl = p.items.iter().find_map(|i| if let Item::Acl { entries, .. } = i { Some(entries) } else { None }).unwrap();
    assert_eq!(acl.len(), 4);
    assert_eq!((acl[2].addr.as_str(), acl[2].mask), ("10.0.0.0", Some(8)));
    assert!(acl[3].negated);
    let be = p.items.iter().find_map(|i| if let Item::Backend { fields, .. } = i { Some(fields) } else { None }).unwrap();
    assert!(matches!(be[3].value, FieldValue::Block(ref f) if f.len() == 4));
    let recv = p
        .items
        .iter()
        .find_map(|i| if let Item::Sub { name, body, .. } = i { (name == "vcl_recv").then_some(body) } else { None })
        .unwrap();
    let Stmt::If { branches, otherwise, .. } = &recv[1] else { panic!("{:?}", recv[1]) };
    assert_eq!(branches.len(), 2);
    assert!(otherwise.is_some());
    // Precedence: || binds looser than ~.
    assert!(matches!(&branches[0].0, Expr::Binary { op: "||", .. }));
    let Stmt::If { branches: purge, .. } = &recv[0] else { panic!() };
    assert!(matches!(&purge[0].1[1], Stmt::Return { action, args, .. } if action == "purge" && args.is_empty()));
    let Stmt::If { branches: deny, .. } = &purge[0].1[0] else { panic!() };
    assert!(matches!(&deny[0].0, Expr::Not(..)), "! applies to the comparison");
    assert!(matches!(&deny[0].1[0], Stmt::Return { action, args, .. } if action == "synth" && args.len() == 2));
}

#[test]
fn errors_point_at_file_line_and_column() {
    let e = parse_source("t.vcl", "vcl 4.1;\nsub vcl_recv {\n    set req.url = \"x\" xyz;\n}\n").unwrap_err();
    let text = e.to_string();
    assert!(text.starts_with("Expected ';' got 'xyz'\n('t.vcl' Line 3 Pos 23)"), "{text}");
    let e = parse_source("t.vcl", "vcl 4.1;\nsub vcl_recv {\n    if (req.url ~ \"a\" {\n").unwrap_err();
    assert!(e.to_string().contains("Line 3"), "{e}");
    let e = parse_source("t.vcl", "vcl 4.1;\nsub vcl_recv { set req.url = \"unterminated; }\n").unwrap_err();
    assert!(e.to_string().contains("Unterminated string"), "{e}");
    let e = parse_source("t.vcl", "vcl 5.0;").unwrap_err();
    assert!(e.to_string().contains("not supported"), "{e}");
}

#[test]
fn varnish_2_and_3_spellings_get_hints() {
    for (src, hint) in [
        ("sub vcl_recv { lookup; }", "return (hash);"),
        ("sub vcl_recv { pass; }", "return (pass);"),
        ("sub vcl_recv { error 404 \"gone\"; }", "synth"),
        ("sub vcl_fetch { }", "vcl_backend_response"),
        ("sub vcl_error { }", "vcl_synth"),
        ("sub vcl_recv { purge(\"x\"); }", "ban("),
        ("sub vcl_recv { remove req.http.x; }", "unset"),
    ] {
        let e = parse_source("old.vcl", &format!("vcl 4.1;\n{src}\n")).unwrap_err().to_string();
        assert!(e.contains(hint), "{src}: {e}");
        assert!(e.contains("Line 2"), "{src}: {e}");
    }
}

#[test]
fn includes_are_expanded_and_their_errors_named() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("main.vcl"), "vcl 4.1;\ninclude \"sub.vcl\";\nsub vcl_deliver { }\n").unwrap();
    std::fs::write(dir.path().join("sub.vcl"), "sub vcl_recv { return (pass); }\n").unwrap();
    let p = parse_file(&dir.path().join("main.vcl")).unwrap();
    assert_eq!(subs(&p), vec!["vcl_recv", "vcl_deliver"]);
    assert_eq!(p.files.len(), 2);
    std::fs::write(dir.path().join("sub.vcl"), "sub vcl_recv { return pass; }\n").unwrap();
    let e = parse_file(&dir.path().join("main.vcl")).unwrap_err().to_string();
    assert!(e.contains("sub.vcl' Line 1"), "{e}");
    std::fs::write(dir.path().join("sub.vcl"), "include \"sub.vcl\";\n").unwrap();
    assert!(parse_file(&dir.path().join("main.vcl")).unwrap_err().to_string().contains("too deep"));
}

#[test]
fn garbage_never_panics() {
    let mut x = 0x1234_5678_9abc_def0u64;
    for n in 0..2000 {
        let len = n % 200;
        let bytes: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let alphabet = b"{}();=~!<>&|+-*/\"#. \nabcsetifreturn0123456789";
                alphabet[(x % alphabet.len() as u64) as usize]
            })
            .collect();
        let _ = parse_source("fuzz.vcl", &String::from_utf8_lossy(&bytes));
    }
}

#[test]
fn files_not_known_to_be_vcl_are_not_quoted() {
    let dir = tempfile::tempdir().unwrap();
    let w = |n: &str, t: &str| {
        std::fs::write(dir.path().join(n), t).unwrap();
        dir.path().join(n)
    };
    let shadow = w("shadow", "root:$6$SECRET:19000:0:99999:7:::\n");
    let e = parse_file(&shadow).unwrap_err().to_string();
    assert!(!e.contains("SECRET") && e.contains("Line 1 Pos 5"), "{e}");
    let e = parse_file(&w("words", "hunter2 is the password\n")).unwrap_err().to_string();
    assert!(!e.contains("hunter2") && e.contains("declaration missing"), "{e}");
    let e = parse_file(&w("main.vcl", "vcl 4.1;\ninclude \"shadow\";\n")).unwrap_err().to_string();
    assert!(!e.contains("SECRET") && e.contains("shadow' Line 1 Pos 5"), "{e}");
    let e = parse_file(&w("str.vcl", "vcl 4.1;\ninclude \"open.vcl\";\n")).unwrap_err().to_string();
    assert!(e.contains("Cannot read") && e.contains("16 MiB"), "{e}");
    w("open.vcl", "sub vcl_recv { set req.url = \"SECRET; }\n");
    let e = parse_file(&dir.path().join("str.vcl")).unwrap_err().to_string();
    assert!(e.contains("Unterminated string") && !e.contains("SECRET"), "{e}");
    // A file that says it is VCL is quoted as VCC quotes it.
    let e = parse_file(&w("bad.vcl", "# c\n/* c */ vcl 4.1;\nsub vcl_recv { set req.url = \"x\" y; }\n")).unwrap_err().to_string();
    assert!(e.contains("set req.url = \"x\" y;"), "{e}");
    assert!(declares_vcl("// c\n\tvcl 4.0;") && !declares_vcl("vclx 4.1;") && !declares_vcl("/* vcl 4.1;"));
}

#[test]
fn include_glob_and_inline_c() {
    assert!(super::glob_match(b"sub_*.vcl", b"sub_foo.vcl"));
    assert!(super::glob_match(b"s?b_*", b"sub_"));
    assert!(!super::glob_match(b"sub_*.vcl", b"sub_foo.vc"));
    let dir = std::env::temp_dir().join(format!("cachekit-glob-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for n in ["b.vcl", "a.vcl", ".h.vcl", "c.txt"] {
        std::fs::write(dir.join(n), "").unwrap();
    }
    let got = super::glob_files(&dir.join("*.vcl"));
    assert_eq!(got, vec![dir.join("a.vcl"), dir.join("b.vcl")]);
    assert!(super::glob_files(&dir.join("Q*.vcl")).is_empty());
    std::fs::remove_dir_all(&dir).unwrap();
    let e = parse_source("t.vcl", "vcl 4.1;\nC{ x }C\n").unwrap_err().to_string();
    assert!(e.contains("Inline-C not allowed"), "{e}");
}

#[test]
fn string_methods() {
    let p = parse_source(
        "t.vcl",
        "vcl 4.1;\nsub vcl_recv { set req.http.a = req.http.x.upper(); set req.http.b = req.http.\"y.z\".lower(); }\n",
    )
    .unwrap();
    let Item::Sub { body, .. } = &p.items[1] else { panic!() };
    let Stmt::Set { value: Expr::Call { name, args, .. }, .. } = &body[0] else { panic!() };
    assert_eq!((name.as_str(), &args[0]), (".upper", &Expr::Name("req.http.x".into(), args[0].pos())));
    let Stmt::Set { value: Expr::Call { name, args, .. }, .. } = &body[1] else { panic!() };
    assert_eq!((name.as_str(), &args[0]), (".lower", &Expr::Name("req.http.y.z".into(), args[0].pos())));
}
