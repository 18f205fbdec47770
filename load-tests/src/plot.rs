//! The latency plot (`--plot FILE.svg`), written by hand as SVG: on top, the
//! distribution of convergence times as a cumulative curve (log time axis) next
//! to the baseline's raw fan-out; below, every change's convergence time over the
//! run, coloured by kind.
//!
//! What it does NOT do: compute the figures (see `report`).

use std::fmt::Write as _;

use crate::report::Report;
use crate::tracker::ChangeKind;

const W: f64 = 960.0;
const H: f64 = 720.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 30.0;
const PANEL_H: f64 = 250.0;
const TOP1: f64 = 60.0;
const TOP2: f64 = 410.0;

const BLUE: &str = "#1f77b4";
const GREY: &str = "#888888";

fn colour(kind: ChangeKind) -> &'static str {
    match kind {
        ChangeKind::EndpointAdd => "#1f77b4",
        ChangeKind::EndpointRemove => "#ff7f0e",
        ChangeKind::ServiceAdd => "#2ca02c",
        ChangeKind::ServiceRemove => "#d62728",
        ChangeKind::RuleShift => "#9467bd",
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Log-axis bounds around the samples (powers of ten).
fn log_bounds(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::MAX, f64::MIN);
    for v in values.filter(|v| *v > 0.0 && v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if lo > hi {
        return (0.1, 1000.0);
    }
    let lo = 10f64.powf(lo.log10().floor());
    let hi = 10f64.powf(hi.log10().ceil()).max(lo * 10.0);
    (lo, hi)
}

fn log_pos(v: f64, lo: f64, hi: f64, a: f64, b: f64) -> f64 {
    let v = v.clamp(lo, hi);
    a + (v.log10() - lo.log10()) / (hi.log10() - lo.log10()) * (b - a)
}

fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let mut t = Vec::new();
    let mut d = lo;
    while d <= hi * 1.0001 {
        for m in [1.0, 2.0, 5.0] {
            let v = d * m;
            if v >= lo * 0.9999 && v <= hi * 1.0001 {
                t.push(v);
            }
        }
        d *= 10.0;
    }
    t
}

fn label(v: f64) -> String {
    if v >= 1.0 {
        format!("{v:.0}")
    } else {
        format!("{v}")
    }
}

/// Renders the report's samples as an SVG document.
pub fn svg(r: &Report) -> String {
    let mut conv: Vec<f64> = r.samples.iter().map(|s| s.ms).collect();
    let mut raw: Vec<f64> = r.baseline_samples.iter().map(|s| s.1).collect();
    conv.sort_by(f64::total_cmp);
    raw.sort_by(f64::total_cmp);
    let (lo, hi) = log_bounds(conv.iter().chain(raw.iter()).copied());
    let (x0, x1) = (LEFT, W - RIGHT);
    let mut o = String::new();
    let _ = write!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12"><rect width="100%" height="100%" fill="white"/>"#
    );
    let _ = write!(
        o,
        r#"<text x="{LEFT}" y="28" font-size="16" font-weight="bold">deltapilot loadgen — {} ({}, {} proxies, {} changes)</text>"#,
        esc(&r.scenario),
        esc(&r.api),
        r.proxies,
        r.events
    );

    // Panel 1: cumulative distribution.
    let (y0, y1) = (TOP1 + PANEL_H, TOP1);
    let _ = write!(
        o,
        r#"<text x="{LEFT}" y="{}" font-weight="bold">Convergence time distribution (share of changes converged within x)</text>"#,
        TOP1 - 8.0
    );
    axes_log_x(&mut o, lo, hi, x0, x1, y0, y1, "milliseconds (log)");
    for p in [0.0, 0.25, 0.5, 0.75, 0.9, 1.0] {
        let y = y0 + (y1 - y0) * p;
        let _ = write!(
            o,
            r##"<line x1="{x0}" y1="{y:.1}" x2="{x1}" y2="{y:.1}" stroke="#eee"/><text x="{}" y="{:.1}" text-anchor="end">{:.0}%</text>"##,
            x0 - 6.0,
            y + 4.0,
            p * 100.0
        );
    }
    for (vals, col, name, ly) in [
        (&conv, BLUE, "deltapilot convergence", 0.0),
        (&raw, GREY, "raw fan-out (baseline)", 16.0),
    ] {
        if vals.is_empty() {
            continue;
        }
        let n = vals.len() as f64;
        let mut path = String::new();
        for (i, v) in vals.iter().enumerate() {
            let x = log_pos(*v, lo, hi, x0, x1);
            let y = y0 + (y1 - y0) * ((i + 1) as f64 / n);
            let _ = write!(path, "{}{x:.1},{y:.1} ", if i == 0 { "M" } else { "L" });
        }
        let _ = write!(
            o,
            r#"<path d="{path}" fill="none" stroke="{col}" stroke-width="2"/>"#
        );
        let _ = write!(
            o,
            r#"<rect x="{}" y="{}" width="12" height="3" fill="{col}"/><text x="{}" y="{}">{name}</text>"#,
            x0 + 12.0,
            y1 + 10.0 + ly,
            x0 + 30.0,
            y1 + 14.0 + ly
        );
    }

    // Panel 2: latency over time.
    let (y0, y1) = (TOP2 + PANEL_H, TOP2);
    let tmax = r
        .samples
        .iter()
        .map(|s| s.t_s)
        .chain(r.baseline_samples.iter().map(|s| s.0))
        .fold(1.0f64, f64::max);
    let _ = write!(
        o,
        r#"<text x="{LEFT}" y="{}" font-weight="bold">Convergence time of each change over the run</text>"#,
        TOP2 - 8.0
    );
    for v in log_ticks(lo, hi) {
        let y = log_pos(v, lo, hi, y0, y1);
        let _ = write!(
            o,
            r##"<line x1="{x0}" y1="{y:.1}" x2="{x1}" y2="{y:.1}" stroke="#eee"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            x0 - 6.0,
            y + 4.0,
            label(v)
        );
    }
    let step = nice_step(tmax);
    let mut t = 0.0;
    while t <= tmax + 1e-9 {
        let x = x0 + t / tmax * (x1 - x0);
        let _ = write!(
            o,
            r#"<text x="{x:.1}" y="{}" text-anchor="middle">{t:.0}</text>"#,
            y0 + 16.0
        );
        t += step;
    }
    let _ = write!(
        o,
        r##"<line x1="{x0}" y1="{y0}" x2="{x1}" y2="{y0}" stroke="#333"/><line x1="{x0}" y1="{y0}" x2="{x0}" y2="{y1}" stroke="#333"/><text x="{}" y="{}" text-anchor="middle">seconds since churn started</text><text x="18" y="{}" transform="rotate(-90 18 {})" text-anchor="middle">ms (log)</text>"##,
        (x0 + x1) / 2.0,
        y0 + 34.0,
        (y0 + y1) / 2.0,
        (y0 + y1) / 2.0
    );
    for (ts, ms) in &r.baseline_samples {
        let (x, y) = (x0 + ts / tmax * (x1 - x0), log_pos(*ms, lo, hi, y0, y1));
        let _ = write!(
            o,
            r#"<circle cx="{x:.1}" cy="{y:.1}" r="1.6" fill="{GREY}" fill-opacity="0.6"/>"#
        );
    }
    for s in &r.samples {
        let (x, y) = (x0 + s.t_s / tmax * (x1 - x0), log_pos(s.ms, lo, hi, y0, y1));
        let _ = write!(
            o,
            r#"<circle cx="{x:.1}" cy="{y:.1}" r="2" fill="{}"/>"#,
            colour(s.kind)
        );
    }
    let mut lx = x0 + 12.0;
    for (k, name) in [
        (ChangeKind::EndpointAdd, "endpoint added"),
        (ChangeKind::EndpointRemove, "endpoint removed"),
        (ChangeKind::ServiceAdd, "service added"),
        (ChangeKind::ServiceRemove, "service removed"),
        (ChangeKind::RuleShift, "rule shifted"),
    ] {
        let _ = write!(
            o,
            r#"<circle cx="{lx}" cy="{}" r="4" fill="{}"/><text x="{}" y="{}">{name}</text>"#,
            y1 + 10.0,
            colour(k),
            lx + 8.0,
            y1 + 14.0
        );
        lx += 140.0;
    }
    let _ = write!(
        o,
        r#"<circle cx="{lx}" cy="{}" r="4" fill="{GREY}"/><text x="{}" y="{}">raw fan-out</text></svg>"#,
        y1 + 10.0,
        lx + 8.0,
        y1 + 14.0
    );
    o.push('\n');
    o
}

#[allow(clippy::too_many_arguments)]
fn axes_log_x(o: &mut String, lo: f64, hi: f64, x0: f64, x1: f64, y0: f64, y1: f64, name: &str) {
    for v in log_ticks(lo, hi) {
        let x = log_pos(v, lo, hi, x0, x1);
        let _ = write!(
            o,
            r##"<line x1="{x:.1}" y1="{y0}" x2="{x:.1}" y2="{y1}" stroke="#eee"/><text x="{x:.1}" y="{}" text-anchor="middle">{}</text>"##,
            y0 + 16.0,
            label(v)
        );
    }
    let _ = write!(
        o,
        r##"<line x1="{x0}" y1="{y0}" x2="{x1}" y2="{y0}" stroke="#333"/><line x1="{x0}" y1="{y0}" x2="{x0}" y2="{y1}" stroke="#333"/><text x="{}" y="{}" text-anchor="middle">{name}</text>"##,
        (x0 + x1) / 2.0,
        y0 + 34.0
    );
}

fn nice_step(span: f64) -> f64 {
    let raw = span / 8.0;
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|s| *s >= raw)
        .unwrap_or(raw)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Sample;

    #[test]
    fn renders_a_well_formed_svg_with_every_point() {
        let r = Report {
            scenario: "a<b".into(),
            samples: (1..=20)
                .map(|i| Sample {
                    t_s: i as f64,
                    ms: i as f64 * 3.0,
                    kind: ChangeKind::EndpointAdd,
                })
                .collect(),
            baseline_samples: vec![(1.0, 2.0), (2.0, 2.5)],
            ..Default::default()
        };
        let s = svg(&r);
        assert!(s.starts_with("<svg") && s.trim_end().ends_with("</svg>"));
        assert!(s.contains("a&lt;b"));
        assert_eq!(s.matches("<circle").count(), 20 + 2 + 6);
        assert_eq!(log_bounds([3.0, 60.0].into_iter()), (1.0, 100.0));
        assert_eq!(nice_step(60.0), 10.0);
    }
}
