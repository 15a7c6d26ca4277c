//! `cache-bench plot INPUT.csv -o OUT.(png|svg)`: a run's per-second CSV
//! becomes throughput and latency percentiles over a shared time axis; a
//! history CSV becomes the trend, one point per run, several series on
//! one chart. PNG through plotters' bitmap backend, SVG through its SVG
//! backend; text in DejaVu Sans, built in, so no system fonts are needed.

use anyhow::{anyhow, bail, Result};
use plotters::coord::Shift;
use plotters::prelude::*;

static FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");
const FAMILY: &str = "sans-serif";

fn register_font() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = plotters::style::register_font(FAMILY, FontStyle::Normal, FONT);
    });
}

/// `1200x600`.
pub fn parse_size(s: &str) -> Result<(u32, u32)> {
    let (w, h) = s.split_once(['x', 'X']).ok_or_else(|| anyhow!("--size {s}: WIDTHxHEIGHT, e.g. 1200x600"))?;
    let (w, h): (u32, u32) = (w.trim().parse()?, h.trim().parse()?);
    if !(200..=10_000).contains(&w) || !(150..=10_000).contains(&h) {
        bail!("--size {s}: between 200x150 and 10000x10000");
    }
    Ok((w, h))
}

struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    fn read(path: &str) -> Result<Table> {
        let (header, rows) = crate::report::read_csv(path)?;
        if header.is_empty() {
            bail!("{path} is empty");
        }
        if rows.is_empty() {
            bail!("{path} has a header and no rows");
        }
        Ok(Table { header, rows })
    }
    fn col(&self, name: &str) -> Option<usize> {
        self.header.iter().position(|h| h == name)
    }
    fn nums(&self, name: &str) -> Option<Vec<f64>> {
        let i = self.col(name)?;
        Some(self.rows.iter().map(|r| r.get(i).and_then(|v| v.parse().ok()).unwrap_or(0.0)).collect())
    }
}

pub fn plot(input: &str, output: &str, size: (u32, u32), title: Option<&str>) -> Result<()> {
    register_font();
    let t = Table::read(input)?;
    let svg = output.ends_with(".svg");
    if !svg && !output.ends_with(".png") {
        bail!("-o {output}: the name must end in .png or .svg");
    }
    let kind = if t.col("second").is_some() {
        Kind::Series
    } else if t.col("rps").is_some() && t.col("time").is_some() {
        Kind::History
    } else {
        bail!("{input}: neither a run's --csv series nor a --history file");
    };
    let file = std::path::Path::new(input).file_name().map_or(input.into(), |f| f.to_string_lossy());
    let title = title.map(str::to_string).unwrap_or_else(|| match kind {
        Kind::Series => format!("cache-bench run: {file}"),
        Kind::History => format!("cache-bench history: {file} ({} runs)", t.rows.len()),
    });
    if svg {
        let root = SVGBackend::new(output, size).into_drawing_area();
        draw(&root, &t, kind, &title)?;
        root.present().map_err(|e| anyhow!("writing {output}: {e:?}"))?;
    } else {
        let root = BitMapBackend::new(output, size).into_drawing_area();
        draw(&root, &t, kind, &title)?;
        root.present().map_err(|e| anyhow!("writing {output}: {e:?}"))?;
    }
    Ok(())
}

#[derive(Clone, Copy)]
enum Kind {
    Series,
    History,
}

const LATENCY: [(&str, &str, RGBColor); 4] = [
    ("p50_ms", "p50", RGBColor(46, 139, 87)),
    ("p90_ms", "p90", RGBColor(218, 165, 32)),
    ("p99_ms", "p99", RGBColor(220, 20, 60)),
    ("p999_ms", "p99.9", RGBColor(128, 0, 128)),
];
const THROUGHPUT: RGBColor = RGBColor(30, 90, 200);

fn err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("drawing: {e:?}")
}

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, t: &Table, kind: Kind, title: &str) -> Result<()> {
    root.fill(&WHITE).map_err(err)?;
    // x positions and the throughput series.
    let (xs, rps, x_desc, labels): (Vec<f64>, Vec<f64>, &str, Vec<String>) = match kind {
        Kind::Series => {
            (t.nums("second").unwrap_or_default(), t.nums("requests").ok_or_else(|| anyhow!("no requests column"))?, "seconds", Vec::new())
        }
        Kind::History => {
            let label = t.col("label");
            let time = t.col("time");
            let labels = t
                .rows
                .iter()
                .map(|r| {
                    let l = label.and_then(|i| r.get(i)).filter(|s| !s.is_empty());
                    l.or(time.and_then(|i| r.get(i))).cloned().unwrap_or_default()
                })
                .collect();
            ((1..=t.rows.len()).map(|i| i as f64).collect(), t.nums("rps").unwrap_or_default(), "run", labels)
        }
    };
    let lat: Vec<(&str, RGBColor, Vec<f64>)> =
        LATENCY.iter().filter_map(|(c, name, color)| t.nums(c).map(|v| (*name, *color, v))).collect();
    let x_max = xs.iter().copied().fold(1.0, f64::max);
    let x_min = if matches!(kind, Kind::History) { 0.5 } else { xs.iter().copied().fold(x_max, f64::min).min(1.0) - 0.5 };
    let x_max = x_max + 0.5;
    let rps_max = rps.iter().copied().fold(1.0, f64::max) * 1.1;
    let lat_max = lat.iter().flat_map(|(_, _, v)| v.iter().copied()).fold(0.01, f64::max) * 1.1;
    let mut chart = ChartBuilder::on(root)
        .caption(title, (FAMILY, 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .right_y_label_area_size(70)
        .build_cartesian_2d(x_min..x_max, 0.0..rps_max)
        .map_err(err)?
        .set_secondary_coord(x_min..x_max, 0.0..lat_max);
    let label_font = (FAMILY, 14);
    let n = labels.len();
    let fmt_x = |x: &f64| -> String {
        if labels.is_empty() {
            return format!("{x:.0}");
        }
        let i = x.round() as usize;
        if (x - x.round()).abs() < 1e-6 && (1..=n).contains(&i) {
            let l = &labels[i - 1];
            l.chars().take(16).collect()
        } else {
            String::new()
        }
    };
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc("requests/s")
        .x_labels(if n > 0 { n.min(12) } else { 12 })
        .x_label_formatter(&fmt_x)
        .y_label_formatter(&|v| format!("{v:.0}"))
        .label_style(label_font)
        .axis_desc_style(label_font)
        .draw()
        .map_err(err)?;
    chart.configure_secondary_axes().y_desc("latency, ms").label_style(label_font).axis_desc_style(label_font).draw().map_err(err)?;
    chart
        .draw_series(LineSeries::new(xs.iter().copied().zip(rps.iter().copied()), THROUGHPUT.stroke_width(2)))
        .map_err(err)?
        .label("requests/s")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], THROUGHPUT.stroke_width(2)));
    if matches!(kind, Kind::History) {
        chart.draw_series(xs.iter().zip(&rps).map(|(x, y)| Circle::new((*x, *y), 4, THROUGHPUT.filled()))).map_err(err)?;
    }
    for (name, color, v) in &lat {
        let color = *color;
        chart
            .draw_secondary_series(LineSeries::new(xs.iter().copied().zip(v.iter().copied()), color.stroke_width(2)))
            .map_err(err)?
            .label(format!("{name} (ms)"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
        if matches!(kind, Kind::History) {
            chart.draw_secondary_series(xs.iter().zip(v).map(|(x, y)| Circle::new((*x, *y), 3, color.filled()))).map_err(err)?;
        }
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(label_font)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("1200x600").unwrap(), (1200, 600));
        assert!(parse_size("12x6").is_err());
        assert!(parse_size("wide").is_err());
    }
}
