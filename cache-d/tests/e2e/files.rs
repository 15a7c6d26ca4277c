//! The files cache-d keeps on disk, against other users and other
//! programs (issue 32). Disk stores by the instance directory's rules: no
//! symlink followed at a store's path, stores and bans journals made 0600,
//! a file another user made or others can write refused with its path and
//! what to do. A persistent store cut short while stopped refused at start
//! (or emptied with `,wipe`) rather than a child failing over and over. The
//! segment cut under a running daemon, which goes on.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::*;

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Start cache-d with these stores on instance `dir`; it must refuse
/// them at start (exit 2, within 10 s). Its stderr.
fn refused(dir: &Path, stores: &[&str]) -> String {
    let mut cmd = Command::new(bin("cache-d"));
    cmd.args(["-F", "-a", "127.0.0.1:0", "-b", "127.0.0.1:9", "-n"]).arg(dir);
    for s in stores {
        cmd.args(["-s", s]);
    }
    let mut child = cmd.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let Some(status) = status else {
        // SAFETY: stopping our own child (the manager stops its child).
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let _ = child.wait();
        panic!("cache-d started with {stores:?}: it should have refused them");
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(2), "{err}");
    err
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

#[test]
fn a_symlink_at_a_store_path_is_refused_and_its_target_left_alone() {
    let t = tempfile::tempdir().unwrap();
    let victim = t.path().join("victim");
    std::fs::write(&victim, b"not a cache").unwrap();
    let link = t.path().join("store");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    if is_root() {
        // As in the audit: planted by another user.
        std::os::unix::fs::lchown(&link, Some(65534), Some(65534)).unwrap();
    }
    for kind in ["file", "persistent"] {
        let spec = format!("d={kind},{},8M", link.display());
        let err = refused(&t.path().join("i"), &[&spec]);
        assert!(err.contains(link.to_str().unwrap()) && err.contains("symbolic link"), "{kind}: {err}");
        assert_eq!(std::fs::read(&victim).unwrap(), b"not a cache", "{kind}: the target was written");
    }
    // The bans journal beside a persistent store: the same.
    let dir = t.path().join("p");
    std::fs::create_dir(&dir).unwrap();
    std::os::unix::fs::symlink(&victim, dir.join("d.store.bans")).unwrap();
    let spec = format!("d=persistent,{},8M", dir.display());
    let err = refused(&t.path().join("i"), &[&spec]);
    assert!(err.contains("d.store.bans") && err.contains("symbolic link"), "{err}");
    assert_eq!(std::fs::read(&victim).unwrap(), b"not a cache");
}

#[test]
fn stores_and_bans_journals_are_made_readable_by_their_user_only() {
    let o = Origin::start();
    let t = tempfile::tempdir().unwrap();
    let (p, f) = (format!("d=persistent,{},8M", t.path().display()), format!("b=file,{},8M", t.path().join("bodies").display()));
    let mut d = Daemon::start(&t.path().join("i"), &format!("127.0.0.1:{}", o.port), &["-s", &p, "-s", &f]);
    assert_eq!(Client::connect(d.port).get("/size/10?max_age=600", "").status, 200);
    let ban = run("cache-adm", &["-n", d.dir.to_str().unwrap(), "ban", "req.url", "~", "^/x"]);
    assert!(ban.status.success(), "{}", stderr(&ban));
    for file in ["d.store", "d.store.bans", "bodies"] {
        assert_eq!(mode(&t.path().join(file)), 0o600, "{file}");
    }
    assert_eq!(d.stop(), Some(0));
}

#[test]
fn a_store_file_others_can_write_or_another_user_made_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let inst = t.path().join("i");
    // Made beforehand, 0666: anyone could have written it.
    let open = t.path().join("open.store");
    std::fs::write(&open, b"").unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o666)).unwrap();
    for kind in ["file", "persistent"] {
        let err = refused(&inst, &[&format!("d={kind},{},8M", open.display())]);
        assert!(err.contains(open.to_str().unwrap()) && err.contains("writable by group or others") && err.contains("chmod"), "{err}");
    }
    // A bans journal others can write, beside a persistent store.
    let dir = t.path().join("p");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("d.store.bans"), b"").unwrap();
    std::fs::set_permissions(dir.join("d.store.bans"), std::fs::Permissions::from_mode(0o622)).unwrap();
    let err = refused(&inst, &[&format!("d=persistent,{},8M", dir.display())]);
    assert!(err.contains("d.store.bans") && err.contains("writable by group or others"), "{err}");
    // A directory others can write (not sticky): refused, nothing made.
    let shared = t.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    let err = refused(&inst, &[&format!("d=file,{},8M", shared.display())]);
    assert!(err.contains(shared.to_str().unwrap()) && err.contains("go-w"), "{err}");
    assert!(!shared.join("d.store").exists());
    if !is_root() {
        eprintln!("skipped the other user's store: only root can give a file to another user (CI runs as root)");
        return;
    }
    // Made by another user (even 0600): refused, left as it is.
    let theirs = t.path().join("theirs.store");
    std::fs::write(&theirs, b"theirs").unwrap();
    std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    for kind in ["file", "persistent"] {
        let err = refused(&inst, &[&format!("d={kind},{},8M", theirs.display())]);
        assert!(err.contains(theirs.to_str().unwrap()) && err.contains("uid 65534"), "{err}");
        assert_eq!(std::fs::read(&theirs).unwrap(), b"theirs");
        assert_eq!(std::fs::metadata(&theirs).unwrap().uid(), 65534);
    }
}

/// Regression (issue 32): a persistent store cut short while stopped
/// passed the start check; the child then failed to read it back at every
/// start, while the port accepted and served nothing.
#[test]
fn a_persistent_store_truncated_while_stopped_is_refused_or_wiped() {
    let o = Origin::start();
    let t = tempfile::tempdir().unwrap();
    let backend = format!("127.0.0.1:{}", o.port);
    let spec = format!("d=persistent,{},8M", t.path().display());
    let inst = t.path().join("i");
    let mut d = Daemon::start(&inst, &backend, &["-s", &spec]);
    assert_eq!(Client::connect(d.port).get("/size/10?max_age=600", "").status, 200);
    assert_eq!(d.stop(), Some(0));
    let file = t.path().join("d.store");
    std::fs::OpenOptions::new().write(true).open(&file).unwrap().set_len(4 << 20).unwrap();
    let err = refused(&inst, &[&spec]);
    assert!(err.contains(file.to_str().unwrap()) && err.contains("truncated") && err.contains(",wipe"), "{err}");
    // Emptied when asked.
    let wiped = format!("{spec},wipe");
    let d = Daemon::start(&inst, &backend, &["-s", &wiped]);
    assert_eq!(Client::connect(d.port).get("/size/10?max_age=600", "").body.len(), 10);
    assert_eq!(std::fs::metadata(&file).unwrap().len(), 8 << 20);
    assert_eq!(counter(&stat(&d.dir), "MGT.child_start"), Some(1));
}

/// Regression (issue 32): a segment cut under a running cache-d killed the
/// manager with SIGBUS (and the child). Both go on; the manager says once
/// on stderr that the segment was cut and what to do.
#[test]
fn a_segment_truncated_under_a_running_cache_d_leaves_it_serving() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("i");
    let err_path = tmp.path().join("stderr");
    let manager = std::process::Command::new(bin("cache-d"))
        .args(["-F", "-a", "127.0.0.1:0", "-b", &format!("127.0.0.1:{}", origin.port), "-n"])
        .arg(&dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    let port = wait_for(10, "cache-d to listen", || {
        std::fs::read_to_string(dir.join("_.listen")).ok()?.lines().next()?.split(' ').nth(2)?.parse().ok()
    });
    // (A Daemon: stopped when the test ends, however it ends.)
    let mut d = Daemon { child: Some(manager), dir: dir.clone(), port };
    let mut c = Client::connect(port);
    assert_eq!(c.get("/size/3", "").status, 200);
    std::fs::OpenOptions::new().write(true).open(dir.join("_.segment")).unwrap().set_len(4096).unwrap();
    // The child counts every request in the segment; the manager writes
    // its uptime and heartbeat there every second.
    let said = wait_for(10, "the manager to say the segment was cut", || {
        assert_eq!(c.get("/size/5", "").status, 200, "served on the same connection: the child lives");
        let text = std::fs::read_to_string(&err_path).unwrap();
        (text.contains("was cut to 4096 bytes") && text.contains(dir.to_str().unwrap())).then_some(text)
    });
    assert!(said.contains("restart cache-d"), "{said}");
    assert!(d.child.as_mut().unwrap().try_wait().unwrap().is_none(), "the manager died");
    assert_eq!(c.get("/size/7", "").status, 200);
    assert_eq!(d.stop(), Some(0), "a clean stop: {}", std::fs::read_to_string(&err_path).unwrap());
    let text = std::fs::read_to_string(&err_path).unwrap();
    assert_eq!(text.matches("was cut").count(), 1, "said once: {text}");
}
