//! The interactive screen: a header with uptimes and hit-rate windows, the
//! counter table, and on demand a charts pane, a description line and a
//! help overlay. [`App`] holds what the operator chose, [`draw`] paints it
//! from a [`History`], [`App::key`] applies a key; [`run`] is the loop that
//! owns the terminal and gives it back on every way out (quit, SIGTERM,
//! SIGINT, SIGHUP, panic).

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::counters::{Format, Kind, Level};
use crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Direction, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::symbols;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Axis, Block, Borders, Cell, Chart, Clear, Dataset, GraphType, Paragraph, Row, Sparkline, Table};
use ratatui::Frame;
use regex::Regex;

use crate::filter::Filter;
use crate::model::{dhms, History, Reading, Source, CHART_SAMPLES};

/// The `/` filter: a glob when it has `*` or `?`, else a regular
/// expression searched anywhere in the name.
pub enum Search {
    Glob(String),
    Regex(Regex),
}

impl Search {
    pub fn parse(text: &str) -> Result<Search, String> {
        if text.contains(['*', '?']) {
            Ok(Search::Glob(text.to_string()))
        } else {
            Regex::new(text).map(Search::Regex).map_err(|e| format!("bad regular expression: {e}"))
        }
    }
    fn matches(&self, name: &str) -> bool {
        match self {
            Search::Glob(g) => common::glob::matches(g, name),
            Search::Regex(r) => r.is_match(name),
        }
    }
}

/// What the operator chose.
pub struct App {
    pub instance: String,
    pub cli_filter: Filter,
    pub search: Option<(String, Search)>,
    /// The `/` prompt while it is being typed.
    pub input: Option<String>,
    pub verbosity: Level,
    pub hide_zero: bool,
    pub show_desc: bool,
    pub scaled: bool,
    pub human_bytes: bool,
    pub interval: Duration,
    pub selected: usize,
    pub offset: usize,
    pub help: bool,
    pub charts: bool,
    /// "child restarted", "waiting for ...", filter errors.
    pub message: Option<String>,
    pub quit: bool,
    page: usize,
}

impl App {
    pub fn new(instance: &str, cli_filter: Filter, interval: Duration) -> App {
        App {
            instance: instance.to_string(),
            cli_filter,
            search: None,
            input: None,
            verbosity: Level::Info,
            hide_zero: true,
            show_desc: false,
            scaled: false,
            human_bytes: true,
            interval,
            selected: 0,
            offset: 0,
            help: false,
            charts: false,
            message: None,
            quit: false,
            page: 10,
        }
    }

    /// The counters shown, in order (indices into the history).
    pub fn rows(&self, h: &History) -> Vec<usize> {
        (0..h.infos.len())
            .filter(|&i| {
                let c = &h.infos[i];
                self.cli_filter.shows(&c.name)
                    && c.level <= self.verbosity
                    && (!self.hide_zero || h.values[i] != 0)
                    && self.search.as_ref().is_none_or(|(_, s)| s.matches(&c.name))
            })
            .collect()
    }

    /// Apply one key.
    pub fn key(&mut self, k: KeyEvent, h: &History) {
        if k.kind == KeyEventKind::Release {
            return;
        }
        if let Some(text) = self.input.as_mut() {
            match k.code {
                KeyCode::Enter => {
                    let text = self.input.take().unwrap_or_default();
                    if text.is_empty() {
                        self.search = None;
                    } else {
                        match Search::parse(&text) {
                            Ok(s) => self.search = Some((text, s)),
                            Err(e) => self.message = Some(e),
                        }
                    }
                    self.selected = 0;
                    self.offset = 0;
                }
                KeyCode::Esc => self.input = None,
                KeyCode::Backspace => {
                    text.pop();
                }
                KeyCode::Char(c) => text.push(c),
                _ => {}
            }
            return;
        }
        let n = self.rows(h).len();
        let ctrl = k.modifiers.contains(KeyModifiers::CONTROL);
        match k.code {
            KeyCode::Char('c') if ctrl => self.quit = true,
            KeyCode::Char('q') | KeyCode::Char('Q') => self.quit = true,
            KeyCode::Esc if self.help => self.help = false,
            KeyCode::Esc => {
                self.search = None;
                self.message = None;
            }
            KeyCode::Char('?') | KeyCode::Char('h') => self.help = !self.help,
            KeyCode::Up | KeyCode::Char('k') => self.selected = self.selected.saturating_sub(1),
            KeyCode::Down | KeyCode::Char('j') => self.selected += 1,
            KeyCode::PageUp | KeyCode::Char('b') if ctrl || k.code == KeyCode::PageUp => {
                self.selected = self.selected.saturating_sub(self.page)
            }
            KeyCode::PageDown | KeyCode::Char('f') if ctrl || k.code == KeyCode::PageDown => self.selected += self.page,
            KeyCode::Char(' ') => self.selected += self.page,
            KeyCode::Home => self.selected = 0,
            KeyCode::End | KeyCode::Char('G') => self.selected = n.saturating_sub(1),
            KeyCode::Char('/') => self.input = Some(String::new()),
            KeyCode::Char('v') => {
                self.verbosity = match self.verbosity {
                    Level::Info => Level::Diag,
                    Level::Diag => Level::Debug,
                    Level::Debug => Level::Info,
                }
            }
            KeyCode::Char('0') => self.hide_zero = !self.hide_zero,
            KeyCode::Char('d') => self.show_desc = !self.show_desc,
            KeyCode::Char('e') => self.scaled = !self.scaled,
            KeyCode::Char('b') => self.human_bytes = !self.human_bytes,
            KeyCode::Char('g') => self.charts = !self.charts,
            KeyCode::Char('+') => self.interval = (self.interval * 2).min(Duration::from_secs(60)),
            KeyCode::Char('-') => self.interval = (self.interval / 2).max(Duration::from_millis(125)),
            _ => {}
        }
        self.selected = self.selected.min(n.saturating_sub(1));
    }
}

/// `v` in the largest unit of `base` that keeps it at least 1.
fn human(v: f64, base: f64, units: [&str; 6]) -> String {
    let (mut x, mut i) = (v, 0);
    while x.abs() >= base && i < units.len() - 1 {
        x /= base;
        i += 1;
    }
    if i == 0 {
        format!("{x:.0}{}", units[0])
    } else {
        format!("{x:.2}{}", units[i])
    }
}

/// 1234567 → "1.23M" (powers of 1000).
fn scaled(v: f64) -> String {
    human(v, 1000.0, ["", "K", "M", "G", "T", "P"])
}

/// 1536 → "1.50K" (powers of 1024), for byte counters.
fn bytes(v: f64) -> String {
    human(v, 1024.0, ["B", "K", "M", "G", "T", "P"])
}

fn value_text(app: &App, format: Format, v: u64) -> String {
    match format {
        // A bitmap (a backend's last 64 probes): its bits, newest last.
        Format::Bitmap => format!("{v:x}"),
        Format::Bytes if app.human_bytes => bytes(v as f64),
        Format::Duration if app.human_bytes => dhms(v),
        _ if app.scaled => scaled(v as f64),
        _ => v.to_string(),
    }
}

fn rate_text(app: &App, format: Format, r: Option<f64>) -> String {
    match r {
        None => String::new(),
        Some(r) if format == Format::Bytes && app.human_bytes => format!("{}/s", bytes(r)),
        Some(r) if app.scaled => scaled(r),
        Some(r) => format!("{r:.2}"),
    }
}

fn ratio(v: f64) -> String {
    format!("{v:.4}")
}

/// Paint the whole screen. `waiting` replaces the table with a message
/// when there is no daemon to read.
pub fn draw(f: &mut Frame<'_>, app: &mut App, h: &History, waiting: Option<&str>) {
    let area = f.area();
    let footer = 1 + u16::from(app.show_desc);
    let chunks = Layout::default()
        .direction(Direction::Vertical)
        .constraints([Constraint::Length(4), Constraint::Min(3), Constraint::Length(footer)])
        .split(area);
    draw_header(f, chunks[0], app, h);
    let body = chunks[1];
    let (table_area, chart_area) = if app.charts {
        let c = Layout::default()
            .direction(Direction::Vertical)
            .constraints([Constraint::Percentage(45), Constraint::Percentage(55)])
            .split(body);
        (c[0], Some(c[1]))
    } else {
        (body, None)
    };
    match waiting {
        Some(msg) => {
            let p = Paragraph::new(vec![
                Line::from(""),
                Line::from(Span::styled(msg.to_string(), Style::default().add_modifier(Modifier::BOLD))),
            ])
            .block(Block::default().borders(Borders::TOP))
            .wrap(ratatui::widgets::Wrap { trim: true });
            f.render_widget(p, table_area);
        }
        None => draw_table(f, table_area, app, h),
    }
    if let Some(a) = chart_area {
        draw_charts(f, a, app, h);
    }
    draw_footer(f, chunks[2], app, h);
    if app.help {
        draw_help(f, area);
    }
}

fn draw_header(f: &mut Frame<'_>, area: Rect, app: &App, h: &History) {
    let up = |n: &str| h.get(n).map_or_else(|| "-".to_string(), dhms);
    let restarts = h.get("MGT.child_start").map_or(0, |s| s.saturating_sub(1));
    let w = &h.hitrate.windows;
    let avg = h.hitrate_since_start().map_or_else(|| "-".to_string(), ratio);
    let lines = vec![
        Line::from(vec![
            Span::styled(format!("cache-stat {}", app.instance), Style::default().add_modifier(Modifier::BOLD)),
            Span::raw(format!("   refresh {:.2}s", app.interval.as_secs_f64())),
        ]),
        Line::from(format!("Uptime mgt:   {:<14} Hitrate n: {:>8} {:>8} {:>8}", up("MGT.uptime"), w[0].n(), w[1].n(), w[2].n())),
        Line::from(format!(
            "Uptime child: {:<14}    avg(n): {:>8} {:>8} {:>8}",
            up("MAIN.uptime"),
            ratio(w[0].value()),
            ratio(w[1].value()),
            ratio(w[2].value())
        )),
        Line::from(format!("Restarts:     {restarts:<14}     total: {avg:>8}")),
    ];
    f.render_widget(Paragraph::new(lines), area);
}

fn draw_table(f: &mut Frame<'_>, area: Rect, app: &mut App, h: &History) {
    let rows = app.rows(h);
    // Two lines of borders and header.
    let height = area.height.saturating_sub(2) as usize;
    app.page = height.max(1);
    app.selected = app.selected.min(rows.len().saturating_sub(1));
    if app.selected < app.offset {
        app.offset = app.selected;
    } else if height > 0 && app.selected >= app.offset + height {
        app.offset = app.selected + 1 - height;
    }
    app.offset = app.offset.min(rows.len().saturating_sub(height.max(1)));
    let name_w = rows.iter().map(|&i| h.infos[i].name.len()).max().unwrap_or(4).clamp(20, 40) as u16;
    let changed = |i: usize| h.rates.get(i).copied().flatten().is_some_and(|r| r > 0.0);
    let body: Vec<Row> = rows
        .iter()
        .enumerate()
        .skip(app.offset)
        .take(height)
        .map(|(pos, &i)| {
            let c = &h.infos[i];
            let (rate, avg) = match c.kind {
                Kind::Counter => (rate_text(app, c.format, h.rates[i]), rate_text(app, c.format, h.average(i))),
                Kind::Gauge | Kind::Bitmap => (String::new(), String::new()),
            };
            let mut style = Style::default();
            if changed(i) {
                style = style.fg(Color::Green);
            }
            if pos == app.selected {
                style = style.add_modifier(Modifier::REVERSED);
            }
            Row::new(vec![
                Cell::from(c.name.clone()),
                Cell::from(Line::from(value_text(app, c.format, h.values[i])).right_aligned()),
                Cell::from(Line::from(rate).right_aligned()),
                Cell::from(Line::from(avg).right_aligned()),
            ])
            .style(style)
        })
        .collect();
    let header = Row::new(vec![
        Cell::from("NAME"),
        Cell::from(Line::from("CURRENT").right_aligned()),
        Cell::from(Line::from("CHANGE/s").right_aligned()),
        Cell::from(Line::from("AVERAGE/s").right_aligned()),
    ])
    .style(Style::default().add_modifier(Modifier::BOLD));
    let title = format!(" {} of {} counters ", rows.len(), h.infos.len());
    let table = Table::new(body, [Constraint::Length(name_w), Constraint::Length(16), Constraint::Length(14), Constraint::Length(14)])
        .header(header)
        .block(Block::default().borders(Borders::TOP).title(title));
    f.render_widget(table, area);
}

fn draw_charts(f: &mut Frame<'_>, area: Rect, app: &App, h: &History) {
    let cols = Layout::default()
        .direction(Direction::Horizontal)
        .constraints([Constraint::Ratio(1, 3), Constraint::Ratio(1, 3), Constraint::Ratio(1, 3)])
        .split(Layout::default().direction(Direction::Vertical).constraints([Constraint::Min(4), Constraint::Length(4)]).split(area)[0]);
    let spark_area =
        Layout::default().direction(Direction::Vertical).constraints([Constraint::Min(4), Constraint::Length(4)]).split(area)[1];
    // The x axis spans what has been seen (at least a minute's worth of
    // refreshes, at most CHART_SAMPLES); x is refreshes ago, negated.
    let n = h.series.len();
    let span = n.clamp(60, CHART_SAMPLES);
    let secs = span as f64 * app.interval.as_secs_f64();
    let ago = if secs >= 120.0 { format!("-{:.0}m", secs / 60.0) } else { format!("-{secs:.0}s") };
    let pick = |which: usize| -> Vec<(f64, f64)> {
        h.series
            .iter()
            .enumerate()
            .filter_map(|(k, p)| {
                let v = match which {
                    0 => p.0,
                    1 => p.1.map(|r| r * 100.0),
                    _ => p.2,
                };
                v.map(|v| (k as f64 - n as f64 + 1.0, v))
            })
            .collect()
    };
    let titles = [" client req/s ", " hit rate % ", " backend req/s "];
    let colors = [Color::Cyan, Color::Green, Color::Yellow];
    for (k, area) in cols.iter().enumerate() {
        let data = pick(k);
        let max = data.iter().map(|p| p.1).fold(0.0f64, f64::max);
        let top = if k == 1 { 100.0 } else { (max * 1.1).max(1.0) };
        let last = data.last().map_or_else(|| "-".to_string(), |p| if k == 1 { format!("{:.1}", p.1) } else { scaled(p.1) });
        let ds = Dataset::default()
            .marker(symbols::Marker::Braille)
            .graph_type(GraphType::Line)
            .style(Style::default().fg(colors[k]))
            .data(&data);
        let chart = Chart::new(vec![ds])
            .block(Block::default().borders(Borders::ALL).title(format!("{}{last} ", titles[k])))
            .x_axis(Axis::default().bounds([1.0 - span as f64, 0.0]).labels(vec![Span::raw(ago.clone()), Span::raw("now")]))
            .y_axis(Axis::default().bounds([0.0, top]).labels(vec![Span::raw("0"), Span::raw(scaled(top))]));
        f.render_widget(chart, *area);
    }
    // The selected counter's rate.
    let rows = app.rows(h);
    let Some(&sel) = rows.get(app.selected) else { return };
    let width = spark_area.width.saturating_sub(2) as usize;
    let data: Vec<u64> =
        h.rate_series.iter().rev().take(width).rev().map(|r| r.get(sel).copied().flatten().map_or(0, |v| v.round() as u64)).collect();
    let name = &h.infos[sel].name;
    let title = match h.infos[sel].kind {
        Kind::Counter => format!(" {name} /s "),
        Kind::Gauge => format!(" {name} (a gauge: no rate) "),
        Kind::Bitmap => format!(" {name} (a bitmap: no rate) "),
    };
    let spark = Sparkline::default()
        .block(Block::default().borders(Borders::ALL).title(title))
        .data(&data)
        .style(Style::default().fg(Color::Magenta));
    f.render_widget(spark, spark_area);
}

fn draw_footer(f: &mut Frame<'_>, area: Rect, app: &App, h: &History) {
    let rows = app.rows(h);
    let mut lines = Vec::new();
    if app.show_desc {
        let d = rows.get(app.selected).map(|&i| format!("{}: {}", h.infos[i].name, h.infos[i].description)).unwrap_or_default();
        lines.push(Line::from(d));
    }
    let status = if let Some(text) = &app.input {
        Line::from(vec![Span::styled("/", Style::default().add_modifier(Modifier::BOLD)), Span::raw(text.clone()), Span::raw("▏")])
    } else {
        let verb = match app.verbosity {
            Level::Info => "INFO",
            Level::Diag => "DIAG",
            Level::Debug => "DEBUG",
        };
        let filter = app.search.as_ref().map_or_else(String::new, |(t, _)| format!("  filter: {t}"));
        let msg = app.message.as_ref().map_or_else(String::new, |m| format!("  [{m}]"));
        Line::from(format!(
            "{verb}{filter}  zeros {}  {}  ? help  q quit{msg}",
            if app.hide_zero { "hidden" } else { "shown" },
            if app.charts { "g hide charts" } else { "g charts" }
        ))
    };
    lines.push(status);
    f.render_widget(Paragraph::new(lines), area);
}

const HELP: [(&str, &str); 16] = [
    ("↑ ↓  k j", "move"),
    ("PgUp PgDn", "page (also Ctrl-b Ctrl-f, space)"),
    ("Home End G", "first, last"),
    ("/", "filter: glob (* ?) or regex; Enter applies, empty clears"),
    ("Esc", "clear the filter / close this"),
    ("v", "verbosity: info, diag, debug"),
    ("0", "hide or show zero counters"),
    ("d", "description of the selected counter"),
    ("e", "scaled units (K M G)"),
    ("b", "bytes and durations readable or raw"),
    ("g", "charts: req/s, hit rate, backend req/s, selection"),
    ("+ -", "slower / faster refresh"),
    ("?", "this help"),
    ("q", "quit"),
    ("", ""),
    ("", "green: changed since the last refresh"),
];

fn draw_help(f: &mut Frame<'_>, area: Rect) {
    let w = 72.min(area.width);
    let hgt = (HELP.len() as u16 + 2).min(area.height);
    let r = Rect { x: area.x + (area.width - w) / 2, y: area.y + (area.height - hgt) / 2, width: w, height: hgt };
    let lines: Vec<Line> = HELP
        .iter()
        .map(|(k, d)| Line::from(vec![Span::styled(format!("{k:<12}"), Style::default().add_modifier(Modifier::BOLD)), Span::raw(*d)]))
        .collect();
    f.render_widget(Clear, r);
    f.render_widget(Paragraph::new(lines).block(Block::default().borders(Borders::ALL).title(" keys ")), r);
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Put the terminal back: raw mode off, main screen, cursor shown.
fn restore() {
    let _ = crossterm::terminal::disable_raw_mode();
    let mut out = std::io::stdout();
    let _ = crossterm::execute!(out, crossterm::terminal::LeaveAlternateScreen, crossterm::cursor::Show);
    let _ = out.flush();
}

/// Restores the terminal when dropped (normal exit and unwinding).
struct Guard;
impl Drop for Guard {
    fn drop(&mut self) {
        restore();
    }
}

enum Input {
    Ready,
    Idle,
    /// The terminal hung up (its window closed, tmux killed).
    Gone,
}

/// Wait up to `timeout` for input on the terminal (stdin).
fn wait_input(timeout: Duration) -> Input {
    let mut fd = libc::pollfd { fd: 0, events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd for the duration of the call.
    let n = unsafe { libc::poll(&mut fd, 1, timeout.as_millis().min(i32::MAX as u128) as i32) };
    if n < 0 {
        // EINTR (a signal): the loop looks at STOP.
        return Input::Idle;
    }
    if fd.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
        return Input::Gone;
    }
    if fd.revents & libc::POLLIN != 0 {
        Input::Ready
    } else {
        Input::Idle
    }
}

/// The interactive loop on the real terminal.
pub fn run(source: &mut Source, mut app: App) -> Result<(), String> {
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        // SAFETY: the handler only stores to an atomic.
        unsafe { libc::signal(sig, on_signal as *const () as libc::sighandler_t) };
    }
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        restore();
        default_hook(info);
    }));
    crossterm::terminal::enable_raw_mode().map_err(|e| format!("cannot use the terminal: {e}"))?;
    let _guard = Guard;
    crossterm::execute!(std::io::stdout(), crossterm::terminal::EnterAlternateScreen, crossterm::cursor::Hide)
        .map_err(|e| e.to_string())?;
    let backend = ratatui::backend::CrosstermBackend::new(std::io::stdout());
    let mut term = ratatui::Terminal::new(backend).map_err(|e| e.to_string())?;
    let mut h = History::default();
    let start = Instant::now();
    let mut next = Instant::now();
    let mut waiting: Option<String> = None;
    let mut restarted_at: Option<Instant> = None;
    while !app.quit && !STOP.load(Ordering::SeqCst) {
        if Instant::now() >= next {
            match source.read() {
                Reading::Values { infos, values, generation } => {
                    if h.update(&infos, values, generation, start.elapsed().as_secs_f64()) {
                        restarted_at = Some(Instant::now());
                    }
                    waiting = None;
                }
                Reading::Waiting(msg) => waiting = Some(msg),
            }
            next = Instant::now() + app.interval;
        }
        app.message = match (&waiting, restarted_at) {
            (Some(w), _) => Some(w.clone()),
            (None, Some(t)) if t.elapsed() < Duration::from_secs(5) => Some("child restarted".into()),
            _ => app.message.take().filter(|m| m != "child restarted" && !m.starts_with("waiting")),
        };
        let shown_waiting = if h.refreshes == 0 { waiting.as_deref() } else { None };
        term.draw(|f| draw(f, &mut app, &h, shown_waiting)).map_err(|e| e.to_string())?;
        let wait = next.saturating_duration_since(Instant::now()).min(Duration::from_millis(100));
        // Wait on the terminal ourselves: crossterm spins on a terminal that
        // hung up (read returns 0 forever), and we must notice and leave.
        match wait_input(wait) {
            Input::Gone => break,
            Input::Idle => {}
            Input::Ready => {
                while event::poll(Duration::ZERO).map_err(|e| e.to_string())? {
                    match event::read().map_err(|e| e.to_string())? {
                        Event::Key(k) => app.key(k, &h),
                        Event::Resize(..) => term.autoresize().map_err(|e| e.to_string())?,
                        _ => {}
                    }
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(scaled(999.0), "999");
        assert_eq!(scaled(1234567.0), "1.23M");
        assert_eq!(bytes(1536.0), "1.50K");
        assert_eq!(bytes(10.0), "10B");
    }

    #[test]
    fn search_is_a_glob_or_a_regex() {
        assert!(Search::parse("MAIN.cache_*").unwrap().matches("MAIN.cache_hit"));
        assert!(!Search::parse("MAIN.cache_*").unwrap().matches("MAIN.client_req"));
        assert!(Search::parse("hit|miss").unwrap().matches("MAIN.cache_miss"));
        assert!(Search::parse("(").is_err());
    }
}
