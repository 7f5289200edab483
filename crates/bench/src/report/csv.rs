//! `results.csv` (one row per point × repeat, the headline numbers) and `intervals.csv` (one row
//! per point × repeat × reporting interval, every [`Interval`] field flattened).
//!
//! RFC 4180 quoting; numbers printed in full (Rust's shortest round-trip form); a missing or
//! non-finite value is an empty cell. Column sets are fixed per campaign: the explore, drain and
//! correctness columns appear when some repeat has that result.

use std::fmt::Write as _;

use crate::result::{Campaign, Interval, Latency, PointResult, RunResult};

/// A `results.csv` column: its name and how to get a repeat's cell.
type Column = (&'static str, fn(&RunResult) -> Cell);

/// Columns of `results.csv` after `point_id`, `label`, the params and `repeat`.
const RESULT_COLUMNS: &[Column] = &[
    ("target_rps", |r| r.target_rps.into()),
    ("produce_rps", |r| r.produce_rps.into()),
    ("produce_mbps", |r| r.produce_mbps.into()),
    ("consume_rps", |r| r.consume_rps.into()),
    ("consume_mbps", |r| r.consume_mbps.into()),
    ("ack_p50_ms", |r| lat(&r.ack_latency, r.ack_latency.p50_ms)),
    ("ack_p99_ms", |r| lat(&r.ack_latency, r.ack_latency.p99_ms)),
    ("ack_p99_9_ms", |r| {
        lat(&r.ack_latency, r.ack_latency.p99_9_ms)
    }),
    ("ack_max_ms", |r| lat(&r.ack_latency, r.ack_latency.max_ms)),
    ("e2e_p50_ms", |r| lat(&r.e2e_latency, r.e2e_latency.p50_ms)),
    ("e2e_p99_ms", |r| lat(&r.e2e_latency, r.e2e_latency.p99_ms)),
    ("e2e_p99_9_ms", |r| {
        lat(&r.e2e_latency, r.e2e_latency.p99_9_ms)
    }),
    ("e2e_p99_99_ms", |r| {
        lat(&r.e2e_latency, r.e2e_latency.p99_99_ms)
    }),
    ("e2e_max_ms", |r| lat(&r.e2e_latency, r.e2e_latency.max_ms)),
    ("generator_saturated", |r| {
        Cell::Text(r.generator_saturated.to_string())
    }),
    ("broker_cpu_s", |r| r.broker_cpu_s.into()),
    ("broker_cpu_s_per_m_produced", |r| {
        r.broker_cpu_s_per_m_produced().into()
    }),
];

const EXPLORE_COLUMNS: &[Column] = &[("sustained_rps", |r| {
    r.explore.as_ref().and_then(|e| e.sustained_rps).into()
})];

const DRAIN_COLUMNS: &[Column] = &[
    ("drain_s", |r| r.drain.as_ref().map(|d| d.drain_s).into()),
    ("broker_cpu_s_per_m_consumed", |r| {
        r.broker_cpu_s_per_m_consumed().into()
    }),
];

const SHARE_COLUMNS: &[Column] = &[
    ("share_consumers", |r| {
        r.share.as_ref().map(|s| u64::from(s.consumers)).into()
    }),
    ("share_rps", |r| r.share.as_ref().map(|s| s.rps).into()),
    ("share_consumer_min", |r| {
        share_spread(r).map(|s| s.min).into()
    }),
    ("share_consumer_median", |r| {
        share_spread(r).map(|s| s.median).into()
    }),
    ("share_consumer_max", |r| {
        share_spread(r).map(|s| s.max).into()
    }),
    ("share_jain", |r| {
        r.share.as_ref().and_then(|s| s.jain_index).into()
    }),
    ("share_idle_consumers", |r| {
        r.share.as_ref().map(|s| u64::from(s.idle_consumers)).into()
    }),
    ("share_redelivered_records", |r| {
        r.share.as_ref().map(|s| s.redelivered_records).into()
    }),
    ("share_redelivery_s", |r| {
        r.share
            .as_ref()
            .and_then(|s| s.kill.as_ref())
            .and_then(|k| k.redelivery_s)
            .into()
    }),
    ("share_errors", |r| {
        r.share.as_ref().map(|s| s.errors).into()
    }),
];

fn share_spread(r: &RunResult) -> Option<&crate::result::Spread> {
    r.share.as_ref()?.per_consumer_spread.as_ref()
}

const CORRECTNESS_COLUMNS: &[Column] = &[
    ("lost", |r| r.correctness.as_ref().map(|c| c.lost).into()),
    ("duplicated", |r| {
        r.correctness.as_ref().map(|c| c.duplicated).into()
    }),
    ("out_of_order", |r| {
        r.correctness.as_ref().map(|c| c.out_of_order).into()
    }),
    ("corrupted", |r| {
        r.correctness.as_ref().map(|c| c.corrupted).into()
    }),
];

/// `results.csv`: one row per point × repeat.
pub(crate) fn results(campaign: &Campaign) -> String {
    let params = param_columns(campaign);
    let repeats = || campaign.points.iter().flat_map(|p| &p.repeats);
    let mut columns: Vec<&Column> = RESULT_COLUMNS.iter().collect();
    if repeats().any(|r| r.explore.is_some()) {
        columns.extend(EXPLORE_COLUMNS);
    }
    if repeats().any(|r| r.drain.is_some()) {
        columns.extend(DRAIN_COLUMNS);
    }
    if repeats().any(|r| r.share.is_some()) {
        columns.extend(SHARE_COLUMNS);
    }
    if repeats().any(|r| r.correctness.is_some()) {
        columns.extend(CORRECTNESS_COLUMNS);
    }

    let mut out = String::new();
    let header = ["point_id", "label"]
        .into_iter()
        .chain(params.iter().map(String::as_str))
        .chain(["repeat"])
        .chain(columns.iter().map(|c| c.0));
    row(&mut out, header.map(|h| Cell::Text(h.to_owned())));
    for point in &campaign.points {
        for repeat in &point.repeats {
            let cells = point_cells(point, &params)
                .chain([Cell::from(u64::from(repeat.repeat))])
                .chain(columns.iter().map(|c| (c.1)(repeat)));
            row(&mut out, cells);
        }
    }
    out
}

/// `intervals.csv`: one row per point × repeat × interval.
pub(crate) fn intervals(campaign: &Campaign) -> String {
    let mut out = String::new();
    let header = [
        "point_id",
        "label",
        "repeat",
        "t_s",
        "phase",
        "sent_rps",
        "acked_rps",
        "acked_mbps",
        "consumed_rps",
        "consumed_mbps",
        "ack_count",
        "ack_p50_ms",
        "ack_p99_ms",
        "ack_p99_9_ms",
        "ack_max_ms",
        "e2e_count",
        "e2e_p50_ms",
        "e2e_p99_ms",
        "e2e_p99_9_ms",
        "e2e_max_ms",
        "lag_records",
        "steal",
    ];
    row(&mut out, header.map(|h| Cell::Text(h.to_owned())));
    for point in &campaign.points {
        for repeat in &point.repeats {
            for i in &repeat.intervals {
                row(&mut out, interval_cells(point, repeat.repeat, i));
            }
        }
    }
    out
}

fn interval_cells(point: &PointResult, repeat: u32, i: &Interval) -> impl Iterator<Item = Cell> {
    [
        Cell::Text(point.id.clone()),
        Cell::Text(point.label.clone()),
        u64::from(repeat).into(),
        i.t_s.into(),
        Cell::Text(i.phase.clone()),
        i.sent_rps.into(),
        i.acked_rps.into(),
        i.acked_mbps.into(),
        i.consumed_rps.into(),
        i.consumed_mbps.into(),
        i.ack.count.into(),
        i.ack.p50_ms.into(),
        i.ack.p99_ms.into(),
        i.ack.p99_9_ms.into(),
        i.ack.max_ms.into(),
        i.e2e.count.into(),
        i.e2e.p50_ms.into(),
        i.e2e.p99_ms.into(),
        i.e2e.p99_9_ms.into(),
        i.e2e.max_ms.into(),
        Cell::Text(i.lag_records.to_string()),
        i.steal.into(),
    ]
    .into_iter()
}

/// Parameter columns: the campaign's dimensions in file order, then any other parameter some
/// point has (so nothing is dropped if the two disagree).
fn param_columns(campaign: &Campaign) -> Vec<String> {
    let mut columns = campaign.dimensions.clone();
    for point in &campaign.points {
        for key in point.params.keys() {
            if !columns.contains(key) {
                columns.push(key.clone());
            }
        }
    }
    columns
}

fn point_cells<'a>(
    point: &'a PointResult,
    params: &'a [String],
) -> impl Iterator<Item = Cell> + 'a {
    let fixed = [
        Cell::Text(point.id.clone()),
        Cell::Text(point.label.clone()),
    ];
    let params = params
        .iter()
        .map(|key| Cell::Text(param_text(point.params.get(key))));
    fixed.into_iter().chain(params)
}

/// A parameter value as written in the workload: strings without quotes, other JSON as JSON.
pub(crate) fn param_text(value: Option<&serde_json::Value>) -> String {
    match value {
        None | Some(serde_json::Value::Null) => String::new(),
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// A latency value, empty when nothing was measured (its fields are then meaningless zeros).
fn lat(latency: &Latency, value: f64) -> Cell {
    if latency.count > 0 {
        value.into()
    } else {
        Cell::Empty
    }
}

#[derive(Debug)]
enum Cell {
    Empty,
    Text(String),
}

impl From<f64> for Cell {
    fn from(v: f64) -> Cell {
        if v.is_finite() {
            Cell::Text(v.to_string())
        } else {
            Cell::Empty
        }
    }
}

impl From<u64> for Cell {
    fn from(v: u64) -> Cell {
        Cell::Text(v.to_string())
    }
}

impl<T: Into<Cell>> From<Option<T>> for Cell {
    fn from(v: Option<T>) -> Cell {
        v.map_or(Cell::Empty, Into::into)
    }
}

/// Appends one CSV record (CRLF-free: `\n` line ends, as most tools expect on Unix).
fn row(out: &mut String, cells: impl IntoIterator<Item = Cell>) {
    for (i, cell) in cells.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        if let Cell::Text(text) = cell {
            push_field(out, &text);
        }
    }
    out.push('\n');
}

fn push_field(out: &mut String, text: &str) {
    if text.contains([',', '"', '\n', '\r']) {
        let _ = write!(out, "\"{}\"", text.replace('"', "\"\""));
    } else {
        out.push_str(text);
    }
}

/// One CSV record of plain strings (for `compare.csv`).
pub(crate) fn text_row<S: AsRef<str>>(out: &mut String, cells: impl IntoIterator<Item = S>) {
    row(
        out,
        cells.into_iter().map(|s| Cell::Text(s.as_ref().to_owned())),
    );
}
