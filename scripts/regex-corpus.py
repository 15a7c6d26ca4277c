#!/usr/bin/env python3
"""The regex corpus (issue 34): every pattern of tests/regex/patterns.tsv
is matched (`~`), substituted once (`regsub`, captures \\0 and \\1) and
everywhere (`regsuball`) against every line of tests/regex/subjects.txt,
through VCL, on varnishd 7.1 and on cache-d; the answers must be equal.
A pattern varnishd refuses must be refused by cache-d too.

Usage: regex-corpus.py [--bin DIR] [--json] [-v]
Exit status: 0 all equal, 1 a difference, 2 a usage or set-up error."""
import argparse
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROXY = os.path.join(ROOT, "tests/conformance/proxy.sh")
BATCH = 40
# Three answer headers a pattern, a batch at a time.
http.client._MAXHEADERS = 1000


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load_corpus():
    patterns = []
    for line in open(os.path.join(ROOT, "tests/regex/patterns.tsv"), encoding="utf-8"):
        line = line.rstrip("\n")
        if not line or line.startswith("#"):
            continue
        family, pattern = line.split("\t", 1)
        patterns.append((family, pattern))
    subjects = [s for s in open(os.path.join(ROOT, "tests/regex/subjects.txt"), encoding="utf-8").read().split("\n") if s.strip()]
    known = {}
    for line in open(os.path.join(ROOT, "tests/regex/differences.tsv"), encoding="utf-8"):
        line = line.rstrip("\n")
        if line and not line.startswith("#"):
            pattern, why = line.split("\t", 1)
            known[pattern] = why
    return patterns, subjects, known


def vcl_for(patterns):
    """One VCL testing `patterns` (index, pattern) in batches: /b/N runs batch N."""
    out = ['vcl 4.1;', 'backend default { .host = "127.0.0.1"; .port = "9"; }',
           'sub vcl_recv { return (synth(200)); }', 'sub vcl_synth {']
    for b in range(0, len(patterns), BATCH):
        out.append(f'\tif (req.url == "/b/{b // BATCH}") {{')
        for i, p in patterns[b:b + BATCH]:
            lit = '{"' + p + '"}'
            out.append(f'\t\tif (req.http.x-s ~ {lit}) {{ set resp.http.m{i} = "1"; }} else {{ set resp.http.m{i} = "0"; }}')
            out.append(f'\t\tset resp.http.s{i} = regsub(req.http.x-s, {lit}, "<\\1|\\0>");')
            out.append(f'\t\tset resp.http.a{i} = regsuball(req.http.x-s, {lit}, "_");')
        out.append('\t}')
    out.append('\treturn (deliver);')
    out.append('}')
    return "\n".join(out) + "\n"


def compiles(kind, bindir, vcl, work):
    """Does `kind` load this VCL? (varnishd -C / cache-d -C)."""
    path = os.path.join(work, f"check-{kind}.vcl")
    open(path, "w", encoding="utf-8").write(vcl)
    cmd = ["varnishd", "-j", "none", "-C", "-f", path, "-n", os.path.join(work, "c-inst")] if kind == "varnishd" else [os.path.join(bindir, "cache-d"), "-C", "-f", path]
    r = subprocess.run(cmd, capture_output=True, text=True)
    return r.returncode == 0, (r.stderr or r.stdout).strip()


class Server:
    def __init__(self, kind, bindir, work, vcl):
        self.kind, self.bindir, self.port = kind, bindir, free_port()
        self.dir = os.path.join(work, kind)
        params = ["-p", "http_max_hdr=512", "-p", "http_resp_hdr_len=65536", "-p", "http_resp_size=1048576"]
        # varnishd keeps every header it sets in the client workspace.
        if kind == "varnishd":
            params += ["-p", "workspace_client=4m"]
        r = subprocess.run(["bash", PROXY, kind, bindir, str(self.port), "start", self.dir, *params], input=vcl, text=True, capture_output=True)
        if r.returncode != 0:
            raise RuntimeError(f"{kind} did not start: {r.stdout}{r.stderr}")

    def ask(self, batch, subject):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        c.putrequest("GET", f"/b/{batch}", skip_accept_encoding=True)
        c.putheader("x-s", subject.encode("utf-8"))
        c.endheaders()
        r = c.getresponse()
        r.read()
        h = {k.lower(): v for k, v in r.getheaders()}
        c.close()
        return r.status, h

    def stop(self):
        subprocess.run(["bash", PROXY, self.kind, self.bindir, str(self.port), "stop", self.dir], capture_output=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(ROOT, "target/debug"), help="where cache-d is (default target/debug)")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    ap.add_argument("-v", "--verbose", action="store_true", help="every difference, not the first 40")
    args = ap.parse_args()
    if not shutil.which("varnishd"):
        print("regex-corpus: varnishd is not installed (apt-get install varnish)", file=sys.stderr)
        return 2
    patterns, subjects, known = load_corpus()
    work = tempfile.mkdtemp(prefix="regex-corpus-")
    try:
        return run(args, (patterns, subjects, known), work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(args, corpus, work):
    patterns, subjects, known = corpus
    indexed = [(i, p) for i, (_, p) in enumerate(patterns) if '"}' not in p]
    # Patterns varnishd refuses: each must be refused by cache-d too.
    refused, usable, diffs = [], [], []
    if not compiles("varnishd", args.bin, vcl_for(indexed), work)[0]:
        for i, p in indexed:
            v_ok, v_msg = compiles("varnishd", args.bin, vcl_for([(i, p)]), work)
            if v_ok:
                usable.append((i, p))
                continue
            c_ok, c_msg = compiles("cache-d", args.bin, vcl_for([(i, p)]), work)
            refused.append(i)
            if c_ok:
                diffs.append({"pattern": p, "subject": None, "what": "load", "varnishd": v_msg.splitlines()[0] if v_msg else "refused", "cache-d": "accepted"})
    else:
        usable = indexed
    ok, msg = compiles("cache-d", args.bin, vcl_for(usable), work)
    if not ok:
        # Find the patterns cache-d refuses and varnishd takes.
        for i, p in usable:
            if not compiles("cache-d", args.bin, vcl_for([(i, p)]), work)[0]:
                diffs.append({"pattern": p, "subject": None, "what": "load", "varnishd": "accepted", "cache-d": compiles("cache-d", args.bin, vcl_for([(i, p)]), work)[1].splitlines()[-1]})
        bad = {d["pattern"] for d in diffs if d["what"] == "load"}
        usable = [(i, p) for i, p in usable if p not in bad]
    vcl = vcl_for(usable)
    servers = [Server("varnishd", args.bin, work, vcl), Server("cache-d", args.bin, work, vcl)]
    checks = 0
    try:
        for b in range(0, (len(usable) + BATCH - 1) // BATCH):
            for s in subjects:
                (vs, vh), (cs, ch) = (srv.ask(b, s) for srv in servers)
                for i, p in usable[b * BATCH:(b + 1) * BATCH]:
                    for what, key in (("~", f"m{i}"), ("regsub", f"s{i}"), ("regsuball", f"a{i}")):
                        checks += 1
                        v, c = vh.get(key), ch.get(key)
                        if (vs, v) != (cs, c):
                            diffs.append({"pattern": p, "subject": s, "what": what, "varnishd": v if vs == 200 else f"status {vs}", "cache-d": c if cs == 200 else f"status {cs}"})
    finally:
        for srv in servers:
            srv.stop()
    listed = [d for d in diffs if d["pattern"] in known]
    diffs = [d for d in diffs if d["pattern"] not in known]
    summary = {"patterns": len(patterns), "subjects": len(subjects), "refused_by_varnishd": len(refused), "checks": checks,
               "differences": diffs, "listed_differences": listed}
    if args.json:
        print(json.dumps(summary, ensure_ascii=False))
    else:
        print(f"regex corpus: {len(patterns)} patterns ({len(refused)} refused by varnishd) x {len(subjects)} subjects: "
              f"{checks} checks (~, regsub, regsuball), {len(diffs)} differences, {len(listed)} more listed in tests/regex/differences.tsv")
        for d in diffs[: None if args.verbose else 40]:
            print(f"  {d['what']:9} {d['pattern']!r} on {d['subject']!r}: varnishd {d['varnishd']!r}, cache-d {d['cache-d']!r}")
        if args.verbose:
            for d in listed:
                print(f"  listed: {d['what']:9} {d['pattern']!r} on {d['subject']!r}: {known[d['pattern']]}")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
