//! The Kubernetes base (`contrib/k8s/cachekit`) and its overlay
//! (`contrib/k8s/cache-bench-agents`): every object rendered and parsed
//! with its Kubernetes type (k8s-openapi), so that a misspelt field fails
//! here and not in the operator's cluster, and the objects checked against
//! each other (names referred to exist, selectors select the pods, memory
//! fits the storage). `kubectl kustomize` renders them when kubectl is
//! installed; the kustomizations use only resources, labels and
//! generators of files, which `render` below also does, so the objects are
//! checked on a machine without kubectl too.

use std::collections::BTreeSet;
use std::path::Path;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::util::*;

/// The Prometheus Operator's ServiceMonitor: the fields we use, and
/// nothing else accepted.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ServiceMonitor {
    api_version: String,
    kind: String,
    metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    spec: MonitorSpec,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct MonitorSpec {
    selector: k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
    endpoints: Vec<MonitorEndpoint>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct MonitorEndpoint {
    port: String,
    path: String,
    interval: String,
}

/// A YAML file's documents as JSON values.
fn documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = Vec::new();
    for doc in serde_norway::Deserializer::from_str(&text) {
        let v: Value = Value::deserialize(doc).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        if !v.is_null() {
            out.push(v);
        }
    }
    out
}

/// A kustomization rendered: its resources (files and directories), its
/// generated ConfigMaps and Secrets, its common labels. A key this does
/// not know fails the test (add it here, or keep the kustomization simple).
fn render(dir: &Path) -> Vec<Value> {
    let k = documents(&dir.join("kustomization.yaml")).remove(0);
    let known = ["apiVersion", "kind", "labels", "resources", "configMapGenerator", "secretGenerator"];
    for key in k.as_object().unwrap().keys() {
        assert!(known.contains(&key.as_str()), "{}: kustomization key {key} is not checked by this test", dir.display());
    }
    let mut objs = Vec::new();
    for r in k["resources"].as_array().unwrap() {
        let p = dir.join(r.as_str().unwrap());
        objs.extend(if p.is_dir() { render(&p) } else { documents(&p) });
    }
    for (generator, kind) in [("configMapGenerator", "ConfigMap"), ("secretGenerator", "Secret")] {
        for g in k[generator].as_array().into_iter().flatten() {
            let mut data = serde_json::Map::new();
            for f in g["files"].as_array().unwrap() {
                let f = f.as_str().unwrap();
                let (key, file) = f.split_once('=').unwrap_or((f, f));
                let text = std::fs::read_to_string(dir.join(file)).unwrap_or_else(|e| panic!("{}: {e}", dir.join(file).display()));
                let value = if kind == "Secret" { base64::Engine::encode(&base64::engine::general_purpose::STANDARD, text) } else { text };
                data.insert(key.to_string(), Value::String(value));
            }
            let mut obj = json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": g["name"]}, "data": data});
            if kind == "Secret" {
                obj["type"] = json!("Opaque");
            }
            objs.push(obj);
        }
    }
    for set in k["labels"].as_array().into_iter().flatten() {
        assert!(!set["includeSelectors"].as_bool().unwrap_or(false), "{}: labels in selectors are not rendered here", dir.display());
        let pairs = set["pairs"].as_object().unwrap();
        for o in &mut objs {
            add_labels(&mut o["metadata"], pairs);
            if set["includeTemplates"].as_bool().unwrap_or(false) && o["spec"]["template"].is_object() {
                add_labels(&mut o["spec"]["template"]["metadata"], pairs);
            }
        }
    }
    objs
}

fn add_labels(meta: &mut Value, pairs: &serde_json::Map<String, Value>) {
    let l = meta.as_object_mut().unwrap().entry("labels").or_insert(json!({}));
    for (n, v) in pairs {
        l[n] = v.clone();
    }
}

/// Parse as `T` and write back: every field must survive (k8s-openapi
/// skips fields it does not know, so a misspelt one would vanish).
fn typed<T: DeserializeOwned + Serialize>(v: &Value) -> T {
    let t: T = serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{e} in {v:#}"));
    let back = serde_json::to_value(&t).unwrap();
    if let Some(path) = first_difference(v, &back, String::new()) {
        panic!("{} {}: field {path} is not part of its type (misspelt?)", v["kind"], v["metadata"]["name"]);
    }
    t
}

fn first_difference(a: &Value, b: &Value, at: String) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => x.iter().find_map(|(k, v)| match y.get(k) {
            Some(w) => first_difference(v, w, format!("{at}.{k}")),
            None => Some(format!("{at}.{k}")),
        }),
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            x.iter().zip(y).enumerate().find_map(|(i, (v, w))| first_difference(v, w, format!("{at}[{i}]")))
        }
        _ => (a != b).then_some(at),
    }
}

/// The objects of one rendering, by kind.
#[derive(Default)]
struct Fleet {
    sets: Vec<StatefulSet>,
    services: Vec<Service>,
    maps: Vec<ConfigMap>,
    secrets: Vec<Secret>,
    pdbs: Vec<PodDisruptionBudget>,
    jobs: Vec<Job>,
    monitors: Vec<ServiceMonitor>,
}

fn parse_all(objs: &[Value]) -> Fleet {
    let mut f = Fleet::default();
    for o in objs {
        match o["kind"].as_str().unwrap_or("") {
            "StatefulSet" => f.sets.push(typed(o)),
            "Service" => f.services.push(typed(o)),
            "ConfigMap" => f.maps.push(typed(o)),
            "Secret" => f.secrets.push(typed(o)),
            "PodDisruptionBudget" => f.pdbs.push(typed(o)),
            "Job" => f.jobs.push(typed(o)),
            "ServiceMonitor" => f.monitors.push(typed(o)),
            other => panic!("no check for kind {other:?}: {o:#}"),
        }
    }
    f
}

/// A quantity like 1536Mi or 1G in bytes.
fn bytes(q: &str) -> u64 {
    let units = [("Ki", 1u64 << 10), ("Mi", 1 << 20), ("Gi", 1 << 30), ("K", 1000), ("M", 1_000_000), ("G", 1_000_000_000)];
    for (u, m) in units {
        if let Some(n) = q.strip_suffix(u) {
            return n.parse::<u64>().unwrap() * m;
        }
    }
    q.parse().unwrap()
}

/// The checks between objects: what the pods mount exists, the Services
/// and the budget select the pods, probes name ports the container has,
/// the memory limit holds the storage.
fn cross_check(f: &Fleet) {
    let names = |v: Vec<Option<String>>| v.into_iter().flatten().collect::<BTreeSet<String>>();
    let maps = names(f.maps.iter().map(|m| m.metadata.name.clone()).collect());
    let secrets = names(f.secrets.iter().map(|m| m.metadata.name.clone()).collect());
    let set = f.sets.iter().find(|s| s.metadata.name.as_deref() == Some("cachekit")).expect("the cachekit StatefulSet");
    let spec = set.spec.as_ref().unwrap();
    let pod = spec.template.spec.as_ref().unwrap();
    let pod_labels = spec.template.metadata.as_ref().and_then(|m| m.labels.clone()).unwrap_or_default();
    let selects = |sel: &std::collections::BTreeMap<String, String>| sel.iter().all(|(k, v)| pod_labels.get(k) == Some(v));
    // The headless Service the StatefulSet names, publishing unready pods.
    let peers = f.services.iter().find(|s| s.metadata.name.as_deref() == Some(spec.service_name.as_deref().unwrap())).expect("its Service");
    let ps = peers.spec.as_ref().unwrap();
    assert_eq!(ps.cluster_ip.as_deref(), Some("None"), "the peers' Service is headless");
    assert_eq!(ps.publish_not_ready_addresses, Some(true));
    for s in &f.services {
        if let Some(sel) = s.spec.as_ref().and_then(|s| s.selector.as_ref()) {
            if s.metadata.name.as_deref().is_some_and(|n| n.starts_with("cachekit")) {
                assert!(selects(sel), "Service {:?} selects the pods", s.metadata.name);
            }
        }
    }
    for p in &f.pdbs {
        let sel = p.spec.as_ref().unwrap().selector.as_ref().unwrap().match_labels.clone().unwrap_or_default();
        assert!(selects(&sel), "the PodDisruptionBudget selects the pods");
    }
    for v in pod.volumes.iter().flatten() {
        if let Some(cm) = &v.config_map {
            assert!(maps.contains(&cm.name), "ConfigMap {} is rendered", cm.name);
        }
        if let Some(s) = &v.secret {
            let n = s.secret_name.clone().unwrap();
            assert!(secrets.contains(&n), "Secret {n} is rendered");
        }
    }
    let claims: Vec<(String, u64)> = spec
        .volume_claim_templates
        .iter()
        .flatten()
        .map(|t| {
            let size = t.spec.as_ref().and_then(|s| s.resources.as_ref()).and_then(|r| r.requests.as_ref()).and_then(|r| r.get("storage"));
            (t.metadata.name.clone().expect("a claim's name"), bytes(&size.expect("a claim's size").0))
        })
        .collect();
    let mut vols: BTreeSet<&str> = pod.volumes.iter().flatten().map(|v| v.name.as_str()).collect();
    vols.extend(claims.iter().map(|(n, _)| n.as_str()));
    for c in &pod.containers {
        check_container(c, &vols);
    }
    check_disk_stores(&pod.containers[0], &claims);
    let want = ["cache-d", "vcl-reload", "stats", "access-log"];
    assert_eq!(pod.containers.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), want);
    // The ServiceMonitor scrapes a port the selected Service has.
    let client = f.services.iter().find(|s| s.metadata.name.as_deref() == Some("cachekit")).expect("the client Service");
    let ports: BTreeSet<String> = client.spec.as_ref().unwrap().ports.iter().flatten().filter_map(|p| p.name.clone()).collect();
    for m in &f.monitors {
        assert!(m.spec.endpoints.iter().all(|e| ports.contains(&e.port)), "the ServiceMonitor's port is the Service's");
        assert_eq!(m.kind, "ServiceMonitor");
    }
}

/// Every disk store of cache-d (`-s NAME=persistent|file,PATH,SIZE`) is on
/// a volume claim mounted at PATH that holds SIZE (cache-d's units: 1G is
/// 2^30) and a little more.
fn check_disk_stores(c: &Container, claims: &[(String, u64)]) {
    let args = c.args.clone().unwrap_or_default();
    for w in args.windows(2).filter(|w| w[0] == "-s") {
        let spec = w[1].split_once('=').map_or(w[1].as_str(), |(_, s)| s);
        let parts: Vec<&str> = spec.split(',').collect();
        if !matches!(parts[0], "persistent" | "file") {
            continue;
        }
        let size = parts[2].strip_suffix('G').map(|g| g.parse::<u64>().unwrap() << 30).expect("a size in G");
        let mount =
            c.volume_mounts.iter().flatten().find(|m| m.mount_path == parts[1]).unwrap_or_else(|| panic!("{} is mounted", parts[1]));
        let claim = claims.iter().find(|(n, _)| *n == mount.name).unwrap_or_else(|| panic!("{} is a volume claim", mount.name));
        assert!(claim.1 > size, "the claim {} ({} bytes) holds the store ({size})", claim.0, claim.1);
    }
}

fn check_container(c: &Container, vols: &BTreeSet<&str>) {
    for m in c.volume_mounts.iter().flatten() {
        assert!(vols.contains(m.name.as_str()), "{}: volume {} exists", c.name, m.name);
    }
    let ports: BTreeSet<String> = c.ports.iter().flatten().filter_map(|p| p.name.clone()).collect();
    for probe in [&c.readiness_probe, &c.liveness_probe].into_iter().flatten() {
        if let Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(p)) = probe.http_get.as_ref().map(|h| &h.port) {
            assert!(ports.contains(p), "{}: probe port {p} is one of its ports", c.name);
        }
    }
    if c.name != "cache-d" {
        return;
    }
    assert!(c.readiness_probe.is_some() && c.liveness_probe.is_some(), "cache-d has readiness and liveness probes");
    // Resources sized to -s: the limit holds the storage, a quarter more
    // for headers and indexes, and the log segment.
    let args = c.args.clone().unwrap_or_default();
    let s = args.iter().position(|a| a == "-s").map(|i| args[i + 1].clone()).expect("cache-d -s");
    let size = bytes(s.rsplit(',').next().unwrap());
    let limit = c.resources.as_ref().and_then(|r| r.limits.as_ref()).and_then(|l| l.get("memory")).expect("a memory limit");
    let limit = bytes(&limit.0);
    assert!(limit >= size + size / 4 + (85 << 20), "memory limit {limit} too small for -s {s}");
}

/// A copy of contrib/k8s with the secrets' files the kustomizations ask
/// for (they are not in git).
fn with_secrets() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let src = workspace().join("contrib/k8s");
    let status = std::process::Command::new("cp").arg("-r").arg(&src).arg(tmp.path()).status().unwrap();
    assert!(status.success());
    std::fs::write(tmp.path().join("k8s/cachekit/admin.secret"), "test-secret\n").unwrap();
    std::fs::write(tmp.path().join("k8s/cache-bench-agents/bench.secret"), "test-secret\n").unwrap();
    tmp
}

#[test]
fn the_kubernetes_base_and_overlay_parse_with_their_types() {
    let tmp = with_secrets();
    let base = tmp.path().join("k8s/cachekit");
    let fleet = parse_all(&render(&base));
    cross_check(&fleet);
    let overlay = parse_all(&render(&tmp.path().join("k8s/cache-bench-agents")));
    cross_check(&overlay);
    let job = overlay.jobs.first().expect("the agents' Job");
    assert_eq!(job.spec.as_ref().unwrap().completion_mode.as_deref(), Some("Indexed"));
    // The VCL the ConfigMap holds compiles, and the reload script parses.
    let map = fleet.maps.iter().find(|m| m.metadata.name.as_deref() == Some("cachekit-vcl")).unwrap();
    let data = map.data.as_ref().unwrap();
    let vcl = tmp.path().join("default.vcl");
    std::fs::write(&vcl, &data["default.vcl"]).unwrap();
    let out = run("cache-d", &["-C", "-f", vcl.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let sh = std::process::Command::new("sh").arg("-n").arg(base.join("reload.sh")).output().unwrap();
    assert!(sh.status.success(), "reload.sh: {}", String::from_utf8_lossy(&sh.stderr));
}

#[test]
fn kubectl_kustomize_renders_the_same_objects() {
    if std::process::Command::new("kubectl").arg("version").arg("--client").output().is_err() {
        eprintln!("kubectl is not installed: the objects were checked by the other test's own rendering");
        return;
    }
    let tmp = with_secrets();
    for dir in ["k8s/cachekit", "k8s/cache-bench-agents"] {
        let out = std::process::Command::new("kubectl").arg("kustomize").arg(tmp.path().join(dir)).output().unwrap();
        let warnings = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && warnings.trim().is_empty(), "kubectl kustomize {dir}: {warnings}");
        let file = tmp.path().join("rendered.yaml");
        std::fs::write(&file, &out.stdout).unwrap();
        let rendered = documents(&file);
        let fleet = parse_all(&rendered);
        cross_check(&fleet);
        // The same objects as our rendering (kubectl adds a hash of ten
        // letters and digits to a generated name unless told not to).
        let key = |v: &Value, unhash: bool| {
            let name = v["metadata"]["name"].as_str().unwrap().to_string();
            let hashed = name.rsplit_once('-').filter(|(_, h)| h.len() == 10 && h.bytes().all(|b| b.is_ascii_alphanumeric()));
            let base = match hashed {
                Some((b, _)) if unhash => b.to_string(),
                _ => name,
            };
            (v["kind"].as_str().unwrap().to_string(), base)
        };
        // With the same labels on them and on their pods.
        let labels = |v: &Value| (v["metadata"]["labels"].to_string(), v["spec"]["template"]["metadata"]["labels"].to_string());
        let theirs: std::collections::BTreeMap<_, _> = rendered.iter().map(|v| (key(v, true), labels(v))).collect();
        let ours: std::collections::BTreeMap<_, _> = render(&tmp.path().join(dir)).iter().map(|v| (key(v, false), labels(v))).collect();
        assert_eq!(theirs, ours, "{dir}");
    }
}

/// A mounted ConfigMap as kubelet writes one: `..data` links to a
/// timestamped directory, each file links through `..data`; an update
/// writes a new directory and switches `..data` at once.
struct Mounted {
    dir: std::path::PathBuf,
    n: usize,
}

impl Mounted {
    fn new(dir: &Path, vcl: &str) -> Mounted {
        std::fs::create_dir_all(dir).unwrap();
        let mut m = Mounted { dir: dir.to_path_buf(), n: 0 };
        m.update(vcl);
        std::os::unix::fs::symlink("..data/default.vcl", dir.join("default.vcl")).unwrap();
        m
    }

    fn update(&mut self, vcl: &str) {
        self.n += 1;
        let version = format!("..v{}", self.n);
        std::fs::create_dir(self.dir.join(&version)).unwrap();
        std::fs::write(self.dir.join(&version).join("default.vcl"), vcl).unwrap();
        let tmp = self.dir.join("..data_tmp");
        std::os::unix::fs::symlink(&version, &tmp).unwrap();
        std::fs::rename(&tmp, self.dir.join("..data")).unwrap();
    }
}

/// reload.sh against a real cache-d: a changed ConfigMap is loaded and
/// used, a broken one refused with the running program kept, the old
/// programs it made discarded (one loaded by hand kept).
#[test]
fn the_reload_sidecar_loads_a_changed_policy_and_refuses_a_broken_one() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let policy = |body: &str| {
        format!("vcl 4.1;\nbackend default {{ .host = \"127.0.0.1\"; .port = \"{}\"; }}\nsub vcl_deliver {{ {body} }}\n", origin.port)
    };
    let mut map = Mounted::new(&tmp.path().join("vcl"), &policy("set resp.http.X-Policy = \"one\";"));
    let vcl = tmp.path().join("vcl/default.vcl");
    let d = Daemon::start_args(&tmp.path().join("n"), &["-f", vcl.to_str().unwrap()]);
    let path = format!("{}:{}", bin("cache-adm").parent().unwrap().display(), std::env::var("PATH").unwrap_or_default());
    let mut sidecar = std::process::Command::new("sh")
        .arg(workspace().join("contrib/k8s/cachekit/reload.sh"))
        .env("PATH", path)
        .env("CACHEKIT_INSTANCE", &d.dir)
        .env("CACHEKIT_VCL", &vcl)
        .env("CACHEKIT_RELOAD_INTERVAL", "0.2")
        .env("CACHEKIT_RELOAD", workspace().join("contrib/debian/cachekit-reload"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let policy_now = || Client::connect(d.port).get("/size/1", "").header("X-Policy").map(str::to_string);
    assert_eq!(policy_now().as_deref(), Some("one"));
    let ds = d.dir.to_str().unwrap().to_string();
    wait_for(10, "the sidecar to watch", || stdout(&run("cache-adm", &["-n", &ds, "vcl.list"])).contains("boot").then_some(()));
    std::thread::sleep(std::time::Duration::from_millis(500));
    map.update(&policy("set resp.http.X-Policy = \"two\";"));
    wait_for(10, "the changed policy to be used", || (policy_now().as_deref() == Some("two")).then_some(()));
    // A broken policy: refused, the running one stays.
    map.update(&policy("set resp.http.X-Policy = ;"));
    std::thread::sleep(std::time::Duration::from_secs(1));
    assert_eq!(policy_now().as_deref(), Some("two"), "the running program stays");
    let spare = vcl_src(tmp.path(), "spare.vcl", &policy(""), origin.port);
    assert!(run("cache-adm", &["-n", &ds, "vcl.load", "spare", spare.to_str().unwrap()]).status.success());
    map.update(&policy("set resp.http.X-Policy = \"three\";"));
    wait_for(10, "the next good policy to be used", || (policy_now().as_deref() == Some("three")).then_some(()));
    // Only the active program is left, and the one loaded by hand.
    wait_for(10, "the older programs to be discarded", || {
        let list = stdout(&run("cache-adm", &["-n", &ds, "vcl.list"]));
        (list.lines().count() == 2 && list.lines().any(|l| l.starts_with("available") && l.ends_with(" spare"))).then_some(())
    });
    let _ = sidecar.kill();
    let out = sidecar.wait_with_output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(said.contains("was refused") && said.contains("Line 3"), "the refusal and the compiler's message: {said}");
}
