//! Plain text for the terminal: the end-of-run summary of one campaign, the table type
//! `compare` prints with, and the one-line descriptions (notes, machine) the pages share.

use std::fmt::Write as _;

use super::metrics::{self, Metric, fmt_num, fmt_spread};
use crate::result::{Campaign, CorrectnessReport, Machine, PointResult};
use crate::stats;

/// Headline numbers the terminal summary shows (when present), fewer than the HTML report so
/// that a line fits a wide terminal.
const SUMMARY_KEYS: &[&str] = &[
    "produce_rps",
    "produce_mbps",
    "consume_mbps",
    "ack_p99_ms",
    "e2e_p50_ms",
    "e2e_p99_ms",
    "e2e_max_ms",
    "sustained_rps",
    "drain_s",
    "broker_cpu_s_per_m_produced",
    "broker_cpu_s_per_m_consumed",
    "storm_capacity_rps",
    "storm_recovery_s",
    "storm_wasted_appends",
];

/// Shown too when some repeat has share consumers (records/s is their natural unit).
const SHARE_SUMMARY_KEYS: &[&str] = &[
    "consume_rps",
    "share_consumer_min",
    "share_consumer_median",
    "share_consumer_max",
    "share_jain",
    "share_idle_consumers",
    "share_redelivery_s",
    "share_errors",
];

/// Columns padded to their widest cell; the first `left` columns left-aligned (names), the rest
/// right-aligned (numbers).
#[derive(Debug)]
pub(crate) struct TextTable {
    left: usize,
    rows: Vec<Vec<String>>,
}

impl TextTable {
    pub(crate) fn new(left: usize, header: Vec<String>) -> TextTable {
        TextTable {
            left,
            rows: vec![header],
        }
    }

    pub(crate) fn push(&mut self, row: Vec<String>) {
        self.rows.push(row);
    }

    pub(crate) fn render(&self) -> String {
        let columns = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..columns)
            .map(|c| {
                self.rows
                    .iter()
                    .filter_map(|r| r.get(c))
                    .map(|s| s.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for (i, row) in self.rows.iter().enumerate() {
            let mut line = String::new();
            for (c, cell) in row.iter().enumerate() {
                let pad = widths[c] - cell.chars().count();
                if c > 0 {
                    line.push_str("  ");
                }
                if c < self.left {
                    line.push_str(cell);
                    line.extend(std::iter::repeat_n(' ', pad));
                } else {
                    line.extend(std::iter::repeat_n(' ', pad));
                    line.push_str(cell);
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
            if i == 0 {
                let total = widths.iter().sum::<usize>() + 2 * columns.saturating_sub(1);
                out.extend(std::iter::repeat_n('-', total));
                out.push('\n');
            }
        }
        out
    }
}

/// See [`super::summary_text`].
pub(crate) fn summary(campaign: &Campaign) -> String {
    let points: Vec<&PointResult> = campaign.points.iter().collect();
    let has_share = points
        .iter()
        .flat_map(|p| &p.repeats)
        .any(|r| r.share.is_some());
    let shown: Vec<&Metric> = metrics::present_metrics(&points)
        .into_iter()
        .filter(|m| {
            SUMMARY_KEYS.contains(&m.key) || has_share && SHARE_SUMMARY_KEYS.contains(&m.key)
        })
        .collect();
    let has_correctness = points
        .iter()
        .flat_map(|p| &p.repeats)
        .any(|r| r.correctness.is_some());

    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} ({}) against {} {} at {} ({}): {} point(s)",
        campaign.name,
        campaign.mode,
        campaign.broker.label,
        campaign.broker.version,
        campaign.bootstrap,
        campaign.client.security_protocol(),
        campaign.points.len()
    );
    let mut header = vec!["point".to_owned(), "label".to_owned(), "n".to_owned()];
    header.extend(shown.iter().map(|m| m.title.to_owned()));
    if has_correctness {
        header.push("correctness".to_owned());
    }
    let mut table = TextTable::new(2, header);
    for point in &points {
        let mut row = vec![
            point.id.clone(),
            point.label.clone(),
            point.repeats.len().to_string(),
        ];
        for metric in &shown {
            row.push(
                metrics::point_spread(point, metric)
                    .map_or_else(|| "-".to_owned(), |s| fmt_spread(&s)),
            );
        }
        if has_correctness {
            let checked: Vec<bool> = point
                .repeats
                .iter()
                .filter_map(|r| r.correctness.as_ref())
                .map(|c| c.passed)
                .collect();
            let passed = checked.iter().filter(|p| **p).count();
            let verdict = if passed == checked.len() {
                "PASSED"
            } else {
                "FAILED"
            };
            row.push(format!("{verdict} {passed}/{}", checked.len()));
        }
        table.push(row);
    }
    out.push_str(&table.render());

    for point in &campaign.points {
        for r in &point.repeats {
            if let Some(c) = &r.correctness {
                let at = format!("{} repeat {}", point.id, r.repeat);
                for line in correctness_lines(c) {
                    let _ = writeln!(out, "{at}: {line}");
                }
            }
        }
    }
    for point in &campaign.points {
        for r in &point.repeats {
            if let Some(st) = &r.storm {
                let at = format!("{} repeat {}", point.id, r.repeat);
                for line in super::storm::lines(st) {
                    let _ = writeln!(out, "{at}: {line}");
                }
            }
        }
    }
    for note in repeat_notes(campaign) {
        let _ = writeln!(out, "{note}");
    }
    for warning in &campaign.warnings {
        let _ = writeln!(out, "WARNING: {warning}");
    }
    out
}

/// The final report of one correctness repeat: every count the checker keeps, and for runs
/// with kills, how long the brokers and the throughput took to come back (min/median/max).
pub(crate) fn correctness_lines(c: &CorrectnessReport) -> Vec<String> {
    let mut lines = vec![format!(
        "{}: acknowledged {}, lost {}, duplicated {}, reordered {}, corrupted {} (read back {}, \
         of which never acknowledged {})",
        if c.passed { "PASSED" } else { "FAILED" },
        c.acked,
        c.lost,
        c.duplicated,
        c.out_of_order,
        c.corrupted,
        c.seen,
        c.unacked_present
    )];
    if c.group {
        lines.push(format!(
            "read through a consumer group: {} committed offsets read from the broker, {} went back",
            c.offset_samples, c.offset_regressions
        ));
    }
    if !c.kill_log.is_empty() {
        let down: Vec<f64> = c.kill_log.iter().map(|k| k.down_s).collect();
        let seed = c
            .seed
            .map_or_else(String::new, |s| format!(" at random moments (seed {s})"));
        lines.push(format!(
            "{} kills{seed}: listening again after {} s (min/median/max)",
            c.kill_log.len(),
            min_median_max(&down)
        ));
    }
    if let Some(r) = &c.recovery {
        let recovered: Vec<f64> = r.per_kill_s.iter().flatten().copied().collect();
        lines.push(format!(
            "full throughput (>= {:.0}% of the median {} acked/s and {} consumed/s) again after \
             {} s (min/median/max); not before the next kill: {}",
            r.full_fraction * 100.0,
            fmt_num(r.baseline_acked_rps),
            fmt_num(r.baseline_consumed_rps),
            min_median_max(&recovered),
            r.not_recovered
        ));
    }
    lines
}

/// `min/median/max` of `values`, one decimal; `-` when empty.
fn min_median_max(values: &[f64]) -> String {
    match stats::spread(values) {
        Some(s) => format!("{:.1}/{:.1}/{:.1}", s.min, s.median, s.max),
        None => "-".to_owned(),
    }
}

/// Per-repeat findings worth a line of their own (saturated load generator, failed records,
/// failed checks), next to the campaign's own `warnings`.
pub(crate) fn repeat_notes(campaign: &Campaign) -> Vec<String> {
    let mut notes = Vec::new();
    for point in &campaign.points {
        for r in &point.repeats {
            let at = format!("{} repeat {}", point.id, r.repeat);
            if r.generator_saturated {
                notes.push(format!(
                    "{at}: load generator saturated (max send lag {} ms): its numbers understate \
                     the broker",
                    fmt_num(r.max_send_lag_ms)
                ));
            }
            if r.totals.failed_records > 0 {
                notes.push(format!(
                    "{at}: {} record(s) failed to produce",
                    r.totals.failed_records
                ));
            }
            if let Some(c) = r.correctness.as_ref().filter(|c| !c.passed) {
                notes.push(format!(
                    "{at}: correctness FAILED: {} lost, {} duplicated, {} out of order, {} corrupted",
                    c.lost, c.duplicated, c.out_of_order, c.corrupted
                ));
            }
            if let Some(k) = r.share.as_ref().and_then(|s| s.kill.as_ref()) {
                notes.push(format!(
                    "{at}: share consumer {} killed at {} s holding {} records: first back after \
                     {} s, all after {} s",
                    k.consumer,
                    fmt_num(k.at_s),
                    k.held_records,
                    k.first_redelivery_s.map_or_else(|| "-".to_owned(), fmt_num),
                    k.redelivery_s.map_or_else(|| "-".to_owned(), fmt_num),
                ));
            }
            if let Some(e) = r.explore.as_ref().filter(|e| !e.passed) {
                notes.push(format!(
                    "{at}: explore found no rate meeting p{} <= {} ms",
                    e.percentile, e.target_ms
                ));
            }
        }
    }
    notes
}

/// Machine description in one line: cpu, cores, memory, governor, MHz, kernel, os.
pub(crate) fn machine_text(m: &Machine) -> String {
    let gib = m.memory_bytes as f64 / f64::from(1u32 << 30);
    let mut out = format!("{} × {}, {gib:.1} GiB", m.nproc, m.cpu_model);
    if let Some(governor) = &m.cpu_governor {
        let _ = write!(out, ", governor {governor}");
    }
    if let Some(mhz) = m.cpu_mhz {
        let _ = write!(out, ", {} MHz", fmt_num(mhz));
    }
    let _ = write!(out, "; {}; {} ({})", m.kernel, m.os, m.hostname);
    out
}
