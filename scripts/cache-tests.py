#!/usr/bin/env python3
"""The public HTTP cache test suite (cache-tests.fyi) against cache-d and varnishd (issue 36).

The suite's published package, `http-cache-tests` 0.4.5 from the npm
registry, is installed (pinned, once) into target/cache-tests/node_modules;
its files are not copied into this repository. Its test server is started
on a free loopback port; varnishd (when installed) and cache-d are started
in front of it the way the suite's docker harness runs Varnish -- the
built-in policy, `-p default_ttl=0 -p default_grace=0 -p default_keep=3600
-s malloc,64M` -- and the suite's client runs through each in turn. Each
raw result is kept in target/cache-tests/results/{varnishd,cache-d}.json,
each server's log in target/cache-tests/logs/.

Printed: one summary line per server, counted as cache-tests.fyi counts
(the suite's lib/display.mjs, determineTestResult: a test whose
`depends_on` test did not pass is a dependency failure, a `Setup` error a
setup failure, then by kind: required, optimal, check); then every test
cache-d does worse on than varnishd (varnishd passed, cache-d did not),
and every test cache-d passes that varnishd does not.

  cache-tests.py                        both servers (cache-d alone without varnishd)
  cache-tests.py --server cache-d       one server, no comparison
  cache-tests.py --rfc                  also cache-d in RFC mode (-p feature=+rfc9111,
                                        as "cache-d-rfc"), its required failures
                                        listed, and the reverse proxies whose
                                        results the package publishes
  cache-tests.py --cache-d-args "-p ..." extra cache-d flags
  cache-tests.py -j                     the summary as JSON on stdout
  cache-tests.py --server cache-d --id freshness-max-age
                                        one test, the suite's dump of its
                                        requests and responses
  cache-tests.py --suite DIR            a checkout of the suite's repository
                                        (github.com/http-tests/cache-tests: DIR
                                        holds package.json, tests/, test-engine/)
                                        instead of the npm package; `npm install
                                        --omit=dev` runs there when DIR has no
                                        node_modules; results and logs are
                                        named <server>-upstream

A test that would fail the run (cache-d worse than varnishd, or a
required failure in RFC mode) is run once more, with only the others
that failed so, against a new instance of that server, and counts as
failed only when it fails both times; those that passed the second time
are listed, and the first run's results kept as <server>-first.json.
Why: many of the suite's tests send `Expires` one second after `Date`
(both whole seconds of the origin's clock), and under Varnish's rule
(Expires less now, when Date is within clock_skew of now) the lifetime
left is the rest of that second less the time the response took to
reach the cache: the client starts every test at once, and on an idle
machine that time was 62 ms median, 112 ms p90, 165 ms at most (the
origin's `Server-Now` against cache-d's `Timestamp Beresp`, 551
fetches), so a run makes such a response uncacheable about one time in
ten, on varnishd as on cache-d, and more often on a loaded machine (in
CI: 3 conditional-etag tests on 739462f, 2 on f88e41f; all passed
again). Alone, the same tests wait for nobody.

Exit: 0 when no test is worse on cache-d than on varnishd (or one server
ran) and, with --rfc, RFC mode fails no required test; 1 otherwise,
2 on bad usage or when a server, the suite or its
installation failed. Progress goes to stderr. Only the npm install talks
to anything but 127.0.0.1. CACHE_D names the cache-d binary (default
${CARGO_TARGET_DIR:-target}/debug/cache-d). Stdlib only.
"""
import argparse
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / os.environ.get("CARGO_TARGET_DIR", "target")
WORK = TARGET / "cache-tests"
PACKAGE, VERSION = "http-cache-tests", "0.4.5"
# The docker harness's varnishd flags (the suite's docker/serve.sh).
FLAGS = ["-p", "default_ttl=0", "-p", "default_grace=0", "-p", "default_keep=3600", "-s", "malloc,64M"]
CLIENT_TIMEOUT = 900  # seconds for the whole suite against one server

# The test server listens on every address (server.mjs: listen(port));
# this preload binds it to loopback only.
LOOPBACK = """import http from 'http'
const listen = http.Server.prototype.listen
http.Server.prototype.listen = function (port, ...rest) {
  return listen.call(this, Number(port), '127.0.0.1', ...rest)
}
"""

# The tests as the client runs them (0.4.5's cli.mjs adds the
# Surrogate-Control suite to tests/index.mjs; the repository's newer
# test-engine/cli.mjs runs tests/index.mjs as it is), with what the
# summary needs of each.
LIST_SURROGATE = """import surrogate from './tests/surrogate-control.mjs'
tests.push(surrogate)
"""
LIST_TESTS = """import tests from './tests/index.mjs'
%s
const out = []
for (const suite of tests) {
  for (const t of suite.tests) {
    out.push({ id: t.id, name: t.name, kind: t.kind, depends_on: t.depends_on, suite: suite.id })
  }
}
console.log(JSON.stringify(out))
"""

# The published results' index (results/index.mjs), as JSON.
# The suite's client run on some of its tests only (`CACHE_TESTS_IDS`,
# space-separated), printing the results as JSON as the whole-suite
# client does: the runner and the fetch module the layout's client uses.
RUN_SOME = """import { runTests, getResults } from './%(runner)s'
import fetch from '%(fetch)s'
import tests from './tests/index.mjs'
%(surrogate)s
const want = new Set(process.env.CACHE_TESTS_IDS.split(' '))
const some = tests
  .map(s => ({ name: s.name, id: s.id, description: s.description, tests: s.tests.filter(t => want.has(t.id)) }))
  .filter(s => s.tests.length)
runTests(some, fetch, false, process.env.CACHE_TESTS_BASE)
  .then(() => console.log(JSON.stringify(getResults(), null, 2)))
  .catch(err => { console.error(err); process.exit(1) })
"""

LIST_PUBLISHED = """import index from './results/index.mjs'
console.log(JSON.stringify(index))
"""

# The result kinds of the suite's lib/display.mjs, in summary order.
KINDS = ["pass", "fail", "optional_fail", "no", "setup_fail", "dependency_fail",
         "yes", "retry", "harness_fail", "untested"]
LABELS = {"pass": "pass", "fail": "required fail", "optional_fail": "optional fail", "no": "check fail",
          "setup_fail": "setup fail", "dependency_fail": "dependency", "yes": "check yes",
          "retry": "retry", "harness_fail": "harness fail", "untested": "untested"}
PASSED = ("pass", "yes")  # display.mjs's passTypes


class Failure(Exception):
    """Something other than a test failed: exit 2 with this message."""


class Layout:
    """Where a version of the suite keeps its parts, and how its display
    code counts. The npm package 0.4.5 by default; --suite replaces it
    (once, in parse_args, before anything runs) by a checkout of the
    repository's newer layout."""

    def __init__(self, root, server, client, fetch, surrogate, name, published, suffix, abort_is_harness):
        self.root = root  # the directory the server and client run in
        self.server, self.client = server, client  # their scripts, relative to root
        self.fetch = fetch  # the module the client fetches with
        self.surrogate = surrogate  # the client adds tests/surrogate-control.mjs
        self.name = name  # in messages and the JSON summary
        self.published = published  # who publishes results/, in the --rfc listing
        self.suffix = suffix  # of result and log file names
        self.is_package = not suffix  # the pinned npm package, which install() installs
        # The newer test-engine/lib/results.mjs's determineTestResult counts
        # a result ["AbortError", ...] (a request that timed out) as a
        # harness failure; 0.4.5's lib/display.mjs counts it by kind.
        self.abort_is_harness = abort_is_harness

    @staticmethod
    def package():
        return Layout(WORK / "node_modules" / PACKAGE, "server/server.mjs", "cli.mjs", "node-fetch", True,
                      f"{PACKAGE}@{VERSION}", f"the package publishes them ({PACKAGE}@{VERSION} results/)",
                      "", False)

    @staticmethod
    def checkout(root):
        root = Path(root).resolve()
        name = f"{PACKAGE} checkout {root}"
        top = subprocess.run(["git", "-C", str(root), "rev-parse", "--show-toplevel", "HEAD"],
                             capture_output=True, text=True)
        lines = top.stdout.split()
        if top.returncode == 0 and len(lines) == 2 and Path(lines[0]).resolve() == root:
            name += f" at {lines[1]}"
        return Layout(root, "test-engine/server/server.mjs", "test-engine/cli.mjs", "node-fetch-with-proxy", False,
                      name, f"the checkout publishes them ({root / 'results'}/)", "-upstream", True)


LAYOUT = Layout.package()

# Required tests of the npm package 0.4.5 whose expectation the suite's
# newer version reversed, with RFC 9111 §5.1 ("a cache encountering a
# list-based Age field value SHOULD use the first member ...; if the field
# value is invalid ..., a cache SHOULD ignore the field"): 0.4.5 wants
# these responses stale, the newer suite and the RFC fresh. RFC mode
# follows the RFC, so with the package these fail as the RFC says they
# should; they are listed apart and do not fail the run. Any other
# required failure does.
REVERSED_IN_NEWER = {
    "age-parse-nonnumeric": "an invalid Age is ignored",
    "age-parse-negative": "an invalid Age is ignored",
    "age-parse-float": "an invalid Age is ignored",
    "age-parse-prefix-twoline": "of two Age lines the first counts",
    "age-parse-dup-0": "of a list the first member counts",
    "age-parse-dup-0-twoline": "of two Age lines the first counts",
    "age-parse-dup-old": "of two Age lines the first counts",
}


def log(msg):
    print(f"cache-tests: {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- the suite


def install():
    """The pinned package, installed unless it already is; a checkout's
    dependencies, unless it has node_modules."""
    if not LAYOUT.is_package:
        install_checkout()
        return
    pkg = LAYOUT.root / "package.json"
    if pkg.exists() and json.loads(pkg.read_text()).get("version") == VERSION:
        return
    if not shutil.which("npm"):
        raise Failure("needs npm and node (apt-get install nodejs npm)")
    log(f"installing {PACKAGE}@{VERSION} into {WORK.relative_to(ROOT)}")
    WORK.mkdir(parents=True, exist_ok=True)
    cmd = ["npm", "install", "--no-save", "--no-audit", "--no-fund", "--ignore-scripts",
           "--prefix", str(WORK), f"{PACKAGE}@{VERSION}"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0 or not pkg.exists():
        raise Failure(f"{' '.join(cmd)} failed:\n{out.stdout}{out.stderr}")


def install_checkout():
    if (LAYOUT.root / "node_modules").is_dir():
        return
    if not shutil.which("npm"):
        raise Failure("needs npm and node (apt-get install nodejs npm)")
    log(f"installing the dependencies of {LAYOUT.root} (npm install --omit=dev)")
    cmd = ["npm", "install", "--omit=dev", "--no-audit", "--no-fund", "--ignore-scripts"]
    out = subprocess.run(cmd, cwd=LAYOUT.root, capture_output=True, text=True)
    if out.returncode != 0:
        raise Failure(f"{' '.join(cmd)} in {LAYOUT.root} failed:\n{out.stdout}{out.stderr}")


def list_tests():
    """{id: test} for every test of the suite."""
    script = LIST_TESTS % (LIST_SURROGATE if LAYOUT.surrogate else "")
    out = subprocess.run(["node", "--input-type=module", "-e", script], cwd=LAYOUT.root,
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise Failure(f"could not list the suite's tests:\n{out.stderr}")
    return {t["id"]: t for t in json.loads(out.stdout)}


def classify(tests, results, test_id, honor_dependencies=True):
    """The suite's determineTestResult (0.4.5: lib/display.mjs; newer:
    test-engine/lib/results.mjs), a kind name."""
    test, result = tests[test_id], results.get(test_id)
    if result is None:
        return "untested"
    if honor_dependencies:
        for dep in test.get("depends_on") or []:
            if classify(tests, results, dep) not in PASSED:
                return "dependency_fail"
    if isinstance(result, list) and result and result[0] == "Setup":
        return "retry" if result[1:2] == ["retry"] else "setup_fail"
    if result is False:
        return "harness_fail"
    if LAYOUT.abort_is_harness and isinstance(result, list) and result[:1] == ["AbortError"]:
        return "harness_fail"
    passed = result is True
    kind = test.get("kind")
    if kind in ("required", None):
        return "pass" if passed else "fail"
    if kind == "optimal":
        return "pass" if passed else "optional_fail"
    if kind == "check":
        return "yes" if passed else "no"
    raise Failure(f"unrecognised test kind {kind!r} of {test_id}")


def message(tests, results, test_id):
    """Why a test did not pass, in one line."""
    cls = classify(tests, results, test_id)
    if cls == "dependency_fail":
        bad = [d for d in tests[test_id]["depends_on"] if classify(tests, results, d) not in PASSED]
        return f"dependency not passed: {', '.join(bad)}"
    result = results.get(test_id)
    if result is None:
        return "not run"
    if isinstance(result, list):
        return " ".join(str(x) for x in result if x).replace("\n", " ")
    return str(result)


def summarize(tests, results):
    counts = {k: 0 for k in KINDS}
    for test_id in tests:
        counts[classify(tests, results, test_id)] += 1
    return counts


def summary_line(name, counts):
    main = "  ".join(f"{LABELS[k]} {counts[k]}" for k in KINDS[:6])
    extra = ", ".join(f"{LABELS[k]} {counts[k]}" for k in KINDS[6:] if counts[k] or k == "yes")
    return f"{name:<11} {main}  ({extra}; {sum(counts.values())} tests)"


# ---------------------------------------------------------------- processes


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(proc, port, what, logfile, limit=20):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise Failure(f"{what} exited ({proc.returncode}) before listening on 127.0.0.1:{port}; "
                          f"its log: {logfile}\n{Path(logfile).read_text()[-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise Failure(f"{what} did not listen on 127.0.0.1:{port} within {limit} s; its log: {logfile}")


def stop(proc):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Procs:
    """Every process started, stopped at exit whatever happens."""

    def __init__(self):
        self.procs = []

    def start(self, cmd, logfile, **kw):
        out = open(logfile, "w")
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, **kw)
        out.close()
        self.procs.append(proc)
        return proc

    def stop_all(self):
        for proc in reversed(self.procs):
            stop(proc)
        self.procs = []


def start_origin(procs, tmp):
    """The suite's test server on a free loopback port."""
    port = free_port()
    env = dict(os.environ, npm_config_protocol="http", npm_config_port=str(port),
               npm_config_pidfile=str(Path(tmp) / "server.pid"))
    preload = "data:text/javascript," + urllib.parse.quote(LOOPBACK)
    logfile = WORK / "logs" / f"server{LAYOUT.suffix}.log"
    proc = procs.start(["node", "--import", preload, LAYOUT.server], logfile, cwd=LAYOUT.root, env=env)
    wait_listening(proc, port, "the suite's test server", logfile)
    return port


def proxy_command(kind, cache_d, port, origin_port, instance, extra):
    common = ["-F", "-a", f"127.0.0.1:{port}", "-b", f"127.0.0.1:{origin_port}", "-n", instance,
              "-T", "127.0.0.1:0"] + FLAGS
    if kind == "varnishd":
        return [varnishd_path(), "-j", "none"] + common
    rfc = ["-p", "feature=+rfc9111"] if kind == "cache-d-rfc" else []
    return [cache_d] + common + rfc + extra


def run_client(port, test_id=None, some=None):
    """The suite's client through 127.0.0.1:port (every test, the one
    `test_id`, or only the tests `some`); its stdout."""
    # As `npm run cli` would set them: cli.mjs reads the id as
    # npm_config_id || npm_package_config_id, and "" means every test.
    base = f"http://127.0.0.1:{port}"
    env = dict(os.environ, npm_config_base=base, npm_config_id=test_id or "", npm_package_config_id="")
    cmd = ["node", "--no-warnings", LAYOUT.client]
    if some:
        runner = (Path(LAYOUT.client).parent / "client" / "runner.mjs").as_posix()
        script = RUN_SOME % {"runner": runner, "fetch": LAYOUT.fetch,
                             "surrogate": LIST_SURROGATE if LAYOUT.surrogate else ""}
        env.update(CACHE_TESTS_IDS=" ".join(some), CACHE_TESTS_BASE=base)
        cmd = ["node", "--no-warnings", "--input-type=module", "-e", script]
    try:
        out = subprocess.run(cmd, cwd=LAYOUT.root, env=env,
                             capture_output=True, text=True, timeout=CLIENT_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise Failure(f"the suite's client did not finish within {CLIENT_TIMEOUT} s")
    # cli.mjs reports its own errors on stderr and still exits 0: a run
    # whose stdout is not the results JSON fails in run_server, with this.
    if out.returncode != 0:
        raise Failure(f"the suite's client failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return out.stdout, out.stderr


def run_server(procs, kind, args, origin_port, tmp, tests, some=None):
    """The suite (or only the tests `some`) against one server: its raw
    results, also saved."""
    port = free_port()
    instance = str(Path(tmp) / kind)
    extra = shlex.split(args.cache_d_args)
    cmd = proxy_command(kind, args.cache_d, port, origin_port, instance, extra)
    logfile = WORK / "logs" / f"{kind}{LAYOUT.suffix}.log"
    log(f"{kind}: starting on 127.0.0.1:{port} ({' '.join(cmd[1:])})")
    started = time.monotonic()
    proc = procs.start(cmd, logfile)
    try:
        wait_listening(proc, port, kind, logfile)
        out, err = run_client(port, args.id, some)
    finally:
        stop(proc)
    if args.id:
        print(out, end="")
        return None
    try:
        results = json.loads(out)
    except json.JSONDecodeError:
        raise Failure(f"the suite's client printed no JSON against {kind}:\n{out[-2000:]}{err[-2000:]}")
    took = time.monotonic() - started
    if some:
        log(f"{kind}: done in {took:.0f} s")
        return results
    dest = result_file(kind)
    dest.write_text(json.dumps(results, indent=2) + "\n")
    counts = summarize(tests, results)
    log(f"{kind}: done in {took:.0f} s: pass {counts['pass']}, "
        f"required fail {counts['fail']}; results in {dest.relative_to(ROOT)}")
    return results


def result_file(kind):
    return WORK / "results" / f"{kind}{LAYOUT.suffix}.json"


def first_file(kind):
    """Where the first run's results go when the suite runs twice."""
    return WORK / "results" / f"{kind}{LAYOUT.suffix}-first.json"


def varnishd_path():
    return shutil.which("varnishd") or shutil.which("varnishd", path="/usr/sbin:/usr/local/sbin")


# ---------------------------------------------------------------- report


def differences(tests, ours, theirs):
    """Tests theirs passes and ours does not, as report rows."""
    rows = []
    for test_id, test in tests.items():
        if classify(tests, theirs, test_id) in PASSED and classify(tests, ours, test_id) not in PASSED:
            rows.append({"id": test_id, "name": test["name"], "kind": test.get("kind") or "required",
                         "result": classify(tests, ours, test_id), "message": message(tests, ours, test_id)})
    return rows


def published(tests):
    """The suite's own results of reverse proxies (results/index.mjs, a
    module whose default export lists each file's product, type and
    version), counted as ours; none when it has no results/index.mjs."""
    results = LAYOUT.root / "results"
    if not (results / "index.mjs").exists():
        return {}
    out = subprocess.run(["node", "--input-type=module", "-e", LIST_PUBLISHED], cwd=LAYOUT.root,
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise Failure(f"could not read {results / 'index.mjs'}:\n{out.stderr}")
    pub = {}
    for entry in json.loads(out.stdout):
        if entry.get("type") == "rev-proxy" and (results / entry.get("file", "-")).exists():
            res = json.loads((results / entry["file"]).read_text())
            pub[f"{entry['name']} {entry.get('version', '')}".strip()] = summarize(tests, res)
    return pub


def rfc_failures(tests, results):
    """RFC mode's required failures, and apart those the package's
    version expects against RFC 9111, which its newer version reversed."""
    failed = [{"id": t, "name": tests[t]["name"], "message": message(tests, results, t)}
              for t in tests if classify(tests, results, t) == "fail"]
    reversed_ = [r for r in failed if LAYOUT.is_package and r["id"] in REVERSED_IN_NEWER
                 and r["message"].endswith("comes from cache")]
    return [r for r in failed if r not in reversed_], reversed_


def failing(tests, runs, kind):
    """The tests of `kind`'s run that would fail the whole run."""
    if kind == "cache-d" and "varnishd" in runs:
        return [r["id"] for r in differences(tests, runs["cache-d"], runs["varnishd"])]
    if kind == "cache-d-rfc":
        return [r["id"] for r in rfc_failures(tests, runs["cache-d-rfc"])[0]]
    return []


def run_again(procs, args, origin_port, tmp, tests, runs):
    """Run the tests that would fail the run once more, by themselves,
    against a new instance of their server; such a test that passes the
    second time takes its second result. Returns {server: [ids that
    passed again]}."""
    again = {}
    for kind in list(runs):
        ids = failing(tests, runs, kind)
        if not ids:
            continue
        log(f"{kind}: {len(ids)} failing ({', '.join(ids)}); these again, alone, to tell a stall from a difference")
        shutil.copyfile(result_file(kind), first_file(kind))
        second = run_server(procs, kind, args, origin_port, tmp, tests, some=ids)
        merged = dict(runs[kind])
        again[kind] = []
        for t in ids:
            if classify(tests, second, t, honor_dependencies=False) in PASSED:
                merged[t] = second[t]
                again[kind].append(t)
        log(f"{kind}: passed the second time: {len(again[kind])} of {len(ids)}")
        runs[kind] = merged
        result_file(kind).write_text(json.dumps(merged, indent=2) + "\n")
    return again


def rfc_report(tests, results, json_out):
    """RFC mode's required failures (those the package's version expects
    against RFC 9111, which its newer version reversed, apart), and the
    published reverse proxies."""
    failed, reversed_ = rfc_failures(tests, results)
    pub = published(tests)
    if not json_out:
        print(f"\ncache-d in RFC mode (-p feature=+rfc9111): required failures: {len(failed)}")
        for row in failed:
            print(f"  {row['id']}: {row['name']}\n      {row['message']}")
        if reversed_:
            print(f"  and {len(reversed_)} that {LAYOUT.name} expects against RFC 9111 §5.1, "
                  "reversed in the suite's newer version (not counted):")
            for row in reversed_:
                print(f"  {row['id']}: {REVERSED_IN_NEWER[row['id']]}")
        print(f"\nreverse proxies as {LAYOUT.published}:")
        for name, counts in sorted(pub.items(), key=lambda kv: -kv[1]["pass"]):
            print("  " + summary_line(name, counts))
    return failed, pub, reversed_


def report(args, tests, runs, again):
    summary = {kind: summarize(tests, res) for kind, res in runs.items()}
    worse = better = None
    rfc_failed, pub, rfc_reversed = ([], None, [])
    if "cache-d-rfc" in runs:
        rfc_failed, pub, rfc_reversed = rfc_report(tests, runs["cache-d-rfc"], args.json)
    if "varnishd" in runs and "cache-d" in runs:
        worse = differences(tests, runs["cache-d"], runs["varnishd"])
        better = differences(tests, runs["varnishd"], runs["cache-d"])
    if args.json:
        doc = {"suite": LAYOUT.name, "summary": summary,
               "results": {k: str(result_file(k).relative_to(ROOT)) for k in runs}}
        if worse is not None:
            doc["worse_than_varnishd"] = worse
            doc["better_than_varnishd"] = better
        doc["passed_the_second_time"] = again
        if pub is not None:
            doc["rfc_required_failures"] = rfc_failed
            doc["rfc_reversed_in_newer_suite"] = rfc_reversed
            doc["published_reverse_proxies"] = pub
        print(json.dumps(doc, indent=2))
    else:
        for kind, counts in summary.items():
            print(summary_line(kind, counts))
        if worse is not None:
            print(f"\ncache-d worse than varnishd (varnishd passed, cache-d did not): {len(worse)}")
            for row in worse:
                print(f"  {row['id']} [{row['kind']}, {row['result']}]: {row['name']}\n      cache-d: {row['message']}")
            print(f"\ncache-d better than varnishd (cache-d passed, varnishd did not): {len(better)}")
            for row in better:
                print(f"  {row['id']} [{row['kind']}]: {row['name']}\n      varnishd: {row['message']}")
        for kind, ids in again.items():
            print(f"\n{kind}: failed the first time, passed the second (not counted): {len(ids)}"
                  f"{': ' if ids else ''}{', '.join(ids)}")
    return 1 if worse or rfc_failed else 0


# ---------------------------------------------------------------- main


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", choices=["both", "varnishd", "cache-d"],
                    help="which servers (default: both when varnishd is installed, else cache-d)")
    ap.add_argument("--cache-d-args", default="", help="extra cache-d flags, one shell-quoted string")
    ap.add_argument("-j", "--json", action="store_true", help="the summary as JSON on stdout")
    ap.add_argument("--id", help="run this one test, printing the suite's dump of it")
    ap.add_argument("--rfc", action="store_true",
                    help="also run cache-d in RFC mode (-p feature=+rfc9111); exit 1 on any required failure there")
    ap.add_argument("--suite", metavar="DIR",
                    help="run this checkout of the suite's repository (package.json, tests/, test-engine/) "
                         "instead of the npm package")
    args = ap.parse_args()
    if args.suite:
        missing = [p for p in ("package.json", "tests/index.mjs", "test-engine/cli.mjs",
                               "test-engine/server/server.mjs") if not (Path(args.suite) / p).exists()]
        if missing:
            ap.error(f"{args.suite} is not a checkout of the suite's newer layout: no {', '.join(missing)}")
        global LAYOUT
        LAYOUT = Layout.checkout(args.suite)
    have_varnishd = varnishd_path() is not None
    if args.server is None:
        args.server = "both" if have_varnishd else "cache-d"
        if not have_varnishd:
            log("varnishd not installed (apt-get install varnish): cache-d only, no comparison")
    if args.server != "cache-d" and not have_varnishd:
        ap.error("varnishd is not installed (apt-get install varnish)")
    if args.id and args.json:
        ap.error("--id prints the suite's dump, not a summary: no -j")
    default_bin = TARGET / "debug" / "cache-d"
    args.cache_d = os.environ.get("CACHE_D") or str(default_bin)
    if args.server != "varnishd" and not os.access(args.cache_d, os.X_OK):
        ap.error(f"no cache-d at {args.cache_d}: build first (cargo build -p cache-d) or set CACHE_D")
    if not shutil.which("node"):
        ap.error("needs node and npm (apt-get install nodejs npm)")
    return args


def main():
    args = parse_args()
    # A SIGTERM unwinds like Ctrl-C, through the finally that stops every process.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(2))
    procs = Procs()
    tmp = tempfile.mkdtemp(prefix="cache-tests.")
    try:
        install()
        tests = list_tests()
        if args.id and args.id not in tests:
            raise Failure(f"no test {args.id!r} in {LAYOUT.name}")
        for sub in ("results", "logs"):
            (WORK / sub).mkdir(parents=True, exist_ok=True)
        origin_port = start_origin(procs, tmp)
        kinds = ["varnishd", "cache-d"] if args.server == "both" else [args.server]
        if args.rfc:
            kinds.append("cache-d-rfc")
        for kind in kinds:
            first_file(kind).unlink(missing_ok=True)
        runs = {kind: run_server(procs, kind, args, origin_port, tmp, tests) for kind in kinds}
        if args.id:
            return 0
        again = run_again(procs, args, origin_port, tmp, tests, runs)
        return report(args, tests, runs, again)
    except Failure as e:
        log(str(e))
        return 2
    except KeyboardInterrupt:
        return 2
    finally:
        procs.stop_all()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
