#!/usr/bin/env python3
"""The policy battery (issue 34): real-world-shaped VCL policies, one battery.

For each policy in tests/policies/*.vcl, varnishd and cache-d are started
(temp instance dirs, free ports on 127.0.0.1), each in front of its own
recording origin (below), and sent the same battery of requests. What
each answered -- status, reason, hit or miss, headers, body -- and what
each origin received for it are compared, with the values that must
differ masked (Date, X-Varnish ids, Age, Via's product). A difference not
listed in tests/policies/differences.tsv (policy, request, why) fails the
run (exit 1); a server that does not start is an error (exit 2).

  policy-battery.py [POLICY...]                     both servers, compared
  policy-battery.py --record tests/policies/expected  also keep varnishd's
  policy-battery.py --server cache-d --expect tests/policies/expected
                                                    cache-d against the
                                                    recorded answers
  --retry runs a policy that differed once more (the second run counts):
  scripts/test.sh uses it, as a gunzipped miss may go out chunked or with
  its length on varnishd depending on whether its fetch ended first.
Stdlib only.
"""
import argparse
import gzip
import hashlib
import http.server
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
POLICIES = ROOT / "tests" / "policies"
HOST = "www.example.com"
PROBE = "/__probe"  # health probes: answered, never numbered nor recorded
LAST_MODIFIED = "Wed, 01 Jan 2025 00:00:00 GMT"

# ---------------------------------------------------------------- origin


def tags(*names):
    """The same tags under every tag header a policy may ban on."""
    return [
        ("X-Magento-Tags", ",".join(names)),
        ("X-Cache-Tags", ",".join(names)),
        ("Cache-Tags", " ".join(names)),
        ("xkey", " ".join(names)),
    ]


def route(method, url, headers, n):
    """(status, reason, headers, body) for one request to the origin."""
    path = url.split("?")[0]
    who = f"origin response {n} to {method} {url}\n".encode()
    html = [("Content-Type", "text/html; charset=UTF-8")]
    if path == PROBE:
        return 200, "OK", [], b"ok\n"
    if headers.get("upgrade", "").lower() == "websocket":
        return 101, "Switching Protocols", [("Upgrade", "websocket"), ("Connection", "Upgrade")], None
    if method in ("POST", "PUT", "PATCH", "DELETE"):
        return 200, "OK", html + [("Cache-Control", "no-store")], who
    if method == "OPTIONS":
        return 204, "No Content", [("Allow", "GET, HEAD, POST, OPTIONS")], b""
    if path == "/_fos_user_context_hash":
        ident = headers.get("cookie", "") + headers.get("authorization", "")
        digest = hashlib.sha256(ident.encode()).hexdigest()[:16]
        return 200, "OK", [
            ("Content-Type", "application/vnd.fos.user-context-hash"),
            ("X-User-Context-Hash", digest), ("Cache-Control", "max-age=60"),
            ("Vary", "Cookie, Authorization")], b""
    if path.startswith("/static/"):
        kind = {"css": "text/css", "png": "image/png", "js": "application/javascript"}
        ctype = kind.get(path.rsplit(".", 1)[-1], "text/plain")
        body = who * 40 if path.endswith("big.txt") else who
        return 200, "OK", [("Content-Type", ctype), ("Cache-Control", "public, max-age=3600"),
                           ("Last-Modified", LAST_MODIFIED), ("ETag", f'"s{n}"'),
                           ("Set-Cookie", "static_tracker=1; path=/")] + tags("static"), body
    if path == "/gzip":
        hdrs = html + [("Cache-Control", "max-age=300"), ("Vary", "Accept-Encoding")]
        if "gzip" in headers.get("accept-encoding", ""):
            return 200, "OK", hdrs + [("Content-Encoding", "gzip")], gzip.compress(who * 20, mtime=0)
        return 200, "OK", hdrs, who * 20
    if path == "/esi":
        body = b"<html>top " + who + b'<esi:include src="/esi/frag"/> bottom</html>\n'
        return 200, "OK", html + [("Cache-Control", "max-age=300"),
                                  ("Surrogate-Control", 'content="ESI/1.0"')] + tags("esi"), body
    if path == "/esi/frag":
        return 200, "OK", html + [("Cache-Control", "max-age=60")], b"[fragment " + who.strip() + b"]"
    if path == "/redirect":
        return 301, "Moved Permanently", [("Location", "/"), ("Cache-Control", "max-age=600")], b""
    if path == "/missing":
        return 404, "Not Found", html + [("Cache-Control", "max-age=30")], b"gone: " + who
    if path == "/error":
        return 500, "Internal Server Error", html, b"broken: " + who
    if path == "/setcookie":
        return 200, "OK", html + [("Set-Cookie", f"sid=s{n}; path=/; HttpOnly"),
                                  ("Cache-Control", "max-age=60")], who
    if path == "/private":
        return 200, "OK", html + [("Cache-Control", "private, no-cache")], who
    if path == "/etag":
        if headers.get("if-none-match") == '"v1"':
            return 304, "Not Modified", [("ETag", '"v1"'), ("Cache-Control", "max-age=300")], b""
        return 200, "OK", html + [("ETag", '"v1"'), ("Cache-Control", "max-age=300")], who
    if path.startswith("/api/"):
        return 200, "OK", [("Content-Type", "application/json"), ("Cache-Control", "max-age=60"),
                           ("Vary", "Accept")], json.dumps({"n": n, "url": url}).encode()
    if path.startswith(("/admin", "/wp-admin", "/account", "/user")):
        return 200, "OK", html + [("Cache-Control", "no-cache, must-revalidate")], who
    return 200, "OK", html + [("Cache-Control", "public, max-age=120"), ("Last-Modified", LAST_MODIFIED),
                              ("Vary", "Accept-Encoding"), ("X-Powered-By", "PHP/8.2")] + tags("home", "page"), who


class Origin:
    """A recording origin: numbers its answers per method and URL, keeps
    what it received until taken."""

    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}
        self.log = []
        origin = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def version_string(self):
                return "recording-origin"  # not Python's version: recordings travel

            def __getattr__(self, name):
                if name.startswith("do_"):
                    return self.serve
                raise AttributeError(name)

            def serve(self):
                origin.serve(self)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.handle_error = lambda request, address: None  # a proxy closing is no news
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def serve(self, h):
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else b""
        if h.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = read_chunked(h.rfile)
        lower = {k.lower(): v for k, v in h.headers.items()}
        key = f"{h.command} {h.path}"
        with self.lock:
            if h.path != PROBE:
                self.counts[key] = self.counts.get(key, 0) + 1
                self.log.append({"method": h.command, "url": h.path, "body_len": len(body),
                                 "headers": mask_headers(h.headers.items())})
            n = self.counts.get(key, 0)
        status, reason, hdrs, out = route(h.command, h.path, lower, n)
        h.send_response(status, reason)
        for k, v in hdrs + [("X-Origin-N", str(n))]:
            h.send_header(k, v)
        if status == 101:
            h.end_headers()
            h.close_connection = True
            return
        h.send_header("Content-Length", str(len(out)))
        h.end_headers()
        if h.command != "HEAD" and status not in (204, 304):
            h.wfile.write(out)

    def settle(self, quiet=0.05, limit=2.0):
        """Wait until the origin has had no request for `quiet` seconds:
        a background fetch (grace, soft purge) belongs to the request that
        caused it, whichever server's timing."""
        deadline = time.monotonic() + limit
        seen = -1
        while time.monotonic() < deadline:
            with self.lock:
                now = sum(self.counts.values())
            if now == seen:
                return
            seen = now
            time.sleep(quiet)

    def take(self):
        with self.lock:
            out, self.log = self.log, []
        return out

    def close(self):
        self.server.shutdown()
        self.server.server_close()


# ---------------------------------------------------------------- masking


def mask_value(name, value):
    if name == "date":
        return "<date>"
    if name == "age":
        return "<age>"
    if name == "x-varnish":
        return re.sub(r"\d+", "N", value)
    if name == "server" and value in ("Varnish", "cachekit"):
        return "<proxy>"  # a synthetic page's product name
    if name == "via":
        return ", ".join(re.sub(r"^(\S+)\s.*$", r"\1 <proxy>", p.strip()) for p in value.split(","))
    return value


def mask_headers(items):
    return sorted([k.lower(), mask_value(k.lower(), v)] for k, v in items)


# ---------------------------------------------------------------- client


def read_chunked(f):
    out = b""
    while True:
        size = int(f.readline().split(b";")[0].strip() or b"0", 16)
        if size == 0:
            while f.readline() not in (b"\r\n", b"\n", b""):
                pass
            return out
        out += f.read(size)
        f.readline()


def send(port, req):
    """One request on its own connection; the response as read."""
    src = req.get("source", "127.0.0.1")
    sock = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(src, 0))
    body = req.get("body", b"")
    lines = [f"{req['method']} {req['url']} HTTP/1.1", f"Host: {req.get('host', HOST)}"]
    lines += [f"{k}: {v}" for k, v in req.get("headers", {}).items()]
    if body:
        lines.append(f"Content-Length: {len(body)}")
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
    f = sock.makefile("rb")
    try:
        status_line = f.readline().decode("latin-1").rstrip("\r\n")
        parts = status_line.split(" ", 2)
        headers = []
        while True:
            line = f.readline().decode("latin-1").rstrip("\r\n")
            if not line:
                break
            k, _, v = line.partition(":")
            headers.append((k, v.strip()))
        lower = {k.lower(): v for k, v in headers}
        status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
        if req["method"] == "HEAD" or status in (101, 204, 304) or status < 200:
            raw = b""
        elif lower.get("transfer-encoding", "").lower() == "chunked":
            raw = read_chunked(f)
        elif "content-length" in lower:
            raw = f.read(int(lower["content-length"]))
        else:
            raw = f.read()
    except (OSError, ValueError) as e:
        return {"status": 0, "reason": f"client error: {e}", "headers": [], "raw": b""}
    finally:
        f.close()
        sock.close()
    return {"status": status, "reason": parts[2] if len(parts) > 2 else "", "headers": headers, "raw": raw}


def observe(resp, received):
    """What is compared: the response and the origin's log, masked."""
    lower = {k.lower(): v for k, v in resp["headers"]}
    xv = lower.get("x-varnish", "").split()
    age = lower.get("age", "0")
    hit = "hit" if len(xv) == 2 or (age.isdigit() and int(age) > 0) else "miss"
    raw = resp["raw"]
    headers = mask_headers(resp["headers"])
    if lower.get("content-encoding", "").lower() == "gzip" and raw:
        try:
            raw = b"gunzipped: " + gzip.decompress(raw)
        except (OSError, EOFError):
            raw = b"bad gzip: " + raw
        # Two compressors need not make the same bytes: compare the content.
        headers = [[k, "<gzip length>" if k == "content-length" else v] for k, v in headers]
    body = raw.decode("latin-1")
    masked = re.sub(r"XID: \d+", "XID: N", body)
    masked = re.sub(r"(Varnish|cachekit) cache server", "<proxy> cache server", masked)
    if masked != body:  # a synthetic page's ids and product name: lengths differ too
        headers = [[k, "<masked length>" if k == "content-length" else v] for k, v in headers]
    return {"status": resp["status"], "reason": resp["reason"], "hit": hit,
            "headers": headers, "body": masked, "origin": received}


# ---------------------------------------------------------------- battery

SESSION = "PHPSESSID=abc; wordpress_logged_in_1=x; SESSabc=1; be_typo_user=1; __ac=1; X-Magento-Vary=v1"
TAGS = lambda t: {  # noqa: E731 -- every tag-invalidation header at once
    "X-Magento-Tags-Pattern": f"((^|,){t}(,|$))", "X-Cache-Tags": f"(^|,){t}(,|$)",
    "Cache-Tags": t, "xkey-purge": t, "X-Host": ".", "X-Url": ".", "X-Content-Type": "."}

BATTERY = [
    ("static-css", "GET", "/static/app.css", {}),
    ("static-css-again", "GET", "/static/app.css", {}),
    ("static-cookie", "GET", "/static/logo.png", {"Cookie": "PHPSESSID=abc; _ga=GA1.2.3"}),
    ("static-cookie-again", "GET", "/static/logo.png", {"Cookie": "PHPSESSID=def"}),
    ("static-versioned", "GET", "/static/app.css?v=2", {}),
    ("page", "GET", "/", {}),
    ("page-again", "GET", "/", {}),
    ("page-gzip-client", "GET", "/", {"Accept-Encoding": "gzip, deflate, br"}),
    ("page-analytics-cookie", "GET", "/", {"Cookie": "_ga=GA1.2.3; _gid=GA1.2.4; __utma=1.2"}),
    ("page-session-cookie", "GET", "/", {"Cookie": SESSION}),
    ("page-https-offload", "GET", "/", {"X-Forwarded-Proto": "https"}),
    ("authorization", "GET", "/account", {"Authorization": "Basic dXNlcjpwYXNz"}),
    ("authorization-again", "GET", "/account", {"Authorization": "Basic dXNlcjpwYXNz"}),
    ("post", "POST", "/cart/add", {"Content-Type": "application/x-www-form-urlencoded"}, b"sku=1&qty=2"),
    ("marketing-query", "GET", "/products?utm_source=news&utm_medium=mail&gclid=abc&id=7", {}),
    ("marketing-query-clean", "GET", "/products?id=7", {}),
    ("query-order", "GET", "/products?b=2&a=1", {}),
    ("query-order-sorted", "GET", "/products?a=1&b=2", {}),
    ("trailing-question", "GET", "/products?", {}),
    ("head", "HEAD", "/", {}),
    ("head-uncached", "HEAD", "/about", {}),
    ("options", "OPTIONS", "/api/items", {"Origin": "https://shop.example.com",
                                          "Access-Control-Request-Method": "GET"}),
    ("api-bearer", "GET", "/api/items", {"Accept": "application/json", "Authorization": "Bearer t1"}),
    ("api-bearer-again", "GET", "/api/items", {"Accept": "application/json", "Authorization": "Bearer t1"}),
    ("health", "GET", "/health", {}),
    ("websocket", "GET", "/ws", {"Upgrade": "websocket", "Connection": "Upgrade",
                                 "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version": "13"}),
    ("range", "GET", "/static/big.txt", {"Range": "bytes=0-9"}),
    ("range-again", "GET", "/static/big.txt", {"Range": "bytes=10-19"}),
    ("etag", "GET", "/etag", {}),
    ("if-none-match", "GET", "/etag", {"If-None-Match": '"v1"'}),
    ("gzip-origin", "GET", "/gzip", {"Accept-Encoding": "gzip"}),
    ("gzip-plain-client", "GET", "/gzip", {}),
    ("gzip-br-client", "GET", "/gzip", {"Accept-Encoding": "br"}),
    ("esi", "GET", "/esi", {}),
    ("esi-again", "GET", "/esi", {}),
    ("redirect", "GET", "/redirect", {}),
    ("not-found", "GET", "/missing", {}),
    ("not-found-again", "GET", "/missing", {}),
    ("server-error", "GET", "/error", {}),
    ("set-cookie", "GET", "/setcookie", {}),
    ("set-cookie-again", "GET", "/setcookie", {}),
    ("private", "GET", "/private", {}),
    ("admin", "GET", "/admin/", {"Cookie": "PHPSESSID=abc"}),
    ("user-context", "GET", "/products?id=7", {"Cookie": "PHPSESSID=abc"}),
    ("purge-denied", "PURGE", "/", {}, b"", "127.0.0.2"),
    ("purge", "PURGE", "/", {}),
    ("page-after-purge", "GET", "/", {}),
    ("tag-purge", "PURGE", "/static/logo.png", TAGS("static")),
    ("static-after-tag-purge", "GET", "/static/app.css", {}),
    ("tag-ban", "BAN", "/", TAGS("page")),
    ("page-after-tag-ban", "GET", "/", {}),
    ("url-ban", "BAN", "/products", {"X-Ban-Url": "^/products", "X-Purge-Regex": "^/products",
                                     "X-Url": "^/products", "X-Host": "."}),
    ("products-after-ban", "GET", "/products?id=7", {}),
    ("refresh", "REFRESH", "/esi", {}),
]


def battery():
    for item in BATTERY:
        name, method, url, headers = item[:4]
        req = {"name": name, "method": method, "url": url, "headers": headers}
        if len(item) > 4:
            req["body"] = item[4]
        if len(item) > 5:
            req["source"] = item[5]
        yield req


# ---------------------------------------------------------------- servers


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """varnishd or cache-d on a free port with its own instance dir."""

    def __init__(self, kind, bindir, vcl_text, workdir):
        self.kind, self.dir = kind, Path(workdir) / kind
        self.dir.mkdir(parents=True)
        self.port = free_port()
        vcl = self.dir / "policy.vcl"
        vcl.write_text(vcl_text)
        common = ["-a", f"127.0.0.1:{self.port}", "-n", str(self.dir / "inst"), "-P", str(self.dir / "pid"),
                  "-f", str(vcl)]
        if kind == "varnishd":
            cmd = ["varnishd", "-j", "none", "-T", "127.0.0.1:0"] + common
        else:
            cmd = [str(Path(bindir) / "cache-d")] + common
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(f"{kind} did not start:\n{out.stdout}{out.stderr}")
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"{kind} did not listen on {self.port}")

    def stop(self):
        pidfile = self.dir / "pid"
        if pidfile.exists():
            try:
                os.kill(int(pidfile.read_text().split()[0]), signal.SIGTERM)
            except (ValueError, ProcessLookupError):
                pass


def run_one(kind, bindir, policy_text, workdir):
    """The battery against one server; a list of observations."""
    origin = Origin()
    text = policy_text.replace("${backend_host}", "127.0.0.1").replace("${backend_port}", str(origin.port))
    server = None
    try:
        server = Server(kind, bindir, text, workdir)
        out = []
        for req in battery():
            resp = send(server.port, req)
            origin.settle()
            obs = observe(resp, origin.take())
            obs["request"] = req["name"]
            out.append(obs)
        return out
    finally:
        if server:
            server.stop()
        origin.close()


# ---------------------------------------------------------------- compare


def compare(a, b):
    """Per request, the fields that differ with both sides' values."""
    diffs = {}
    for x, y in zip(a, b):
        fields = {}
        for field in ("status", "reason", "hit", "body"):
            if x[field] != y[field]:
                fields[field] = [x[field], y[field]]
        ox, oy = x["origin"], y["origin"]
        if ox != oy:
            if len(ox) != len(oy):
                fields["origin"] = [ox, oy]
            else:
                for i, (rx, ry) in enumerate(zip(ox, oy)):
                    hx = {tuple(h) for h in rx["headers"]}
                    hy = {tuple(h) for h in ry["headers"]}
                    if hx != hy:
                        fields[f"origin[{i}] headers"] = [sorted(map(list, hx - hy)), sorted(map(list, hy - hx))]
                    rx, ry = dict(rx, headers=None), dict(ry, headers=None)
                    if rx != ry:
                        fields[f"origin[{i}]"] = [rx, ry]
        hx = {tuple(h) for h in x["headers"]}
        hy = {tuple(h) for h in y["headers"]}
        if hx != hy:
            fields["headers"] = [sorted(map(list, hx - hy)), sorted(map(list, hy - hx))]
        if fields:
            diffs[x["request"]] = fields
    return diffs


def load_deliberate(path):
    known = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                cols = line.split("\t")
                if len(cols) >= 3:
                    known[(cols[0], cols[1])] = cols[2]
    return known


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("policies", nargs="*", help="names or paths (default: tests/policies/*.vcl)")
    ap.add_argument("--server", choices=["both", "varnishd", "cache-d"], default="both")
    ap.add_argument("--expect", help="compare --server against answers recorded in this dir or file")
    ap.add_argument("--record", help="write varnishd's answers, one NAME.json per policy, to this dir")
    ap.add_argument("--bin", default=str(ROOT / os.environ.get("CARGO_TARGET_DIR", "target") / "debug"))
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    ap.add_argument("--keep", action="store_true", help="keep the temp instance dirs")
    ap.add_argument("--retry", action="store_true",
                    help="run a policy that differs (or fails to run) once more; the second run counts")
    args = ap.parse_args()
    if args.server == "both" and args.expect:
        ap.error("--expect compares one server (--server varnishd or cache-d) against a recording")
    if args.server != "both" and not args.expect and not args.record:
        ap.error("one server needs --expect (or --record with varnishd)")
    paths = [Path(p) if p.endswith(".vcl") else POLICIES / f"{p}.vcl" for p in args.policies]
    paths = paths or sorted(POLICIES.glob("*.vcl"))
    known = load_deliberate(POLICIES / "differences.tsv")
    results, errors = run_all(paths, args, known)
    failed = {r["policy"] for r in results if not r.get("summary") and not r["deliberate"]} | {e["policy"] for e in errors}
    if args.retry and failed:
        print(f"policy-battery: {len(failed)} policies differed, running them once more: {' '.join(sorted(failed))}", file=sys.stderr)
        again, errors_again = run_all([p for p in paths if p.stem in failed], args, known)
        results = [r for r in results if r["policy"] not in failed] + again
        errors = [e for e in errors if e["policy"] not in failed] + errors_again
    report(results, errors, args.json)
    if errors:
        return 2
    return 1 if any(not r.get("summary") and not r["deliberate"] for r in results) else 0


def run_all(paths, args, known):
    """Run each policy (as main's arguments say); its results and errors."""
    results, errors = [], []
    for path in paths:
        name = path.stem
        work = tempfile.mkdtemp(prefix=f"battery-{name}-")
        try:
            if args.server == "both":
                mine = run_one("varnishd", args.bin, path.read_text(), work)
                theirs = run_one("cache-d", args.bin, path.read_text(), work)
                labels = ("varnishd", "cache-d")
            else:
                theirs = run_one(args.server, args.bin, path.read_text(), work)
                mine = None
                if args.expect:
                    exp = Path(args.expect)
                    mine = json.loads((exp / f"{name}.json" if exp.is_dir() else exp).read_text())
                labels = ("expected", args.server)
            if args.record:
                rec = mine if args.server == "both" else theirs
                Path(args.record).mkdir(parents=True, exist_ok=True)
                lines = ",\n".join(json.dumps(o, separators=(",", ":")) for o in rec)
                (Path(args.record) / f"{name}.json").write_text("[\n" + lines + "\n]\n")
            if mine is None:
                continue
            diffs = compare(mine, theirs)
            for req, fields in diffs.items():
                why = known.get((name, req)) or known.get(("*", req))
                results.append({"policy": name, "request": req, "deliberate": why,
                                "labels": labels, "fields": fields})
            results.append({"policy": name, "summary": True, "total": len(mine),
                            "different": len(diffs)})
        except (RuntimeError, OSError, ValueError) as e:
            errors.append({"policy": name, "error": str(e)})
        finally:
            if not args.keep:
                shutil.rmtree(work, ignore_errors=True)
    return results, errors


def report(results, errors, as_json):
    if as_json:
        print(json.dumps({"results": results, "errors": errors}, indent=1))
        return
    print(f"{'policy':28} {'identical':>9} {'different':>9} {'deliberate':>10}")
    for r in results:
        if r.get("summary"):
            delib = sum(1 for d in results if d.get("policy") == r["policy"] and d.get("deliberate"))
            print(f"{r['policy']:28} {r['total'] - r['different']:9} {r['different']:9} {delib:10}")
    for e in errors:
        print(f"{e['policy']:28} ERROR: {e['error']}")
    # The same difference seen for many requests is printed once, with
    # where it was seen.
    groups = {}
    for r in results:
        if r.get("summary"):
            continue
        a, b = r["labels"]
        tag = f" (deliberate: {r['deliberate']})" if r["deliberate"] else ""
        for field, (x, y) in r["fields"].items():
            if field.endswith("headers"):
                text = f"  {field} only {a}: {x}\n  {field} only {b}: {y}"
            else:
                text = f"  {field}:\n    {a}: {json.dumps(x)}\n    {b}: {json.dumps(y)}"
            groups.setdefault(text, []).append(f"{r['policy']}/{r['request']}{tag}")
    for text, where in groups.items():
        more = f", and {len(where) - 12} more (--json lists all)" if len(where) > 12 else ""
        print(f"\n== {len(where)} x: " + ", ".join(where[:12]) + more)
        print(text)


if __name__ == "__main__":
    sys.exit(main())
