//! `-a` arguments: what is accepted, and varnishd's words for what is not.

use super::*;

#[test]
fn tcp_and_unix_listeners_with_names_and_protocols() {
    let s = parse(":8080", 0).unwrap();
    assert_eq!((s.name.as_str(), &s.addr, s.proto), ("a0", &Addr::Tcp(":8080".into()), Proto::Http));
    let s = parse("edge=127.0.0.1:80,PROXY", 3).unwrap();
    assert_eq!((s.name.as_str(), &s.addr, s.proto), ("edge", &Addr::Tcp("127.0.0.1:80".into()), Proto::Proxy));
    assert_eq!(parse("[::1]:80,proxy", 1).unwrap().proto, Proto::Proxy);
    assert_eq!(parse("localhost,http", 1).unwrap().proto, Proto::Http);
    let s = parse("uds=/run/c.sock,PROXY,mode=660,user=root,group=root", 2).unwrap();
    assert_eq!(s.addr, Addr::Unix("/run/c.sock".into()));
    assert_eq!(s.perms, Perms { uid: Some(0), gid: Some(0), mode: Some(0o660) });
    assert_eq!(s.proto, Proto::Proxy);
}

#[test]
fn bad_listeners_are_refused_with_varnishd_words() {
    let err = |s: &str| parse(s, 0).unwrap_err();
    assert_eq!(err(":80,HTTP2"), "Unknown protocol 'HTTP2'");
    assert_eq!(parse(":443,https", 0).unwrap().proto, Proto::Https);
    assert_eq!(err(":80,HTTP,PROXY"), "Too many protocol sub-args in -a (PROXY)");
    assert_eq!(err(":80,mode=600"), "Invalid sub-arg mode=600 for IP addresses in -a");
    assert_eq!(err("run/c.sock"), "Unix domain socket addresses must be absolute paths in -a (run/c.sock)");
    assert_eq!(err("/c.sock,mode="), "Empty mode sub-arg in -a");
    assert_eq!(err("/c.sock,mode=9"), "Invalid mode sub-arg 9 in -a");
    assert_eq!(err("/c.sock,mode=1000"), "Mode sub-arg 1000 out of range in -a");
    assert_eq!(err("/c.sock,mode=0"), "Mode sub-arg 0 out of range in -a");
    assert_eq!(err("/c.sock,mode=600,mode=644"), "Too many mode sub-args in -a (mode=644)");
    assert_eq!(err("/c.sock,user=no-such-user-here"), "Unknown user no-such-user-here in -a");
    assert_eq!(err("/c.sock,group=no-such-group-here"), "Unknown group no-such-group-here in -a");
    assert_eq!(err("/c.sock,colour=blue"), "Invalid sub-arg colour=blue in -a");
    assert_eq!(err("=:80"), "Invalid listen name '' in -a (=:80)");
    assert_eq!(err("a:b=:80"), "Invalid listen name 'a:b' in -a (a:b=:80)");
    assert_eq!(err(""), "Missing address in -a ()");
}

#[test]
fn a_unix_socket_replaces_a_stale_socket_but_never_a_file() {
    let dir = std::env::temp_dir().join(format!("cachekit-listen-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("c.sock");
    let spec = format!("{},mode=640", path.display());
    let first = bind(&spec, 0).unwrap();
    drop(first);
    // The file is still there (closing does not unlink): bound again.
    let again = bind(&spec, 0).unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o640);
    assert_eq!(listen_line(&again[0]).unwrap(), format!("a0 {} -\n", path.display()));
    drop(again);
    std::fs::remove_file(&path).unwrap();
    std::fs::write(&path, b"not a socket").unwrap();
    assert!(bind(&spec, 0).is_err());
    assert_eq!(std::fs::read(&path).unwrap(), b"not a socket");
    std::fs::remove_dir_all(&dir).unwrap();
}
