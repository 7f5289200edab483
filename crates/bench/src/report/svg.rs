//! Chart primitives for the HTML reports: a line chart with several series, "nice" round axis
//! ticks, shaded phase bands and a legend, rendered as an inline SVG string (no scripts, no
//! external resources).
//!
//! The x axis is either linear (time) or the latency-percentile scale `log10(1 / (1 - p))`, on
//! which 90, 99, 99.9, ... are evenly spaced and the 100th percentile (the maximum) sits one step
//! beyond the last finite tick. The y axis is linear and always includes 0.

use std::fmt::Write as _;

use super::html::esc;

/// Distinct, colour-blind-friendly stroke colours (Okabe–Ito, plus two greys).
pub(crate) const PALETTE: &[&str] = &[
    "#0072b2", "#e69f00", "#009e73", "#d55e00", "#cc79a7", "#56b4e9", "#555555", "#999999",
];

/// Dash patterns to tell repeats apart when their series share a colour.
pub(crate) const DASHES: &[&str] = &["", "7 3", "2 3", "10 3 2 3", "4 4"];

pub(crate) fn color(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

pub(crate) fn dash(i: usize) -> &'static str {
    DASHES[i % DASHES.len()]
}

/// One line: `(x, y)` points in x order; non-finite points break the line.
#[derive(Debug, Clone)]
pub(crate) struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    pub color: &'static str,
    /// SVG `stroke-dasharray`, empty for a solid line.
    pub dash: &'static str,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum XScale {
    /// Plain numbers (seconds), starting at 0 or below.
    Linear,
    /// x values are percentiles 0..=100, drawn on the `log10(1 / (1 - p))` scale.
    Percentile,
}

/// A shaded span of the x axis (e.g. the warm-up phase), in data units.
#[derive(Debug, Clone)]
pub(crate) struct Band {
    pub from: f64,
    pub to: f64,
    pub label: String,
}

#[derive(Debug, Clone)]
pub(crate) struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub x_scale: XScale,
    pub series: Vec<Series>,
    pub bands: Vec<Band>,
}

// Layout, in SVG user units (the SVG scales to its container's width).
const WIDTH: f64 = 720.0;
const PLOT_LEFT: f64 = 72.0;
const PLOT_RIGHT: f64 = 16.0;
const PLOT_TOP: f64 = 32.0;
const PLOT_HEIGHT: f64 = 220.0;
/// Below the plot: tick labels and the x axis label.
const X_AXIS_HEIGHT: f64 = 46.0;
const LEGEND_ROW_HEIGHT: f64 = 18.0;
const LEGEND_ITEM_WIDTH: f64 = 210.0;
/// Share of the data range added above the highest y value.
const Y_HEADROOM: f64 = 0.04;
/// About how many ticks an automatic axis gets.
const TICKS_TARGET: usize = 6;

/// Ticks a percentile axis shows at least up to: 50, 90, 99, 99.9, 99.99 (`log10` 4).
const PERCENTILE_MIN_DECADES: f64 = 4.0;

/// The chart as an `<svg>` element, or a "no data" note when no series has a finite point.
pub(crate) fn render(chart: &Chart) -> String {
    let mut series = chart.series.clone();
    let percentile_axis = (chart.x_scale == XScale::Percentile).then(|| {
        for p in series.iter_mut().flat_map(|s| &mut s.points) {
            p.0 = percentile_x(p.0);
        }
        let xs = series.iter().flat_map(|s| &s.points).map(|p| p.0);
        let axis = Axis::percentile(min_max(xs.filter(|x| x.is_finite())).1);
        // The maximum (p = 100, x = +inf) is drawn at the axis' "max" tick.
        for p in series.iter_mut().flat_map(|s| &mut s.points) {
            if p.0 == f64::INFINITY {
                p.0 = axis.hi;
            }
        }
        axis
    });
    let finite = || {
        series
            .iter()
            .flat_map(|s| &s.points)
            .filter(|(x, y)| x.is_finite() && y.is_finite())
    };
    if finite().next().is_none() {
        return format!("<div class=\"nodata\">{}: no data</div>", esc(&chart.title));
    }
    let (x_min, x_max) = min_max(finite().map(|p| p.0));
    let (y_min, y_max) = min_max(finite().map(|p| p.1));
    let x_axis = percentile_axis.unwrap_or_else(|| Axis::nice(x_min.min(0.0), x_max, TICKS_TARGET));
    // Headroom so that a flat line at a round number (20 000 rec/s) does not sit on the frame.
    let headroom = (y_max.max(0.0) - y_min.min(0.0)) * Y_HEADROOM;
    let y_axis = Axis::nice(y_min.min(0.0), y_max.max(0.0) + headroom, TICKS_TARGET);

    let plot_width = WIDTH - PLOT_LEFT - PLOT_RIGHT;
    let legend_cols = ((plot_width / LEGEND_ITEM_WIDTH).floor() as usize).max(1);
    let legend_rows = series.len().div_ceil(legend_cols);
    let height =
        PLOT_TOP + PLOT_HEIGHT + X_AXIS_HEIGHT + legend_rows as f64 * LEGEND_ROW_HEIGHT + 6.0;
    let sx = |x: f64| PLOT_LEFT + x_axis.frac(x) * plot_width;
    let sy = |y: f64| PLOT_TOP + (1.0 - y_axis.frac(y)) * PLOT_HEIGHT;

    let mut out = String::new();
    let _ = write!(
        out,
        "<svg class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {WIDTH} {height:.0}\" \
         role=\"img\"><title>{title}</title>\
         <rect x=\"0\" y=\"0\" width=\"{WIDTH}\" height=\"{height:.0}\" fill=\"#fff\"/>\
         <text x=\"{cx:.1}\" y=\"18\" text-anchor=\"middle\" class=\"ct\">{title}</text>",
        title = esc(&chart.title),
        cx = PLOT_LEFT + plot_width / 2.0,
    );

    for band in &chart.bands {
        let (from, to) = (
            band_x(band.from, chart.x_scale),
            band_x(band.to, chart.x_scale),
        );
        let (x0, x1) = (sx(from.max(x_axis.lo)), sx(to.min(x_axis.hi)));
        if x1 > x0 {
            let _ = write!(
                out,
                "<rect x=\"{x0:.1}\" y=\"{PLOT_TOP}\" width=\"{w:.1}\" height=\"{PLOT_HEIGHT}\" \
                 fill=\"#ececec\"/><text x=\"{tx:.1}\" y=\"{ty:.1}\" class=\"band\">{label}</text>",
                w = x1 - x0,
                tx = x0 + 3.0,
                ty = PLOT_TOP + 11.0,
                label = esc(&band.label),
            );
        }
    }

    // Grid lines and tick labels.
    for (v, label) in y_axis.ticks() {
        let y = sy(v);
        let _ = write!(
            out,
            "<line x1=\"{PLOT_LEFT}\" x2=\"{x2:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\" class=\"grid\"/>\
             <text x=\"{tx:.1}\" y=\"{ty:.1}\" text-anchor=\"end\" class=\"tick\">{label}</text>",
            x2 = PLOT_LEFT + plot_width,
            tx = PLOT_LEFT - 5.0,
            ty = y + 4.0,
        );
    }
    let plot_bottom = PLOT_TOP + PLOT_HEIGHT;
    for (v, label) in x_axis.ticks() {
        let x = sx(v);
        let _ = write!(
            out,
            "<line x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{PLOT_TOP}\" y2=\"{plot_bottom}\" class=\"grid\"/>\
             <text x=\"{x:.1}\" y=\"{ty:.1}\" text-anchor=\"middle\" class=\"tick\">{label}</text>",
            ty = plot_bottom + 15.0,
        );
    }
    let _ = write!(
        out,
        "<rect x=\"{PLOT_LEFT}\" y=\"{PLOT_TOP}\" width=\"{plot_width}\" height=\"{PLOT_HEIGHT}\" \
         class=\"frame\"/>\
         <text x=\"{cx:.1}\" y=\"{xl_y:.1}\" text-anchor=\"middle\" class=\"al\">{x_label}</text>\
         <text transform=\"translate(14 {cy:.1}) rotate(-90)\" text-anchor=\"middle\" class=\"al\">\
         {y_label}</text>",
        cx = PLOT_LEFT + plot_width / 2.0,
        xl_y = plot_bottom + 34.0,
        cy = PLOT_TOP + PLOT_HEIGHT / 2.0,
        x_label = esc(&chart.x_label),
        y_label = esc(&chart.y_label),
    );

    for s in &series {
        draw_series(&mut out, s, &sx, &sy);
    }

    let legend_top = plot_bottom + X_AXIS_HEIGHT;
    for (i, s) in series.iter().enumerate() {
        let x = PLOT_LEFT + (i % legend_cols) as f64 * LEGEND_ITEM_WIDTH;
        let y = legend_top + (i / legend_cols) as f64 * LEGEND_ROW_HEIGHT;
        let _ = write!(
            out,
            "<line x1=\"{x:.1}\" x2=\"{x2:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"{color}\" \
             stroke-width=\"2.5\"{dash}/><text x=\"{tx:.1}\" y=\"{ty:.1}\" class=\"lg\">{name}</text>",
            x2 = x + 26.0,
            color = s.color,
            dash = dash_attr(s.dash),
            tx = x + 31.0,
            ty = y + 4.0,
            name = esc(&s.name),
        );
    }
    out.push_str("</svg>");
    out
}

/// Draws the finite runs of a series as polylines (a lone point as a dot).
fn draw_series(out: &mut String, s: &Series, sx: &impl Fn(f64) -> f64, sy: &impl Fn(f64) -> f64) {
    let runs = s.points.split(|(x, y)| !(x.is_finite() && y.is_finite()));
    for run in runs.filter(|r| !r.is_empty()) {
        if let [(x, y)] = run {
            let _ = write!(
                out,
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"2.5\" fill=\"{}\"/>",
                sx(*x),
                sy(*y),
                s.color
            );
            continue;
        }
        let _ = write!(
            out,
            "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.6\" \
             stroke-linejoin=\"round\"{} points=\"",
            s.color,
            dash_attr(s.dash)
        );
        for (x, y) in run {
            let _ = write!(out, "{:.1},{:.1} ", sx(*x), sy(*y));
        }
        out.push_str("\"/>");
    }
}

fn dash_attr(dash: &str) -> String {
    if dash.is_empty() {
        String::new()
    } else {
        format!(" stroke-dasharray=\"{dash}\"")
    }
}

fn min_max(values: impl Iterator<Item = f64>) -> (f64, f64) {
    values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    })
}

fn band_x(x: f64, scale: XScale) -> f64 {
    match scale {
        XScale::Linear => x,
        XScale::Percentile => percentile_x(x),
    }
}

/// `log10(1 / (1 - p/100))`; the 100th percentile (and beyond) maps to +inf, which [`render`]
/// draws at the "max" tick of [`Axis::percentile`].
pub(crate) fn percentile_x(p: f64) -> f64 {
    if p >= 100.0 {
        f64::INFINITY
    } else {
        -(1.0 - p.max(0.0) / 100.0).log10()
    }
}

#[derive(Debug)]
struct Axis {
    lo: f64,
    hi: f64,
    /// Tick positions (in plot space) and their labels.
    ticks: Vec<(f64, String)>,
}

impl Axis {
    /// A linear axis over at least `lo..=hi`, widened to round numbers with about `target` ticks.
    fn nice(lo: f64, hi: f64, target: usize) -> Axis {
        let (lo, hi) = match (lo, hi) {
            _ if hi > lo => (lo, hi),
            _ if lo == 0.0 => (0.0, 1.0),
            _ => (lo - lo.abs() * 0.1, hi + hi.abs() * 0.1),
        };
        let step = nice_step((hi - lo) / target.max(1) as f64);
        let (first, last) = ((lo / step).floor(), (hi / step).ceil());
        let (lo, hi) = (first * step, last * step);
        let scale = Suffix::for_magnitude(lo.abs().max(hi.abs()));
        let decimals = decimals_for(step / scale.divisor);
        // The clamp only matters for absurd data (e.g. 1e300 next to 0).
        let ticks = (0..=((last - first) as i64).clamp(0, 100))
            .map(|i| {
                let v = (first + i as f64) * step;
                let label = if v.abs() < step * 1e-9 {
                    // Plain `0`, not `0k`, `0.0` or `-0`.
                    "0".to_owned()
                } else {
                    format!("{:.decimals$}{}", v / scale.divisor, scale.suffix)
                };
                (v, label)
            })
            .collect();
        Axis { lo, hi, ticks }
    }

    /// The percentile axis from 0 to one decade past the largest finite x (at least 99.99),
    /// where the maximum goes. `x_max` may be infinite or NaN (only a maximum, or no data).
    fn percentile(x_max: f64) -> Axis {
        let finite = if x_max.is_finite() { x_max } else { 0.0 };
        // Small epsilon so that 99.999 (x = 5.000000001) does not open a whole extra decade.
        let decades = ((finite - 1e-6).ceil()).max(PERCENTILE_MIN_DECADES);
        let max_at = decades + 1.0;
        let mut ticks = vec![(percentile_x(50.0), "50".to_owned())];
        for k in 1..=decades as usize {
            let decimals = k.saturating_sub(2);
            ticks.push((
                k as f64,
                format!("{:.decimals$}", 100.0 - 10f64.powi(2 - k as i32)),
            ));
        }
        ticks.push((max_at, "max".to_owned()));
        Axis {
            lo: 0.0,
            hi: max_at,
            ticks,
        }
    }

    fn ticks(&self) -> impl DoubleEndedIterator<Item = (f64, &str)> {
        self.ticks.iter().map(|(v, l)| (*v, l.as_str()))
    }

    /// Where `v` falls on the axis, 0 at `lo` and 1 at `hi`.
    fn frac(&self, v: f64) -> f64 {
        ((v - self.lo) / (self.hi - self.lo)).clamp(0.0, 1.0)
    }
}

/// The smallest 1, 2, 2.5 or 5 times a power of ten that is at least `raw`.
fn nice_step(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let magnitude = 10f64.powf(raw.log10().floor());
    let norm = raw / magnitude;
    let nice = [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .find(|n| norm <= *n + 1e-9)
        .unwrap_or(10.0);
    nice * magnitude
}

/// Fewest decimals that print multiples of `step` exactly (2.5 → 1, 0.25 → 2).
fn decimals_for(step: f64) -> usize {
    (0..=9)
        .find(|d| {
            let scaled = step * 10f64.powi(*d);
            (scaled - scaled.round()).abs() < 1e-6 * scaled.max(1.0)
        })
        .unwrap_or(9) as usize
}

#[derive(Debug, Clone, Copy)]
struct Suffix {
    divisor: f64,
    suffix: &'static str,
}

impl Suffix {
    /// `k` from 10 000 (so 5000 stays `5000`), `M` from a million, `G` from a billion.
    fn for_magnitude(m: f64) -> Suffix {
        let (divisor, suffix) = match m {
            _ if m >= 1e9 => (1e9, "G"),
            _ if m >= 1e6 => (1e6, "M"),
            _ if m >= 1e4 => (1e3, "k"),
            _ => (1.0, ""),
        };
        Suffix { divisor, suffix }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_ticks_are_round() {
        let axis = Axis::nice(0.0, 9_730.0, 6);
        let labels: Vec<&str> = axis.ticks().map(|t| t.1).collect();
        assert_eq!(labels, ["0", "2k", "4k", "6k", "8k", "10k"]);
        let axis = Axis::nice(0.0, 23_456.0, 6);
        assert_eq!(
            axis.ticks().map(|t| t.1).collect::<Vec<_>>(),
            ["0", "5k", "10k", "15k", "20k", "25k"]
        );
        let axis = Axis::nice(0.0, 1.3, 6);
        assert_eq!(axis.ticks().nth(1).map(|t| t.1), Some("0.25"));
        let flat = Axis::nice(0.0, 0.0, 6);
        assert_eq!((flat.lo, flat.hi), (0.0, 1.0));
    }

    #[test]
    fn percentile_axis_ticks() {
        let axis = Axis::percentile(percentile_x(99.99));
        let labels: Vec<&str> = axis.ticks().map(|t| t.1).collect();
        assert_eq!(labels, ["50", "90", "99", "99.9", "99.99", "max"]);
        assert_eq!(axis.frac(axis.hi), 1.0);
        let deeper = Axis::percentile(percentile_x(99.999));
        assert_eq!(deeper.ticks().nth_back(1).map(|t| t.1), Some("99.999"));
    }

    #[test]
    fn empty_or_nan_series_say_no_data() {
        let chart = Chart {
            title: "t <x>".into(),
            x_label: "s".into(),
            y_label: "ms".into(),
            x_scale: XScale::Linear,
            series: vec![Series {
                name: "a".into(),
                points: vec![(f64::NAN, 1.0), (1.0, f64::INFINITY)],
                color: color(0),
                dash: dash(0),
            }],
            bands: vec![],
        };
        let html = render(&chart);
        assert!(
            html.contains("no data") && html.contains("t &lt;x&gt;"),
            "{html}"
        );
    }
}
