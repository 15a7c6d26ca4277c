//! vmod tcp's set_socket_pace() has an effect varnishtest cannot see
//! (conformance scenario c0978 checks what both servers log): the kernel
//! paces what cache-d sends on the paced connection.

use std::time::{Duration, Instant};

use crate::util::*;

#[test]
fn set_socket_pace_slows_the_connection_to_its_rate() {
    let tmp = tempfile::tempdir().unwrap();
    // 768 KiB: at 256 KB/s the kernel spreads it over about two seconds
    // (the first packets leave at once); unpaced, loopback takes
    // milliseconds.
    let big = tmp.path().join("big");
    std::fs::write(&big, vec![b'x'; 768 * 1024]).unwrap();
    let vcl = tmp.path().join("pace.vcl");
    std::fs::write(
        &vcl,
        format!(
            r#"vcl 4.1;
import std;
import tcp;
backend default {{ .host = "127.0.0.1"; .port = "9"; }}
sub vcl_recv {{
    return (synth(200));
}}
sub vcl_synth {{
    if (req.url == "/paced") {{
        tcp.set_socket_pace(256);
    }}
    synthetic(std.fileread("{}"));
    return (deliver);
}}
"#,
            big.display()
        ),
    )
    .unwrap();
    let d = Daemon::start_args(&tmp.path().join("i"), &["-f", vcl.to_str().unwrap()]);
    let timed = |path: &str| {
        let mut c = Client::connect(d.port);
        let t = Instant::now();
        let r = c.get(path, "");
        assert_eq!((r.status, r.body.len()), (200, 768 * 1024), "{path}");
        t.elapsed()
    };
    let plain = timed("/plain");
    let paced = timed("/paced");
    assert!(paced >= Duration::from_millis(1000), "paced at 256 KB/s, 768 KiB took {paced:?}");
    assert!(plain < paced / 2, "unpaced {plain:?}, paced {paced:?}");
}
