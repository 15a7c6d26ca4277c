#!/usr/bin/env python3
"""The Debian package's install test (issue 35): the package as an operator
meets it, in a clean Debian root.

  1. lintian finds no error and no warning in cachekit_*.deb and its
     cachekit-dbgsym_*.deb;
  2. mmdebstrap makes a minimal root of this machine's Debian release (with
     adduser and systemd, which the package's maintainer scripts and unit
     check use); both packages install there with dpkg, quietly;
  3. the unit passes `systemd-analyze verify`; the cachekit user, its state
     and log directories exist; the units are enabled;
  4. cache-d starts as cache-d.service would start it: its ExecStart with
     the unit's Environment= and /etc/default/cachekit expanded as systemd
     expands them, as user cachekit, with NOTIFY_SOCKET (Type=notify: it must
     say READY=1); it serves from the package's cache-bench origin, hits
     included; cache-adm and cache-stat find the instance as the unit names it;
  5. the unit's ExecReload loads a changed policy (seen in responses) and
     refuses a broken one (the running policy stays);
  6. SIGTERM, as `systemctl stop`, stops every process of the user;
  7. installing it again (an upgrade's path through the maintainer
     scripts), removing it (the conffiles and user stay), purging it
     (everything goes: files, user, group, state, unit links).

Needs root, mmdebstrap and a Debian mirror apt can reach. Without a DEB
argument it packages the debug build (scripts/package.sh). The debug
information's file is found under the binary's build id.

Usage: scripts/install-test.py [--keep] [DEB]
Exit: 0 passed, 1 a check failed, 2 usage or cannot run here.
"""

import argparse
import glob
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
checks = 0


def say(msg):
    print(f"install-test: {msg}", flush=True)


def fail(msg):
    print(f"install-test: FAILED: {msg}", file=sys.stderr, flush=True)
    raise SystemExit(1)


def check(cond, msg):
    global checks
    checks += 1
    if not cond:
        fail(msg)


def run(argv, ok=True, **kw):
    p = subprocess.run(argv, capture_output=True, text=True, **kw)
    if ok and p.returncode != 0:
        fail(f"{' '.join(argv)}: exit {p.returncode}\n{p.stdout}{p.stderr}")
    return p


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build_package(out):
    """The debug build packaged (what the tests already built)."""
    env = dict(os.environ, CACHEKIT_PACKAGE_PROFILE="debug", CACHEKIT_PACKAGE_OUT=out)
    say("packaging the debug build (scripts/package.sh)")
    p = run(["bash", os.path.join(REPO, "scripts/package.sh")], env=env)
    return p.stdout.strip()


def lint(debs):
    if not shutil.which("lintian"):
        say("lintian not installed: the package's lint check skipped")
        return
    say("lintian " + " ".join(os.path.basename(d) for d in debs))
    p = run(["lintian", "--fail-on", "error,warning", *debs], ok=False)
    tags = [line for line in p.stdout.splitlines() if re.match(r"^[EW]: ", line)]
    check(p.returncode == 0 and not tags, "lintian: " + "\n".join(tags or [p.stdout + p.stderr]))


def make_root(root, deb):
    """A minimal root with what the package depends on and nothing more
    (systemd for `systemd-analyze verify`): dpkg -i there fails if Depends
    lacks something the package runs."""
    depends = run(["dpkg-deb", "-f", deb, "Depends"]).stdout
    names = sorted({re.split(r"[ (:]", d.strip().split("|")[0].strip())[0] for d in depends.split(",") if d.strip()})
    codename = "bookworm"
    with open("/etc/os-release") as f:
        for line in f:
            if line.startswith("VERSION_CODENAME="):
                codename = line.split("=", 1)[1].strip().strip('"') or codename
    say(f"mmdebstrap: a minimal {codename} root with {', '.join(names)}")
    t = time.time()
    run(["mmdebstrap", "--quiet", "--variant=minbase", "--include=" + ",".join(names + ["systemd"]), codename, root])
    say(f"root made in {time.time() - t:.0f} s")


def in_root(root, argv, user=None, env=None, ok=True, **kw):
    pre = ["chroot"] + ([f"--userspec={user}:{user}"] if user else []) + [root]
    return run(pre + argv, ok=ok, env=env or {"PATH": PATH, "LC_ALL": "C"}, **kw)


def install(root, debs, what):
    for d in debs:
        shutil.copy(d, os.path.join(root, "tmp"))
    names = ["/tmp/" + os.path.basename(d) for d in debs]
    p = in_root(root, ["dpkg", "-i", *names])
    noise = [line for line in (p.stdout + p.stderr).splitlines() if re.search(r"warn|error|can't|cannot", line, re.I)]
    check(not noise, f"{what}: dpkg -i said:\n" + "\n".join(noise))


def parse_unit(path):
    """The unit's [Service] settings: each key's values in order."""
    unit = {}
    section = None
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line[0] in "#;":
                continue
            if line.startswith("["):
                section = line
                continue
            if section == "[Service]" and "=" in line:
                k, v = line.split("=", 1)
                unit.setdefault(k, []).append(v)
    return unit


def unit_env(root, unit):
    """Environment= then EnvironmentFile=, as systemd reads them, with what
    systemd sets for a User= service."""
    env = {"PATH": PATH, "LANG": "C.UTF-8"}
    for line in unit.get("Environment", []):
        for word in shlex.split(line):
            k, v = word.split("=", 1)
            env[k] = v
    for spec in unit.get("EnvironmentFile", []):
        optional = spec.startswith("-")
        path = os.path.join(root, spec.lstrip("-").lstrip("/"))
        if not os.path.exists(path):
            check(optional, f"EnvironmentFile {spec} is missing")
            continue
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line and not line.startswith(("#", ";")) and "=" in line:
                    k, v = line.split("=", 1)
                    words = shlex.split(v)
                    env[k.strip()] = " ".join(words) if words else ""
    user = unit["User"][0]
    env.update(USER=user, LOGNAME=user, HOME="/var/lib/cachekit", SHELL="/usr/sbin/nologin")
    return env


def expand(cmdline, env):
    """ExecStart's words with systemd's expansion: ${VAR} in place, a word
    that is exactly $VAR split at whitespace."""
    out = []
    for word in shlex.split(cmdline):
        m = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", word)
        if m:
            out.extend(env.get(m.group(1), "").split())
            continue
        out.append(re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda m: env.get(m.group(1), ""), word))
    return out


def get(port, path, tries=1):
    last = None
    for _ in range(tries):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read()
        except OSError as e:
            last = e
            time.sleep(0.2)
    fail(f"GET {path} on port {port}: {last}")


def configure(root, listen, admin, origin):
    """What an operator does after installing: /etc/default/cachekit's
    addresses, and the backend in default.vcl pointed at the origin."""
    path = os.path.join(root, "etc/default/cachekit")
    with open(path) as f:
        text = f.read()
    text = re.sub(r"(?m)^CACHEKIT_LISTEN=.*$", f"CACHEKIT_LISTEN=127.0.0.1:{listen}", text)
    text = re.sub(r"(?m)^CACHEKIT_ADMIN=.*$", f"CACHEKIT_ADMIN=127.0.0.1:{admin}", text)
    with open(path, "w") as f:
        f.write(text)
    vcl = os.path.join(root, "etc/cachekit/default.vcl")
    with open(vcl) as f:
        text = f.read()
    check('.port = "8080";' in text, "default.vcl's backend is 127.0.0.1:8080")
    with open(vcl, "w") as f:
        f.write(text.replace('.port = "8080";', f'.port = "{origin}";'))


def start_unit(root, unit, env):
    """A unit's process as systemd starts it: its directories, the user, the
    expanded ExecStart; for Type=notify, a notify socket that must hear
    READY=1."""
    user = unit["User"][0]
    dirs = (("StateDirectory", "var/lib"), ("CacheDirectory", "var/cache"), ("LogsDirectory", "var/log"), ("RuntimeDirectory", "run"))
    for key, base in dirs:
        for name in unit.get(key, []):
            d = os.path.join(root, base, name)
            os.makedirs(d, exist_ok=True)
            run(["chroot", root, "chown", f"{user}:{unit['Group'][0]}", "/" + os.path.join(base, name)])
            os.chmod(d, int(unit.get(key + "Mode", ["0755"])[0], 8))
    argv = expand(unit["ExecStart"][0], env)
    say("ExecStart: " + " ".join(argv))
    if unit.get("Type") != ["notify"]:
        proc = subprocess.Popen(["chroot", f"--userspec={user}:{user}", root] + argv, env=env)
        time.sleep(1)
        check(proc.poll() is None, f"{argv[0]} exited {proc.returncode} at start")
        return proc
    sock_path = os.path.join(root, "run/cachekit-notify.sock")
    if os.path.exists(sock_path):
        os.unlink(sock_path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(sock_path)
    os.chmod(sock_path, 0o777)
    sock.settimeout(1)
    child_env = dict(env, NOTIFY_SOCKET="/run/cachekit-notify.sock")
    proc = subprocess.Popen(["chroot", f"--userspec={user}:{user}", root] + argv, env=child_env)
    deadline = time.time() + 60
    heard = []
    while time.time() < deadline and not any("READY=1" in h for h in heard):
        if proc.poll() is not None:
            fail(f"cache-d exited with {proc.returncode} before READY=1")
        try:
            heard.append(sock.recv(4096).decode())
        except socket.timeout:
            pass
    sock.close()
    check(any("READY=1" in h for h in heard), f"cache-d did not notify READY=1 in 60 s (heard {heard})")
    say("cache-d notified READY=1")
    return proc


def serve(root, env, port, origin_port):
    status, headers, body = get(port, "/hello", tries=50)
    check(status == 200 and body, f"GET /hello: {status} {body[:80]!r}")
    status2, headers2, body2 = get(port, "/hello")
    check(status2 == 200 and body2 == body, "the second GET /hello answers the same body")
    check(len(headers2.get("X-Varnish", "").split()) == 2, f"the second GET /hello is a hit: X-Varnish {headers2.get('X-Varnish')}")
    _, _, big = get(port, "/size/300000")
    check(len(big) == 300000, f"/size/300000 answered {len(big)} bytes")
    _, _, direct = get(origin_port, "/size/300000")
    check(big == direct, "/size/300000 is the origin's body")
    adm = in_root(root, ["cache-adm", "-n", "cache-d", "status"], user="cachekit", env=env)
    check("running" in adm.stdout, f"cache-adm -n cache-d status: {adm.stdout}")
    stat = in_root(root, ["cache-stat", "-n", "cache-d", "-1", "-f", "MAIN.cache_hit"], user="cachekit", env=env)
    hits = re.search(r"MAIN\.cache_hit\s+(\d+)", stat.stdout)
    check(hits and int(hits.group(1)) >= 1, f"cache-stat -1: {stat.stdout}")
    say(f"served: a miss, a hit, 300,000 bytes; cache-adm and cache-stat see the instance ({hits.group(1)} hits)")


def reload(root, unit, env, port):
    vcl = os.path.join(root, "etc/cachekit/default.vcl")
    with open(vcl) as f:
        good = f.read()
    changed = good.replace("sub vcl_deliver {", 'sub vcl_deliver {\n    set resp.http.X-Policy = "reloaded";', 1)
    check(changed != good, "default.vcl has a vcl_deliver to change")
    with open(vcl, "w") as f:
        f.write(changed)
    argv = expand(unit["ExecReload"][0], env)
    in_root(root, argv, user="cachekit", env=env)
    _, headers, _ = get(port, "/hello")
    check(headers.get("X-Policy") == "reloaded", f"after ExecReload: X-Policy {headers.get('X-Policy')}")
    with open(vcl, "w") as f:
        f.write(changed.replace("sub vcl_recv {", "sub vcl_recv {\n    set req.http.X = ;", 1))
    p = in_root(root, argv, user="cachekit", env=env, ok=False)
    check(p.returncode != 0, "ExecReload of a broken policy fails")
    check(re.search(r"[Ll]ine \d+", p.stdout + p.stderr), f"the refusal names a line:\n{p.stdout}{p.stderr}")
    _, headers, _ = get(port, "/hello")
    check(headers.get("X-Policy") == "reloaded", "the running policy stays after a refused reload")
    with open(vcl, "w") as f:
        f.write(good)
    say("ExecReload: a changed policy serves; a broken one is refused and the running one stays")


def access_log(root, unit, env, port):
    """cache-ncsa as its unit runs it: a request's line in
    /var/log/cachekit/access.log; logrotate's move and ExecReload (SIGHUP)
    start a new file that gets the next line."""
    proc = start_unit(root, unit, env)
    log = os.path.join(root, "var/log/cachekit/access.log")

    def logged(path, url):
        deadline = time.time() + 10
        while time.time() < deadline:
            if os.path.exists(path) and f"GET http://127.0.0.1:{port}{url} " in open(path).read():
                return True
            time.sleep(0.2)
        return False

    get(port, "/logged-1")
    check(logged(log, "/logged-1"), f"access.log lacks /logged-1: {open(log).read() if os.path.exists(log) else 'no file'}")
    os.rename(log, log + ".1")
    reload_env = dict(env, MAINPID=str(proc.pid))
    in_root(root, expand(unit["ExecReload"][0], reload_env), user="cachekit", env=reload_env)
    get(port, "/logged-2")
    check(logged(log, "/logged-2"), "after the move and ExecReload, the new access.log lacks /logged-2")
    check("/logged-2" not in open(log + ".1").read(), "the moved access.log got /logged-2")
    proc.send_signal(signal.SIGTERM)
    check(proc.wait(timeout=10) == 0, "cache-ncsa exits 0 on SIGTERM")
    say("cache-ncsa's unit: access.log written, moved, reopened on ExecReload")


def uid_processes(uid):
    pids = []
    for status in glob.glob("/proc/[0-9]*/status"):
        try:
            with open(status) as f:
                for line in f:
                    if line.startswith("Uid:") and int(line.split()[1]) == uid:
                        pids.append(int(status.split("/")[2]))
        except OSError:
            pass
    return pids


def stop(proc, uid):
    proc.send_signal(signal.SIGTERM)
    try:
        rc = proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        fail("cache-d did not exit within 30 s of SIGTERM")
    check(rc == 0, f"cache-d exited {rc} on SIGTERM")
    deadline = time.time() + 10
    while uid_processes(uid) and time.time() < deadline:
        time.sleep(0.2)
    check(not uid_processes(uid), f"processes of user cachekit left after the stop: {uid_processes(uid)}")
    say("SIGTERM: cache-d exited 0, no process of user cachekit left")


def remove_and_purge(root, debs):
    files = in_root(root, ["dpkg", "-L", "cachekit"]).stdout.split()
    wants = os.path.join(root, "etc/systemd/system/multi-user.target.wants")
    in_root(root, ["dpkg", "-r", "cachekit-dbgsym", "cachekit"])
    check(not os.path.exists(os.path.join(root, "usr/bin/cache-d")), "dpkg -r removes /usr/bin/cache-d")
    check(os.path.exists(os.path.join(root, "etc/cachekit/default.vcl")), "dpkg -r keeps the conffiles")
    check(in_root(root, ["getent", "passwd", "cachekit"], ok=False).returncode == 0, "dpkg -r keeps the user")
    in_root(root, ["dpkg", "-P", "cachekit-dbgsym", "cachekit"])
    left = [f for f in files if f not in ("/.",) and os.path.lexists(os.path.join(root, f.lstrip("/"))) and not os.path.isdir(os.path.join(root, f.lstrip("/")))]
    check(not left, f"files left after purge: {left}")
    for d in ("etc/cachekit", "var/lib/cachekit", "var/log/cachekit", "var/cache/cachekit", "usr/share/doc/cachekit"):
        check(not os.path.exists(os.path.join(root, d)), f"/{d} is left after purge")
    for getent in (["passwd", "cachekit"], ["group", "cachekit"]):
        check(in_root(root, ["getent", *getent], ok=False).returncode != 0, f"the {getent[0]} entry cachekit is left after purge")
    links = glob.glob(os.path.join(root, "etc/systemd/system/**/cache-*"), recursive=True)
    links += glob.glob(os.path.join(wants, "cache-*"))
    check(not links, f"unit links left after purge: {links}")
    state = glob.glob(os.path.join(root, "var/lib/systemd/deb-systemd-helper-*/**/cache-*"), recursive=True)
    check(not state, f"deb-systemd-helper state left after purge: {state}")
    say(f"removed (conffiles and user kept), purged ({len(files)} paths, user, group, state and unit links gone)")


def installed(root, debs):
    install(root, debs, "install")
    user = in_root(root, ["getent", "passwd", "cachekit"]).stdout.strip().split(":")
    check(user[5] == "/var/lib/cachekit" and user[6] == "/usr/sbin/nologin", f"the cachekit user: {user}")
    for d in ("var/lib/cachekit", "var/log/cachekit"):
        st = os.stat(os.path.join(root, d))
        check(st.st_uid == int(user[2]) and (st.st_mode & 0o777) == 0o750, f"/{d}: owner {st.st_uid}, mode {oct(st.st_mode)}")
    wants = os.path.join(root, "etc/systemd/system/multi-user.target.wants")
    for u in ("cache-d.service", "cache-ncsa.service", "cache-stat-exporter.service"):
        check(os.path.islink(os.path.join(wants, u)), f"{u} is not enabled")
        p = in_root(root, ["systemd-analyze", "verify", "--man=no", f"/lib/systemd/system/{u}"], ok=False)
        check(p.returncode == 0 and not p.stderr.strip(), f"systemd-analyze verify {u}: {p.stdout}{p.stderr}")
    binary = os.path.join(root, "usr/bin/cache-d")
    bid = re.search(r"Build ID: ([0-9a-f]+)", run(["readelf", "-n", binary]).stdout)
    check(bid, "cache-d has a build id")
    dbgfile = os.path.join(root, "usr/lib/debug/.build-id", bid.group(1)[:2], bid.group(1)[2:] + ".debug")
    check(os.path.exists(dbgfile), f"the dbgsym package has cache-d's debug information ({dbgfile})")
    check(".debug_info" in run(["readelf", "-S", "-W", dbgfile]).stdout, "the debug file has .debug_info")
    check(".debug_info" not in run(["readelf", "-S", "-W", binary]).stdout, "the installed cache-d is stripped")
    say("installed quietly: user, directories, enabled units that systemd-analyze verifies, debug information by build id")
    return int(user[2])


def main():
    ap = argparse.ArgumentParser(description="Install the Debian package into a clean root and run it as its unit would.")
    ap.add_argument("deb", nargs="?", help="cachekit_*.deb (default: package the debug build)")
    ap.add_argument("--keep", action="store_true", help="keep the root (its path is printed)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("install-test: needs root (chroot, dpkg in the root)", file=sys.stderr)
        raise SystemExit(2)
    if not shutil.which("mmdebstrap"):
        print("install-test: needs mmdebstrap (apt-get install mmdebstrap)", file=sys.stderr)
        raise SystemExit(2)
    work = tempfile.mkdtemp(prefix="cachekit-install-")
    # package.sh stages in OUT/root: its own directory, not the test's root.
    deb = args.deb or build_package(os.path.join(work, "pkg"))
    dbgsym = os.path.join(os.path.dirname(deb), os.path.basename(deb).replace("cachekit_", "cachekit-dbgsym_", 1))
    debs = [deb] + ([dbgsym] if os.path.exists(dbgsym) else [])
    check(len(debs) == 2, f"no {dbgsym} beside {deb}")
    lint(debs)
    root = os.path.join(work, "root")
    procs = []
    mounted = False
    try:
        make_root(root, deb)
        run(["mount", "-t", "proc", "proc", os.path.join(root, "proc")])
        mounted = True
        uid = installed(root, debs)
        unit = parse_unit(os.path.join(root, "lib/systemd/system/cache-d.service"))
        check(unit.get("User") == ["cachekit"] and unit.get("Type") == ["notify"], f"the unit: {unit}")
        listen, admin, origin = free_port(), free_port(), free_port()
        procs.append(subprocess.Popen(["chroot", "--userspec=nobody:nogroup", root, "/usr/bin/cache-bench", "origin", "-l", f"127.0.0.1:{origin}"], stdout=subprocess.DEVNULL))
        configure(root, listen, admin, origin)
        env = unit_env(root, unit)
        cache_d = start_unit(root, unit, env)
        procs.append(cache_d)
        serve(root, env, listen, origin)
        ncsa = parse_unit(os.path.join(root, "lib/systemd/system/cache-ncsa.service"))
        access_log(root, ncsa, unit_env(root, ncsa), listen)
        reload(root, unit, env, listen)
        stop(cache_d, uid)
        install(root, debs, "upgrade")
        remove_and_purge(root, debs)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        if mounted:
            subprocess.run(["umount", "-l", os.path.join(root, "proc")])
        if args.keep:
            say(f"root kept at {root}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    say(f"passed ({checks} checks)")


if __name__ == "__main__":
    main()
