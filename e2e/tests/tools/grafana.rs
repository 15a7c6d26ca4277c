//! The Grafana dashboard (contrib/grafana/cachekit.json): every metric
//! its queries name is one `cache-stat --prometheus` exports from a real
//! cache-d, with the labels the queries select on; every panel the
//! operator needs is there, each well formed.

use std::collections::{BTreeMap, BTreeSet};

use regex::Regex;
use serde_json::Value;

use crate::util::*;

/// Metric names and the label names each carries, from an exposition.
fn exported(text: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for sample in crate::stat::scrape(text).samples {
        out.entry(sample.metric).or_default().extend(sample.labels.keys().cloned());
    }
    out
}

#[test]
fn the_dashboard_queries_only_what_cache_stat_exports() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let vcl = vcl_src(
        tmp.path(),
        "p.vcl",
        r#"vcl 4.1;
probe p { .url = "/"; .interval = 0.2s; }
backend default { .host = "127.0.0.1"; .port = "ORIGIN_PORT"; .probe = p; }
"#,
        origin.port,
    );
    let d = Daemon::start_args(&tmp.path().join("n"), &["-f", vcl.to_str().unwrap()]);
    wait_for(10, "the probed backend to serve", || (Client::connect(d.port).get("/size/10", "").status == 200).then_some(()));
    let o = run("cache-stat", &["-n", d.dir.to_str().unwrap(), "--prometheus"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let metrics = exported(&stdout(&o));
    assert!(metrics.contains_key("varnish_backend_happy") && metrics["varnish_backend_happy"].contains("backend"));

    let dash: Value =
        serde_json::from_str(&std::fs::read_to_string(workspace().join("contrib/grafana/cachekit.json")).unwrap()).expect("valid JSON");
    assert_eq!(dash["__inputs"][0]["name"], "DS_PROMETHEUS", "importable with a Prometheus data source chosen");
    let panels = dash["panels"].as_array().unwrap();
    let mut ids = BTreeSet::new();
    let reference = Regex::new(r"(varnish_[a-z0-9_]+)(\{([^}]*)\})?").unwrap();
    let matcher = Regex::new(r"([a-z_]+)\s*(=~|!~|!=|=)").unwrap();
    let grouping = Regex::new(r"by \(([^)]*)\)").unwrap();
    for p in panels {
        let title = p["title"].as_str().unwrap();
        assert!(ids.insert(p["id"].as_u64().unwrap()), "{title}: panel ids are unique");
        for k in ["h", "w", "x", "y"] {
            assert!(p["gridPos"][k].is_u64(), "{title}: gridPos.{k}");
        }
        let targets = p["targets"].as_array().unwrap_or_else(|| panic!("{title}: targets"));
        assert!(!targets.is_empty(), "{title}");
        for t in targets {
            assert_eq!(t["datasource"]["uid"], "${DS_PROMETHEUS}", "{title}");
            let expr = t["expr"].as_str().unwrap();
            let mut used_labels = BTreeSet::new();
            for c in reference.captures_iter(expr) {
                let name = &c[1];
                let labels = metrics.get(name).unwrap_or_else(|| panic!("{title}: {name} is not exported by cache-stat"));
                if let Some(inside) = c.get(3) {
                    for m in matcher.captures_iter(inside.as_str()) {
                        let l = m[1].to_string();
                        assert!(l == "instance" || labels.contains(&l), "{title}: {name} has no label {l}");
                        used_labels.insert(l);
                    }
                }
                used_labels.extend(labels.iter().cloned());
            }
            for g in grouping.captures_iter(expr) {
                for l in g[1].split(',').map(str::trim) {
                    assert!(l == "instance" || used_labels.contains(l), "{title}: grouping by {l}, which no metric here has");
                }
            }
        }
    }
    let titles: BTreeSet<&str> = panels.iter().filter_map(|p| p["title"].as_str()).collect();
    for want in [
        "Requests",
        "Hit rate",
        "Backend requests",
        "Backend failures",
        "Backend health (last probe)",
        "Objects",
        "Storage",
        "LRU nukes",
        "Bans",
        "Child restarts",
        "Log ring wraps",
    ] {
        assert!(titles.contains(want), "the dashboard has no {want} panel");
    }
}
