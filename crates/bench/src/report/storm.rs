//! The storm's part of the reports: its section of `report.html` (summary, per-phase medians,
//! per-second charts) and `storm.csv` (one row per point × repeat × second).

use std::fmt::Write as _;

use super::html::{esc, table};
use super::metrics::fmt_num;
use super::{charts, svg};
use crate::result::{Campaign, PointResult, StormResult};

/// The storm section of a point, empty when no repeat ran a storm.
pub(crate) fn section(p: &PointResult) -> String {
    let storms: Vec<(u32, &StormResult)> = p
        .repeats
        .iter()
        .filter_map(|r| r.storm.as_ref().map(|s| (r.repeat, s)))
        .collect();
    if storms.is_empty() {
        return String::new();
    }
    let mut out = String::from("<h3>Retry storm</h3>\n");
    let _ = writeln!(
        out,
        "<p>Offered = new records whose first attempt was due that second (open loop); \
         re-sends = the application re-sending records whose attempt failed; goodput = records \
         acknowledged that second; latency counts from the first attempt's intended time. \
         Recovery: seconds from the storm's end until goodput of records offered after the \
         storm is at least the recovered fraction of the offered rate for the hold in a row. \
         Wasted appends: records the broker appended that no client got an acknowledgement \
         for.</p>"
    );
    let rows: Vec<Vec<String>> = storms
        .iter()
        .map(|(repeat, st)| {
            vec![
                repeat.to_string(),
                format!("{} ({})", fmt_num(st.capacity_rps), esc(&capacity_text(st))),
                format!(
                    "{}× / {}× for {}+{}+{} s",
                    st.overload, st.after, st.before_s, st.storm_s, st.after_s
                ),
                format!(
                    "{} ms, {} re-sends, backoff {} ms",
                    st.request_timeout_ms, st.app_retries, st.retry_backoff_ms
                ),
                recovery_text(st),
                fmt_num(st.new_records as f64),
                fmt_num(st.resent as f64),
                fmt_num(st.acked as f64),
                format!(
                    "{} ({} timed out)",
                    fmt_num(st.failed as f64),
                    fmt_num(st.timed_out as f64)
                ),
                fmt_num(st.given_up as f64),
                st.wasted_appends
                    .map_or_else(|| "–".to_owned(), |w| fmt_num(w as f64)),
            ]
        })
        .collect();
    out.push_str(&table(
        "rlllrrrrrrr",
        &[
            "repeat",
            "capacity rec/s",
            "overload / after",
            "timeout, app retries",
            "recovery",
            "new records",
            "re-sends",
            "acknowledged",
            "failed attempts",
            "given up",
            "wasted appends",
        ],
        &rows,
    ));
    let mut phase_rows = Vec::new();
    for (repeat, st) in &storms {
        for ph in &st.phases {
            phase_rows.push(vec![
                repeat.to_string(),
                esc(&ph.phase),
                ph.seconds.to_string(),
                fmt_num(ph.offered_rps),
                fmt_num(ph.resent_rps),
                fmt_num(ph.goodput_rps),
                fmt_num(ph.goodput_fresh_rps),
                fmt_num(ph.failed_rps),
                fmt_num(ph.given_up_rps),
                ph.ack_p99_ms.map_or_else(|| "–".to_owned(), fmt_num),
            ]);
        }
    }
    let _ = writeln!(out, "<h4>Per-phase medians (per second)</h4>");
    out.push_str(&table(
        "rlrrrrrrrr",
        &[
            "repeat",
            "phase",
            "seconds",
            "offered rec/s",
            "re-sends/s",
            "goodput rec/s",
            "judged goodput rec/s",
            "failed/s",
            "given up/s",
            "ack p99 ms",
        ],
        &phase_rows,
    ));
    let charts: String = [charts::storm_rates(p), charts::storm_latency(p)]
        .iter()
        .flatten()
        .map(svg::render)
        .collect();
    let _ = writeln!(out, "<div class=\"charts\">{charts}</div>");
    out
}

/// The end-of-run summary of one storm repeat: capacity, recovery, totals, and per phase the
/// medians of the per-second values.
pub(crate) fn lines(st: &StormResult) -> Vec<String> {
    let mut out = vec![format!(
        "storm: capacity {} rec/s ({}); {}x for {} s between {}x ({} s before, {} s after); \
         timeout {} ms, {} app re-sends; recovery {}",
        fmt_num(st.capacity_rps),
        capacity_text(st),
        st.overload,
        st.storm_s,
        st.after,
        st.before_s,
        st.after_s,
        st.request_timeout_ms,
        st.app_retries,
        recovery_text(st)
    )];
    out.push(format!(
        "storm: new records {}, re-sends {}, acknowledged {}, failed attempts {} ({} timed out), \
         given up {}, unresolved {}, appended {}, wasted appends {}",
        st.new_records,
        st.resent,
        st.acked,
        st.failed,
        st.timed_out,
        st.given_up,
        st.unresolved,
        st.appended_records
            .map_or_else(|| "?".to_owned(), |a| a.to_string()),
        st.wasted_appends
            .map_or_else(|| "?".to_owned(), |a| a.to_string()),
    ));
    for ph in &st.phases {
        out.push(format!(
            "storm {:<6} {:>3} s: offered {}/s, re-sent {}/s, goodput {}/s (judged {}/s), \
             failed {}/s, given up {}/s, ack p99 {} ms",
            ph.phase,
            ph.seconds,
            fmt_num(ph.offered_rps),
            fmt_num(ph.resent_rps),
            fmt_num(ph.goodput_rps),
            fmt_num(ph.goodput_fresh_rps),
            fmt_num(ph.failed_rps),
            fmt_num(ph.given_up_rps),
            ph.ack_p99_ms.map_or_else(|| "-".to_owned(), fmt_num)
        ));
    }
    out
}

pub(crate) fn capacity_text(st: &StormResult) -> String {
    if st.capacity_source == "probe" {
        format!("probed: median of {} s closed loop", st.probe_rps.len())
    } else {
        st.capacity_source.clone()
    }
}

pub(crate) fn recovery_text(st: &StormResult) -> String {
    st.recovery_s.map_or_else(
        || format!("not recovered within {} s", st.after_s),
        |s| format!("{s:.0} s"),
    )
}

/// `storm.csv`: one row per point × repeat × second of every storm; `None` when the campaign
/// has none.
pub(crate) fn csv(campaign: &Campaign) -> Option<String> {
    let mut out = String::new();
    let header = [
        "point_id",
        "label",
        "repeat",
        "t_s",
        "phase",
        "offered_rps",
        "resent_rps",
        "goodput_rps",
        "goodput_fresh_rps",
        "failed_rps",
        "timed_out_rps",
        "given_up_rps",
        "ack_count",
        "ack_p50_ms",
        "ack_p99_ms",
        "ack_p99_9_ms",
        "ack_max_ms",
    ];
    super::csv::text_row(&mut out, header);
    let mut any = false;
    for p in &campaign.points {
        for r in &p.repeats {
            let Some(st) = &r.storm else { continue };
            any = true;
            for s in &st.seconds {
                let cells = [
                    p.id.clone(),
                    p.label.clone(),
                    r.repeat.to_string(),
                    s.t_s.to_string(),
                    s.phase.clone(),
                    s.offered_rps.to_string(),
                    s.resent_rps.to_string(),
                    s.goodput_rps.to_string(),
                    s.goodput_fresh_rps.to_string(),
                    s.failed_rps.to_string(),
                    s.timed_out_rps.to_string(),
                    s.given_up_rps.to_string(),
                    s.ack_count.to_string(),
                    s.ack_p50_ms.to_string(),
                    s.ack_p99_ms.to_string(),
                    s.ack_p99_9_ms.to_string(),
                    s.ack_max_ms.to_string(),
                ];
                super::csv::text_row(&mut out, cells);
            }
        }
    }
    any.then_some(out)
}
