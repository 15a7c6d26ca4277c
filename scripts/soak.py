#!/usr/bin/env python3
"""Fault-injection soak: load whose every response is checked against the
origin's bytes for its URL (gzip decoded), through child kills, full
restarts with a persistent store, bans, policy and parameter changes,
origin outages and connection bursts, with a disk store smaller than the
working set and revalidation (keep) in play.

    python3 scripts/soak.py                      # cache-d, 2 minutes
    python3 scripts/soak.py --server both        # cache-d, then varnishd
    python3 scripts/soak.py --quick --bin target/debug   # CI smoke, 20 s

Prints, per fault, the responses in its window (until the next fault):
wrong bodies, empty bodies (a 200 with no body bytes), truncated bodies,
errors (connection failures, timeouts, 5xx), and the recovery time (from
the fault to the end of the last 10 ms in its window with a failed
response; 0 when none failed). Exit status: 0
when no body was wrong and none was empty (an empty or cut body within 2 s
of a child kill or a restart, or during an origin outage, is counted as
cut by the fault, not as empty), 1 otherwise, 2 on a usage or set-up error.
It runs the test origin of cache-bench (its bodies depend on the path
only) and talks to 127.0.0.1 only.
"""

import argparse
import http.client
import json
import math
import multiprocessing as mp
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUCKET = 0.01  # seconds per accounting bucket
KINDS = ("ok", "wrong", "empty", "truncated", "error")
FAULTS = ("kill", "ban", "restart", "vcl", "outage", "param", "burst")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, secs=30):
    end = time.time() + secs
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


# ---------------------------------------------------------------- the load


def url_set(n, seed):
    """n URLs: /size/ and /text/ bodies from 100 B to 512 KiB (log-uniform
    over 48 sizes per kind), max-age 4 s to 10 min, half of the text ones
    gzipped by the origin, a third with grace 0 (the policy reads g=0)."""
    rng = random.Random(seed)
    sizes = sorted({int(100 * math.exp(rng.uniform(0, math.log(512 * 1024 / 100)))) for _ in range(48)})
    urls = []
    for i in range(n):
        kind = "text" if i % 2 else "size"
        size = rng.choice(sizes)
        max_age = int(math.exp(rng.uniform(math.log(4), math.log(600))))
        q = f"max_age={max_age}&v={i}"
        if kind == "text" and rng.random() < 0.5:
            q += "&gzip=1"
        if rng.random() < 1 / 3:
            q += "&g=0"
        urls.append(f"/{kind}/{size}?{q}")
    return urls


def references(origin_port, urls):
    """The origin's plain bytes for every distinct path."""
    refs = {}
    c = http.client.HTTPConnection("127.0.0.1", origin_port, timeout=10)
    for u in urls:
        path = u.split("?")[0]
        if path not in refs:
            c.request("GET", path)
            r = c.getresponse()
            refs[path] = r.read()
    c.close()
    return refs


def classify(conn, url, refs, gzip_ok):
    """One request on `conn`; (kind, detail)."""
    headers = {"Host": "soak.test"}
    if gzip_ok:
        headers["Accept-Encoding"] = "gzip"
    try:
        conn.request("GET", url, headers=headers)
        r = conn.getresponse()
    except (OSError, http.client.HTTPException) as e:
        return "error", f"{type(e).__name__}", True
    want = refs[url.split("?")[0]]
    try:
        body = r.read()
        cut = False
    except http.client.IncompleteRead as e:
        body, cut = e.partial, True
    except (OSError, http.client.HTTPException) as e:
        return "error", f"{r.status} then {type(e).__name__}", True
    xv = r.getheader("X-Varnish", "")
    detail = f"{r.status} {len(body)}/{len(want)} bytes X-Varnish: {xv} CE: {r.getheader('Content-Encoding', '-')}"
    if r.status != 200:
        return "error", detail, r.will_close
    if len(body) == 0 and len(want) > 0:
        return "empty", detail, True
    if cut:
        return "truncated", detail, True
    if r.getheader("Content-Encoding", "").lower() == "gzip":
        try:
            body = zlib.decompress(body, 47)
        except zlib.error:
            return "wrong", detail + " (bad gzip)", r.will_close
    if body != want:
        return "wrong", detail, r.will_close
    return "ok", "", r.will_close


def keep_log(trace, detail):
    """Save the server's log of a bad response's transaction (its first
    X-Varnish id), read at once, before the log ring moves on."""
    reader, inst, work = trace
    ids = detail.split("X-Varnish: ")[1].split() if "X-Varnish: " in detail else []
    if not ids or not ids[0].isdigit():
        return
    out = os.path.join(work, f"bad-{ids[0]}.log")
    with open(out, "w") as f:
        subprocess.run([reader, "-d", "-n", inst, "-g", "request", "-q", f"vxid == {ids[0]}"], stdout=f, stderr=subprocess.STDOUT, timeout=30)


def client_thread(port, urls, refs, stop_at, seed, tally, bad, lock, trace):
    rng = random.Random(seed)
    conn = None
    while True:
        now = time.time()
        if now >= stop_at:
            break
        if conn is None:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        url = urls[rng.randrange(len(urls))]
        kind, detail, close = classify(conn, url, refs, rng.random() < 0.4)
        t = time.time()
        b = int(t / BUCKET)
        with lock:
            row = tally.setdefault(b, [0] * len(KINDS))
            row[KINDS.index(kind)] += 1
            if kind != "ok" and len(bad) < 2000:
                bad.append((t, kind, url, detail))
        if kind in ("wrong", "empty", "truncated") and trace:
            try:
                keep_log(trace, detail)
            except (OSError, subprocess.SubprocessError):
                pass
        if close or kind != "ok":
            conn.close()
            conn = None
            if kind == "error":
                time.sleep(0.01)


def worker(port, urls, refs, stop_at, threads, seed, out, trace):
    tally, bad, lock = {}, [], threading.Lock()
    ts = [
        threading.Thread(target=client_thread, args=(port, urls, refs, stop_at, seed * 1000 + i, tally, bad, lock, trace))
        for i in range(threads)
    ]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    out.put((tally, bad))


# ------------------------------------------------------- servers and faults


class Origin:
    def __init__(self, bin_dir, work):
        self.bin, self.work, self.port, self.p = bin_dir, work, None, None
        self.start()

    def start(self):
        addr = f"127.0.0.1:{self.port or 0}"
        log = open(os.path.join(self.work, "origin.out"), "w")
        self.p = subprocess.Popen([os.path.join(self.bin, "cache-bench"), "origin", "--listen", addr], stdout=log)
        path = os.path.join(self.work, "origin.out")
        for _ in range(600):
            text = open(path).read()
            if "listening on" in text:
                self.port = int(text.split("listening on")[1].split()[0].rsplit(":", 1)[1])
                return
            time.sleep(0.05)
        raise SystemExit("soak: the test origin did not start")

    def stop(self):
        self.p.kill()
        self.p.wait()


VCL = """vcl 4.1;
backend default {{ .host = "127.0.0.1"; .port = "{port}"; }}
sub vcl_backend_response {{
    set beresp.storage = storage.disk;
    set beresp.keep = 30s;
    if (bereq.url ~ "g=0") {{ set beresp.grace = 0s; }} else {{ set beresp.grace = 5s; }}
    {extra}
}}
"""


class Server:
    """cache-d or varnishd: start, stop, the child's pid, admin commands."""

    def __init__(self, kind, bin_dir, work, origin_port, quick):
        self.kind, self.bin, self.work = kind, bin_dir, work
        self.port = free_port()
        self.inst = os.path.join(work, "inst")
        self.vcl = [os.path.join(work, f"p{i}.vcl") for i in range(2)]
        for i, f in enumerate(self.vcl):
            extra = 'set beresp.http.X-Policy = "b";' if i else ""
            open(f, "w").write(VCL.format(port=origin_port, extra=extra))
        mem, disk = ("8m", "32M") if quick else ("48m", "256M")
        store = os.path.join(work, "disk.store")
        if kind == "cache-d":
            self.store = f"disk=persistent,{store},{disk}"
        else:
            # varnishd 7.1's persistent store is deprecated: its file store.
            self.store = f"disk=file,{store},{disk}"
        self.mem = f"mem=malloc,{mem}"
        self.p, self.loads = None, 0

    def start(self):
        if self.kind == "cache-d":
            cmd = [os.path.join(self.bin, "cache-d"), "-F", "-n", self.inst]
        else:
            cmd = ["varnishd", "-F", "-j", "none", "-n", self.inst, "-T", "127.0.0.1:0"]
        cmd += ["-a", f"127.0.0.1:{self.port}", "-f", self.vcl[0], "-s", self.mem, "-s", self.store]
        self.p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.work, "server.err"), "a"))
        if not wait_port(self.port, 60):
            raise SystemExit(f"soak: {self.kind} did not start (see {self.work}/server.err)")

    def stop(self):
        if self.p and self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(20)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()

    def child(self):
        out = subprocess.run(["pgrep", "-P", str(self.p.pid)], capture_output=True, text=True).stdout.split()
        return int(out[0]) if out else None

    def adm(self, *args):
        tool = os.path.join(self.bin, "cache-adm") if self.kind == "cache-d" else "varnishadm"
        r = subprocess.run([tool, "-n", self.inst, *args], capture_output=True, text=True, timeout=30)
        return r.returncode == 0, (r.stdout + r.stderr).strip()


def fault(kind, srv, origin, n):
    """Inject one fault; returns a note."""
    if kind == "kill":
        pid = srv.child()
        if pid:
            os.kill(pid, signal.SIGKILL)
        return f"child {pid} killed"
    if kind == "restart":
        srv.stop()
        srv.start()
        return "manager stopped and started again"
    if kind == "ban":
        ok, out = srv.adm("ban", "req.url", "~", "^/text/" if n % 2 else "max_age=[0-9]?[05]&")
        return f"ban: {'ok' if ok else out}"
    if kind == "vcl":
        srv.loads += 1
        name = f"soak{srv.loads}"
        ok, out = srv.adm("vcl.load", name, srv.vcl[srv.loads % 2])
        ok2, out2 = srv.adm("vcl.use", name)
        return f"vcl.load+use {name}: {'ok' if ok and ok2 else out + out2}"
    if kind == "param":
        v = "2" if n % 2 else "10"
        ok, out = srv.adm("param.set", "default_grace", v)
        return f"param.set default_grace {v}: {'ok' if ok else out}"
    if kind == "outage":
        origin.stop()
        time.sleep(3)
        origin.start()
        return "origin down for 3 s"
    if kind == "burst":
        socks = []
        for i in range(400):
            try:
                s = socket.create_connection(("127.0.0.1", srv.port), timeout=2)
                if i % 2:
                    s.send(b"GET /size/100 HTTP/1.1\r\nHost: x\r\n")
                socks.append(s)
            except OSError:
                break
        time.sleep(2)
        for s in socks:
            s.close()
        return f"{len(socks)} idle connections held for 2 s"
    raise ValueError(kind)


# ---------------------------------------------------------------- one soak


def soak(kind, args):
    work = tempfile.mkdtemp(prefix=f"soak-{kind}-")
    os.chmod(work, 0o700)
    origin = Origin(args.bin, work)
    srv = Server(kind, args.bin, work, origin.port, args.quick)
    try:
        srv.start()
        urls = url_set(args.urls, args.seed)
        refs = references(origin.port, urls)
        start = time.time()
        stop_at = start + args.duration
        out = mp.Queue()
        # Each bad response's transaction, from the server's log (kept
        # with --keep: bad-<vxid>.log in the work directory).
        reader = os.path.join(args.bin, "cache-log") if kind == "cache-d" else shutil.which("varnishlog")
        trace = (reader, srv.inst, work) if reader else None
        per = max(1, args.clients // args.procs)
        procs = [
            mp.Process(target=worker, args=(srv.port, urls, refs, stop_at, per, args.seed + i, out, trace))
            for i in range(args.procs)
        ]
        for p in procs:
            p.start()
        faults = []
        next_at, n = start + args.warmup, 0
        while not args.no_faults and next_at < stop_at - 2:
            time.sleep(max(0.0, next_at - time.time()))
            k = FAULTS[n % len(FAULTS)]
            t = time.time()
            note = fault(k, srv, origin, n)
            faults.append({"fault": k, "at": t, "done": time.time(), "note": note})
            if not args.quiet:
                print(f"  {t - start:6.1f}s {k:8} {note}", file=sys.stderr)
            n += 1
            next_at += args.fault_every
        time.sleep(max(0.0, stop_at - time.time()))
        tally, bad = {}, []
        for _ in procs:
            t, b = out.get()
            for k, row in t.items():
                acc = tally.setdefault(k, [0] * len(KINDS))
                for i, v in enumerate(row):
                    acc[i] += v
            bad += b
        for p in procs:
            p.join()
        summary = report(kind, start, tally, bad, faults, args)
        # The server's log of the first bad responses, for the record
        # (CI keeps only what is printed).
        for name in sorted(os.listdir(work)):
            if name.startswith("bad-") and summary["wrong"] + summary["empty_unexplained"] > 0:
                print(f"== {kind}'s log of {name[4:-4]}:", file=sys.stderr)
                print(open(os.path.join(work, name)).read()[:6000], file=sys.stderr)
        if args.keep:
            print(f"soak: {kind}'s work directory kept: {work} (bad-<vxid>.log: each bad response's transaction)", file=sys.stderr)
        return summary
    finally:
        srv.stop()
        origin.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def excused(t, faults):
    """Is a cut or empty body at `t` explained by a fault (a kill or a
    restart up to 2 s after it ended, an origin outage while it lasts)?"""
    for f in faults:
        if f["fault"] in ("kill", "restart") and f["at"] <= t <= f["done"] + 2:
            return True
        if f["fault"] == "outage" and f["at"] <= t <= f["done"] + 0.5:
            return True
    return False


def report(kind, start, tally, bad, faults, args):
    windows = [("warm-up", start, faults[0]["at"] if faults else math.inf)]
    for i, f in enumerate(faults):
        end = faults[i + 1]["at"] if i + 1 < len(faults) else math.inf
        windows.append((f["fault"], f["at"], end))
    rows = []
    for name, a, b in windows:
        sums = [0] * len(KINDS)
        # Recovery: from the fault to the end of the last 10 ms in its
        # window with a failed response (0 when none failed).
        recovery = 0.0
        for k in sorted(tally):
            t = k * BUCKET
            # Each bucket counts in the window it starts in (one window
            # only: a bucket across a fault's start would count twice).
            if a <= t < b:
                row = tally[k]
                for i, v in enumerate(row):
                    sums[i] += v
                if any(row[1:]):
                    recovery = max(recovery, t + BUCKET - a)
        rows.append({"window": name, "at": round(a - start, 1), **dict(zip(KINDS, sums)), "recovery_s": round(recovery, 1)})
    cut_by_fault = sum(1 for t, k, _, _ in bad if k == "empty" and excused(t, faults))
    totals = {k: sum(r[k] for r in rows) for k in KINDS}
    empty_unexcused = totals["empty"] - cut_by_fault
    recoveries = [r["recovery_s"] for r in rows[1:]]
    summary = {
        "server": kind,
        "seconds": args.duration,
        "responses": sum(totals.values()),
        **totals,
        "empty_cut_by_fault": cut_by_fault,
        "empty_unexplained": empty_unexcused,
        "faults": len(faults),
        "worst_recovery_s": max(recoveries) if recoveries else None,
        "windows": rows,
        "bad": [{"t": round(t - start, 2), "kind": k, "url": u, "detail": d} for t, k, u, d in sorted(bad) if k != "error"][:40],
        "errors_seen": [{"t": round(t - start, 2), "url": u, "detail": d} for t, k, u, d in sorted(bad) if k == "error"][:10],
    }
    if not args.json:
        print(f"== {kind}: {args.duration} s, {args.clients} clients, {len(faults)} faults")
        print(f"{'fault':10} {'at':>7} {'ok':>8} {'wrong':>6} {'empty':>6} {'trunc':>6} {'errors':>7} {'recovery':>9}")
        for r in rows:
            rec = f"{r['recovery_s']:.1f}s"
            print(f"{r['window']:10} {r['at']:6.1f}s {r['ok']:8} {r['wrong']:6} {r['empty']:6} {r['truncated']:6} {r['error']:7} {rec:>9}")
        for b in summary["bad"][:10]:
            print(f"  {b['t']:7.2f}s {b['kind']:9} {b['url']}  {b['detail']}")
        worst = summary["worst_recovery_s"]
        print(
            f"{kind}: {summary['responses']} responses, {totals['wrong']} wrong, {empty_unexcused} empty "
            f"(+{cut_by_fault} cut by a kill/restart/outage), {totals['truncated']} truncated, {totals['error']} errors, "
            f"worst recovery {'-' if worst is None else f'{worst:.1f} s'}"
        )
    return summary


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", choices=["cache-d", "varnishd", "both"], default="cache-d")
    ap.add_argument("--duration", type=float, default=120.0, help="seconds of load (default 120)")
    ap.add_argument("--clients", type=int, default=24, help="client connections (default 24)")
    ap.add_argument("--procs", type=int, default=4, help="client processes (default 4)")
    ap.add_argument("--urls", type=int, default=6000, help="distinct URLs (default 6000, ~370 MB: more than the disk store)")
    ap.add_argument("--fault-every", type=float, default=6.0, help="seconds between faults (default 6)")
    ap.add_argument("--warmup", type=float, default=5.0, help="seconds before the first fault (default 5)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "release"), help="where cache-d, cache-adm, cache-bench are")
    ap.add_argument("--quick", action="store_true", help="CI smoke: 20 s, 8 clients, 600 URLs, -s malloc,8m + a 32M store, faults every 2.5 s (flags given win)")
    ap.add_argument("--no-faults", action="store_true", help="the load alone (no faults)")
    ap.add_argument("--json", action="store_true", help="one JSON object per server on stdout")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs, store)")
    ap.add_argument("-q", "--quiet", action="store_true", help="no fault lines on stderr")
    args = ap.parse_args()
    if args.quick:
        defaults = {"duration": 120.0, "clients": 24, "procs": 4, "urls": 6000, "fault_every": 6.0, "warmup": 5.0}
        quick = {"duration": 20.0, "clients": 8, "procs": 2, "urls": 600, "fault_every": 2.5, "warmup": 2.0}
        for k, v in quick.items():
            # What the command line set stays; the rest is quick.
            if getattr(args, k) == defaults[k]:
                setattr(args, k, v)
    for tool in ("cache-d", "cache-adm", "cache-bench"):
        if not os.access(os.path.join(args.bin, tool), os.X_OK):
            print(f"soak: {args.bin}/{tool} not found (cargo build --release, or --bin DIR)", file=sys.stderr)
            return 2
    kinds = ["cache-d", "varnishd"] if args.server == "both" else [args.server]
    if "varnishd" in kinds and not shutil.which("varnishd"):
        print("soak: varnishd not installed (apt-get install varnish)", file=sys.stderr)
        return 2
    failed = False
    for k in kinds:
        s = soak(k, args)
        if args.json:
            print(json.dumps(s))
        failed |= s["wrong"] > 0 or s["empty_unexplained"] > 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
