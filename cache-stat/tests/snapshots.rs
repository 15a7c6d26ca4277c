//! The interactive screen rendered on ratatui's TestBackend from a fixed
//! history, compared with the files in tests/snapshots (regenerate with
//! UPDATE_SNAPSHOTS=1 and review the diff).

use std::time::Duration;

use cache_stat::model::History;
use cache_stat::tui::{self, App};
use cache_stat::Filter;
use common::counters::{Format, Kind, Level};
use common::segment::CounterInfo;
use ratatui::backend::TestBackend;
use ratatui::Terminal;

fn info(name: &str, kind: Kind, level: Level, format: Format, description: &str) -> CounterInfo {
    CounterInfo { name: name.into(), kind, level, format, description: description.into() }
}

/// 40 refreshes of a cache under a steady load with a 90% hit rate.
fn history() -> History {
    use Format::*;
    use Kind::*;
    use Level::*;
    let infos = vec![
        info("MGT.uptime", Counter, Info, Duration, "Management process uptime"),
        info("MGT.child_start", Counter, Diag, Integer, "Child process started"),
        info("MAIN.uptime", Counter, Info, Duration, "Child process uptime"),
        info("MAIN.sess_conn", Counter, Info, Integer, "Sessions accepted"),
        info("MAIN.client_req", Counter, Info, Integer, "Good client requests received"),
        info("MAIN.cache_hit", Counter, Info, Integer, "Cache hits"),
        info("MAIN.cache_miss", Counter, Info, Integer, "Cache misses"),
        info("MAIN.backend_req", Counter, Info, Integer, "Backend requests made"),
        info("MAIN.n_purges", Counter, Info, Integer, "Number of purge operations executed"),
        info("MAIN.s_resp_bodybytes", Counter, Info, Bytes, "Response body bytes"),
        info("MAIN.n_object", Gauge, Info, Integer, "object structs made"),
        info("MAIN.busy_sleep", Counter, Diag, Integer, "Number of requests sent to sleep on busy objhdr"),
        info("SMA.s0.g_bytes", Gauge, Info, Bytes, "Bytes outstanding"),
    ];
    let mut h = History::default();
    for t in 0..40u64 {
        let req = 1000 * t;
        let values = vec![3600 + t, 2, 3000 + t, 50 + t, req, req * 9 / 10, req / 10, req / 10, 0, req * 2048, 500 + t, t / 4, 1 << 20];
        h.update(&infos, values, 2, t as f64);
    }
    h
}

fn render(w: u16, hgt: u16, app: &mut App, h: &History) -> String {
    let mut term = Terminal::new(TestBackend::new(w, hgt)).unwrap();
    term.draw(|f| tui::draw(f, app, h, None)).unwrap();
    let buf = term.backend().buffer();
    let mut out = String::new();
    for y in 0..hgt {
        let line: String = (0..w).map(|x| buf[(x, y)].symbol().to_string()).collect();
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn check(name: &str, got: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots").join(format!("{name}.txt"));
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e} (run with UPDATE_SNAPSHOTS=1)", path.display()));
    assert_eq!(got, want, "{name} differs from {} (UPDATE_SNAPSHOTS=1 regenerates)", path.display());
}

fn app() -> App {
    App::new("demo", Filter::new(&[]), Duration::from_secs(1))
}

/// Type `keys` (Enter as '\n').
fn press(a: &mut App, h: &History, keys: &str) {
    use crossterm::event::{KeyCode, KeyEvent};
    for c in keys.chars() {
        let code = if c == '\n' { KeyCode::Enter } else { KeyCode::Char(c) };
        a.key(KeyEvent::from(code), h);
    }
}

#[test]
fn table_and_header_80x24() {
    let got = render(80, 24, &mut app(), &history());
    assert!(got.contains("Hitrate n:       10       39       39"), "the 10-window is full, the others fill up: {got}");
    assert!(got.contains("avg(n):   0.9000"), "{got}");
    assert!(!got.contains("MAIN.n_purges"), "zero counters hidden by default");
    check("table-80x24", &got);
}

#[test]
fn table_and_header_120x40() {
    check("table-120x40", &render(120, 40, &mut app(), &history()));
}

#[test]
fn filter_applied() {
    let h = history();
    let mut a = app();
    press(&mut a, &h, "/cache_\n");
    let got = render(80, 24, &mut a, &h);
    assert!(got.contains("MAIN.cache_hit") && !got.contains("MAIN.client_req"), "{got}");
    check("filter-80x24", &got);
}

#[test]
fn chart_pane() {
    let h = history();
    let mut a = app();
    press(&mut a, &h, "g");
    let got = render(120, 40, &mut a, &h);
    assert!(got.contains("client req/s") && got.contains("hit rate %") && got.contains("backend req/s"), "{got}");
    check("charts-120x40", &got);
}

#[test]
fn verbosity_zero_and_description() {
    let h = history();
    let mut a = app();
    press(&mut a, &h, "v0d");
    let got = render(80, 24, &mut a, &h);
    assert!(got.contains("MAIN.busy_sleep") && got.contains("MAIN.n_purges"), "diag level and zeros shown: {got}");
    assert!(got.contains("MGT.uptime: Management process uptime"), "{got}");
    check("diag-zeros-description-80x24", &got);
}

#[test]
fn help_overlay() {
    let h = history();
    let mut a = app();
    press(&mut a, &h, "?");
    check("help-80x24", &render(80, 24, &mut a, &h));
}
