//! `report.html`: one self-contained page per campaign (inline CSS, inline SVG charts, no
//! scripts, nothing fetched), plus the page pieces `compare.html` shares.
//!
//! Layout: header and metadata, a red box of warnings, the headline table (one row per point,
//! `median [min–max]` and cv per number), then one section per point with its repeats, charts
//! (throughput and latency over time, latency distribution) and the explore, drain and
//! correctness results when present (the charts themselves are built in `charts.rs`).
//!
//! Every piece of text from the campaign goes through [`esc`]: labels and parameters come from
//! user workload files.

use std::fmt::Write as _;

use super::metrics::{self, fmt_cv, fmt_num};
use super::text;
use super::{charts, svg};
use crate::result::{
    Campaign, CorrectnessReport, ExploreResult, Latency, PartitionCheck, PointResult, ShareResult,
    Spread,
};

/// Escapes text for HTML and SVG content and attribute values.
pub(crate) fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

const CSS: &str = "\
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:0 auto;max-width:1500px;\
padding:0 20px 40px;color:#222;font-size:14px}\
h1{font-size:22px;margin:18px 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ccc}\
h3{font-size:15px;margin:16px 0 6px}\
table{border-collapse:collapse;margin:6px 0 12px;font-variant-numeric:tabular-nums}\
th,td{border:1px solid #ddd;padding:3px 7px;vertical-align:top}th{background:#f3f3f3;text-align:left}\
td.r{text-align:right;white-space:nowrap}tr.bad td{background:#fdecea}\
.scroll{overflow-x:auto}\
.meta{display:grid;grid-template-columns:repeat(auto-fit,minmax(340px,1fr));gap:0 24px}\
.meta th{width:9em;font-weight:600}\
.warn{border:2px solid #c62828;background:#fdecea;color:#8e0000;padding:8px 14px;margin:12px 0;border-radius:4px}\
.warn h2{border:none;margin:0 0 4px;font-size:16px;color:#c62828}.warn ul{margin:0;padding-left:20px}\
.badge{display:inline-block;padding:1px 7px;border-radius:3px;font-weight:700;font-size:12px;color:#fff}\
.pass{background:#2e7d32}.fail{background:#c62828}\
.rng{color:#666}.cv{color:#888;font-size:12px}.cv.hi{color:#d55e00;font-weight:600}\
.better{color:#2e7d32;font-weight:600}.worse{color:#c62828;font-weight:600}\
.charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(480px,1fr));gap:12px}\
svg.chart{width:100%;height:auto;border:1px solid #e3e3e3}\
svg .grid{stroke:#e6e6e6}svg .frame{fill:none;stroke:#999}\
svg .tick{font-size:11px;fill:#444}svg .al{font-size:12px;fill:#333}svg .lg{font-size:11px;fill:#333}\
svg .ct{font-size:13px;font-weight:600;fill:#222}svg .band{font-size:10px;fill:#777}\
.nodata{border:1px dashed #bbb;color:#777;padding:30px;text-align:center}\
pre{background:#f7f7f7;padding:8px;overflow-x:auto;font-size:12px}";

/// A whole page around `body`.
pub(crate) fn page(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <title>{}</title><style>{CSS}</style></head>\n<body>\n{body}\n</body></html>\n",
        esc(title)
    )
}

/// A table whose cells are already HTML. `align` has one letter per column, `l` or `r`
/// (numbers); missing letters mean `l`.
pub(crate) fn table(align: &str, header: &[&str], rows: &[Vec<String>]) -> String {
    table_with_classes(align, header, rows.iter().map(|r| (r, "")))
}

/// Like [`table`], with a CSS class per row (e.g. `bad`).
fn table_with_classes<'a>(
    align: &str,
    header: &[&str],
    rows: impl Iterator<Item = (&'a Vec<String>, &'a str)>,
) -> String {
    let mut out = String::from("<div class=\"scroll\"><table><tr>");
    for h in header {
        let _ = write!(out, "<th>{}</th>", esc(h));
    }
    out.push_str("</tr>\n");
    for (row, class) in rows {
        if class.is_empty() {
            out.push_str("<tr>");
        } else {
            let _ = write!(out, "<tr class=\"{class}\">");
        }
        for (i, cell) in row.iter().enumerate() {
            let right = align.as_bytes().get(i) == Some(&b'r');
            let _ = write!(
                out,
                "<td{}>{cell}</td>",
                if right { " class=\"r\"" } else { "" }
            );
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table></div>\n");
    out
}

/// `median [min–max] cv`, the cv highlighted above 10%; just the median when the repeats agree
/// to the digits shown (or there is one).
pub(crate) fn spread_cell(spread: Option<&Spread>) -> String {
    /// Above this relative standard deviation, repeats disagree enough to distrust the median.
    const HIGH_CV: f64 = 0.10;
    let Some(s) = spread else {
        return "–".to_owned();
    };
    let mut out = format!("<b>{}</b>", fmt_num(s.median));
    let (min, max) = (fmt_num(s.min), fmt_num(s.max));
    if s.n > 1 && min != max {
        let hi = if s.cv > HIGH_CV { " hi" } else { "" };
        let _ = write!(
            out,
            " <span class=\"rng\">[{min}–{max}]</span> <span class=\"cv{hi}\">cv {}</span>",
            fmt_cv(s)
        );
    }
    out
}

pub(crate) fn badge(passed: bool) -> &'static str {
    if passed {
        "<span class=\"badge pass\">PASSED</span>"
    } else {
        "<span class=\"badge fail\">FAILED</span>"
    }
}

/// See [`super::write_campaign`].
pub(crate) fn campaign_page(c: &Campaign) -> String {
    let mut body = format!(
        "<h1>{} <small>({} · {} {})</small></h1>\n",
        esc(&c.name),
        esc(&c.mode),
        esc(&c.broker.label),
        esc(&c.broker.version)
    );
    body.push_str(&warnings_box(&c.warnings, &text::repeat_notes(c)));
    body.push_str(&metadata(c));
    body.push_str("<h2>Headline numbers</h2>\n");
    body.push_str(&headline_table(c));
    for point in &c.points {
        body.push_str(&point_section(point));
    }
    page(&format!("{} — sluice bench", c.name), &body)
}

/// The red box: campaign warnings, then per-repeat findings. Empty when there are neither.
pub(crate) fn warnings_box(warnings: &[String], notes: &[String]) -> String {
    if warnings.is_empty() && notes.is_empty() {
        return String::new();
    }
    let mut out = String::from("<div class=\"warn\"><h2>Warnings</h2><ul>");
    for w in warnings.iter().chain(notes) {
        let _ = write!(out, "<li>{}</li>", esc(w));
    }
    out.push_str("</ul></div>\n");
    out
}

fn metadata(c: &Campaign) -> String {
    let config = |map: &std::collections::BTreeMap<String, String>| -> String {
        if map.is_empty() {
            return "(defaults)".to_owned();
        }
        let items: Vec<String> = map
            .iter()
            .map(|(k, v)| format!("{}={}", esc(k), esc(v)))
            .collect();
        format!(
            "<details><summary>{} settings</summary>{}</details>",
            map.len(),
            items.join("<br>")
        )
    };
    let run = [
        ("mode", esc(&c.mode)),
        ("started", esc(&c.started_at)),
        ("finished", esc(&c.finished_at)),
        ("bootstrap", esc(&c.bootstrap)),
        ("workload", esc(&c.workload_file)),
        (
            "dimensions",
            if c.dimensions.is_empty() {
                "(none)".to_owned()
            } else {
                esc(&c.dimensions.join(", "))
            },
        ),
    ];
    let system = [
        (
            "broker",
            format!("{} {}", esc(&c.broker.label), esc(&c.broker.version)),
        ),
        ("started brokers", started_brokers(c)),
        (
            "client",
            format!(
                "{} ({})",
                esc(&c.client.name),
                esc(&c.client.security_protocol())
            ),
        ),
        ("producer", config(&c.client.producer_config)),
        ("consumer", config(&c.client.consumer_config)),
        (
            "sluice",
            format!("{} ({})", esc(&c.sluice_version), esc(&c.git_commit)),
        ),
        ("machine", esc(&text::machine_text(&c.machine))),
    ];
    let half = |rows: &[(&str, String)]| -> String {
        let mut out = String::from("<table>");
        for (k, v) in rows {
            let _ = write!(out, "<tr><th>{k}</th><td>{v}</td></tr>");
        }
        out.push_str("</table>");
        out
    };
    format!(
        "<div class=\"meta\">{}{}</div>\n",
        half(&run),
        half(&system)
    )
}

/// One line per broker the benchmark started: index, address, PIDs, and the command (secrets
/// already hidden) on hover.
fn started_brokers(c: &Campaign) -> String {
    if c.brokers.is_empty() {
        return "(none: started elsewhere)".to_owned();
    }
    let lines: Vec<String> = c
        .brokers
        .iter()
        .map(|b| {
            let pids: Vec<String> = b.pids.iter().map(u32::to_string).collect();
            format!(
                "<span title=\"{}\">{} at {}</span> (pid {}; {})",
                esc(&b.command),
                b.index,
                esc(&b.address),
                pids.join(", "),
                esc(&b.log)
            )
        })
        .collect();
    lines.join("<br>")
}

fn headline_table(c: &Campaign) -> String {
    let points: Vec<&PointResult> = c.points.iter().collect();
    let shown = metrics::present_metrics(&points);
    let mut header = vec!["point", "label", "repeats"];
    header.extend(shown.iter().map(|m| m.title));
    let align = format!("llr{}", "r".repeat(shown.len()));
    let rows: Vec<Vec<String>> = points
        .iter()
        .map(|p| {
            let mut row = vec![
                format!("<a href=\"#{0}\">{0}</a>", esc(&p.id)),
                esc(&p.label),
                p.repeats.len().to_string(),
            ];
            row.extend(
                shown
                    .iter()
                    .map(|m| spread_cell(metrics::point_spread(p, m).as_ref())),
            );
            row
        })
        .collect();
    if rows.is_empty() {
        return "<div class=\"nodata\">no test points: no data</div>\n".to_owned();
    }
    table(&align, &header, &rows)
}

fn point_section(p: &PointResult) -> String {
    let mut out = format!(
        "<section id=\"{}\"><h2>{} · {}</h2>\n",
        esc(&p.id),
        esc(&p.id),
        esc(&p.label)
    );
    if !p.params.is_empty() {
        let params: Vec<String> = p
            .params
            .iter()
            .map(|(k, v)| {
                format!(
                    "<b>{}</b>={}",
                    esc(k),
                    esc(&super::csv::param_text(Some(v)))
                )
            })
            .collect();
        let _ = writeln!(out, "<p>{}</p>", params.join(" &nbsp; "));
    }
    out.push_str(&repeats_table(p));
    let _ = writeln!(
        out,
        "<div class=\"charts\">{}{}{}</div>",
        svg::render(&charts::throughput(p)),
        svg::render(&charts::latency(p)),
        svg::render(&charts::distribution(p))
    );
    for r in &p.repeats {
        if let Some(e) = &r.explore {
            out.push_str(&explore_section(r.repeat, e));
        }
    }
    out.push_str(&drain_table(p));
    out.push_str(&share_section(p));
    out.push_str(&super::storm::section(p));
    for r in &p.repeats {
        if let Some(c) = &r.correctness {
            out.push_str(&correctness_section(r.repeat, c));
        }
    }
    let workload = serde_json::to_string_pretty(&p.workload).unwrap_or_default();
    let _ = writeln!(
        out,
        "<details><summary>effective workload</summary><pre>{}</pre></details></section>",
        esc(&workload)
    );
    out
}

fn repeats_table(p: &PointResult) -> String {
    let header = [
        "repeat",
        "target rec/s",
        "measured s",
        "produce rec/s",
        "produce MB/s",
        "consume rec/s",
        "consume MB/s",
        "ack p99 ms",
        "e2e p99 ms",
        "e2e max ms",
        "failed",
        "backpressure",
        "max send lag ms",
        "generator cpu s",
        "broker cpu s",
        "load generator",
    ];
    let lat = |l: &Latency, v: f64| {
        if l.count > 0 {
            fmt_num(v)
        } else {
            "–".to_owned()
        }
    };
    let rows: Vec<Vec<String>> = p
        .repeats
        .iter()
        .map(|r| {
            vec![
                r.repeat.to_string(),
                r.target_rps.map_or_else(|| "max".to_owned(), fmt_num),
                fmt_num(r.measured_s),
                fmt_num(r.produce_rps),
                fmt_num(r.produce_mbps),
                fmt_num(r.consume_rps),
                fmt_num(r.consume_mbps),
                lat(&r.ack_latency, r.ack_latency.p99_ms),
                lat(&r.e2e_latency, r.e2e_latency.p99_ms),
                lat(&r.e2e_latency, r.e2e_latency.max_ms),
                r.totals.failed_records.to_string(),
                format!("{}%", fmt_num(r.backpressure_fraction * 100.0)),
                fmt_num(r.max_send_lag_ms),
                fmt_num(r.generator_cpu_s),
                r.broker_cpu_s.map_or_else(|| "–".to_owned(), fmt_num),
                if r.generator_saturated {
                    "<span class=\"badge fail\">SATURATED</span>".to_owned()
                } else {
                    "ok".to_owned()
                },
            ]
        })
        .collect();
    let classes = p
        .repeats
        .iter()
        .map(|r| if r.generator_saturated { "bad" } else { "" });
    table_with_classes("rrrrrrrrrrrrrrrl", &header, rows.iter().zip(classes))
}

fn explore_section(repeat: u32, e: &ExploreResult) -> String {
    let sustained = match (e.sustained_rps, e.sustained_mbps) {
        (Some(rps), Some(mbps)) => format!("{} rec/s ({} MB/s)", fmt_num(rps), fmt_num(mbps)),
        (Some(rps), None) => format!("{} rec/s", fmt_num(rps)),
        _ => "none".to_owned(),
    };
    let pass = e.sustain_pass_fraction.map_or_else(String::new, |f| {
        format!(
            "; {}% of sustain intervals met the target",
            fmt_num(f * 100.0)
        )
    });
    let mut out = format!(
        "<h3>Explore, repeat {repeat} {}</h3><p>Target: e2e p{} ≤ {} ms. Sustained rate: \
         <b>{sustained}</b>{pass}.</p>\n",
        badge(e.passed),
        e.percentile,
        fmt_num(e.target_ms)
    );
    let rows: Vec<Vec<String>> = e
        .steps
        .iter()
        .enumerate()
        .map(|(k, s)| {
            vec![
                k.to_string(),
                esc(&s.phase),
                fmt_num(s.target_rps),
                fmt_num(s.achieved_rps),
                fmt_num(s.e2e_ms),
                if s.met {
                    "yes".to_owned()
                } else {
                    "<b>no</b>".to_owned()
                },
                esc(s.reason.as_deref().unwrap_or("")),
            ]
        })
        .collect();
    let header = [
        "step",
        "phase",
        "target rec/s",
        "achieved rec/s",
        "e2e ms",
        "met",
        "reason",
    ];
    out.push_str(&table("rlrrrll", &header, &rows));
    out
}

fn drain_table(p: &PointResult) -> String {
    let rows: Vec<Vec<String>> = p
        .repeats
        .iter()
        .filter_map(|r| r.drain.as_ref().map(|d| (r.repeat, d)))
        .map(|(repeat, d)| {
            vec![
                repeat.to_string(),
                fmt_num(d.backlog_records as f64),
                fmt_num(d.backlog_bytes as f64 / 1e6),
                fmt_num(d.fill_s),
                fmt_num(d.drain_s),
                fmt_num(d.drain_rps),
                fmt_num(d.drain_mbps),
                fmt_num(d.live_producer_rps),
                fmt_num(d.fill_generator_cpu_s),
                fmt_num(d.drain_generator_cpu_s),
                d.fill_broker_cpu_s.map_or_else(|| "–".to_owned(), fmt_num),
                d.drain_broker_cpu_s.map_or_else(|| "–".to_owned(), fmt_num),
            ]
        })
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    let header = [
        "repeat",
        "backlog records",
        "backlog MB",
        "fill s",
        "drain s",
        "drain rec/s",
        "drain MB/s",
        "live producer rec/s",
        "fill generator cpu s",
        "drain generator cpu s",
        "fill broker cpu s",
        "drain broker cpu s",
    ];
    format!("<h3>Drain</h3>{}", table("rrrrrrrrrrrr", &header, &rows))
}

fn share_section(p: &PointResult) -> String {
    let shares: Vec<(u32, &ShareResult)> = p
        .repeats
        .iter()
        .filter_map(|r| r.share.as_ref().map(|s| (r.repeat, s)))
        .collect();
    if shares.is_empty() {
        return String::new();
    }
    let dash = || "–".to_owned();
    let rows: Vec<Vec<String>> = shares
        .iter()
        .map(|(repeat, s)| {
            let spread = s.per_consumer_spread.as_ref();
            let kill = s.kill.as_ref();
            vec![
                repeat.to_string(),
                s.consumers.to_string(),
                fmt_num(s.rps),
                spread.map_or_else(dash, |x| fmt_num(x.min)),
                spread.map_or_else(dash, |x| fmt_num(x.median)),
                spread.map_or_else(dash, |x| fmt_num(x.max)),
                s.jain_index.map_or_else(dash, fmt_num),
                s.idle_consumers.to_string(),
                s.distinct_records.to_string(),
                s.redelivered_records.to_string(),
                if s.fetch_latency_acquired.count > 0 {
                    format!(
                        "{} / {}",
                        fmt_num(s.fetch_latency_acquired.p50_ms),
                        fmt_num(s.fetch_latency_acquired.p99_ms)
                    )
                } else {
                    dash()
                },
                fmt_num(s.fetched_bytes as f64 / 1e6),
                s.errors.to_string(),
                kill.map_or_else(dash, |k| {
                    format!(
                        "{} held {} at {} s: first {} s, all {} s",
                        k.consumer,
                        k.held_records,
                        fmt_num(k.at_s),
                        k.first_redelivery_s.map_or_else(dash, fmt_num),
                        k.redelivery_s.map_or_else(dash, fmt_num)
                    )
                }),
                s.lock_timeout_ms.map_or_else(dash, |ms| ms.to_string()),
            ]
        })
        .collect();
    let header = [
        "repeat",
        "consumers",
        "rec/s",
        "rec/consumer min",
        "median",
        "max",
        "Jain",
        "idle",
        "distinct records",
        "redelivered",
        "fetch p50 / p99 ms",
        "MB fetched",
        "errors",
        "killed consumer",
        "lock ms",
    ];
    let (_, first) = shares[0];
    let configs: Vec<String> = first
        .group_configs
        .iter()
        .map(|(k, v)| format!("{}={}", esc(k), esc(v)))
        .collect();
    let mut out = format!(
        "<h3>Share consumers</h3><p>{} ms per record, max_poll_records {}, max_bytes {}, \
         acquire_mode {} ({}), ShareFetch v{}; group configs: {}.</p>{}",
        fmt_num(first.processing_ms_per_record),
        first.max_poll_records,
        first.max_bytes,
        esc(&first.acquire_mode),
        if first.acquire_mode_on_wire {
            "sent"
        } else {
            "recorded, not sent"
        },
        first.share_fetch_version,
        configs.join(", "),
        table("rrrrrrrrrrrrrlr", &header, &rows)
    );
    for (repeat, s) in &shares {
        let counts: Vec<String> = s.per_consumer.iter().map(u64::to_string).collect();
        let _ = write!(
            out,
            "<details><summary>repeat {repeat}: records per consumer, errors</summary>\
             <p>{}</p>",
            counts.join(" ")
        );
        for (kind, n) in &s.error_counts {
            let _ = write!(out, "<p>{} ×{n}</p>", esc(kind));
        }
        for example in &s.error_examples {
            let _ = write!(out, "<p><code>{}</code></p>", esc(example));
        }
        out.push_str("</details>\n");
    }
    out
}

fn correctness_section(repeat: u32, c: &CorrectnessReport) -> String {
    let mut out = format!(
        "<h3>Correctness, repeat {repeat} {}</h3>\n",
        badge(c.passed)
    );
    let header = [
        "broker kills",
        "acked",
        "seen",
        "lost",
        "duplicated",
        "out of order",
        "corrupted",
        "unacked present",
    ];
    let row = vec![
        c.kills.to_string(),
        c.acked.to_string(),
        c.seen.to_string(),
        c.lost.to_string(),
        c.duplicated.to_string(),
        c.out_of_order.to_string(),
        c.corrupted.to_string(),
        c.unacked_present.to_string(),
    ];
    out.push_str(&table("rrrrrrrr", &header, &[row]));
    if !c.kill_log.is_empty() {
        let rows: Vec<Vec<String>> = c
            .kill_log
            .iter()
            .enumerate()
            .map(|(i, k)| {
                vec![
                    i.to_string(),
                    k.broker.to_string(),
                    esc(&k.address),
                    esc(&k.at),
                    format!("{:.1}", k.t_s),
                    k.pid.to_string(),
                    k.restarted_pid.to_string(),
                    format!("{:.2}", k.down_s),
                ]
            })
            .collect();
        let header = [
            "kill",
            "broker",
            "address",
            "at (UTC)",
            "t s",
            "pid killed",
            "pid restarted",
            "down s",
        ];
        let _ = writeln!(
            out,
            "<details><summary>{} kills</summary>{}</details>",
            rows.len(),
            table("rrllrrrr", &header, &rows)
        );
    }

    let faulty = |p: &PartitionCheck| p.lost + p.duplicated + p.out_of_order + p.corrupted > 0;
    let rows: Vec<Vec<String>> = c
        .partitions
        .iter()
        .map(|p| {
            vec![
                esc(&p.topic),
                p.partition.to_string(),
                p.acked.to_string(),
                p.seen.to_string(),
                p.lost.to_string(),
                p.duplicated.to_string(),
                p.out_of_order.to_string(),
                p.corrupted.to_string(),
            ]
        })
        .collect();
    if !rows.is_empty() {
        let bad = c.partitions.iter().filter(|p| faulty(p)).count();
        let header = [
            "topic",
            "partition",
            "acked",
            "seen",
            "lost",
            "duplicated",
            "out of order",
            "corrupted",
        ];
        let classes = c
            .partitions
            .iter()
            .map(|p| if faulty(p) { "bad" } else { "" });
        let _ = writeln!(
            out,
            "<details{}><summary>{} partitions, {bad} with faults</summary>{}</details>",
            if bad > 0 { " open" } else { "" },
            rows.len(),
            table_with_classes("lrrrrrrr", &header, rows.iter().zip(classes))
        );
    }
    if !c.examples.is_empty() {
        out.push_str("<p>Examples:</p><ul>");
        for example in &c.examples {
            let _ = write!(out, "<li><code>{}</code></li>", esc(example));
        }
        out.push_str("</ul>\n");
    }
    out
}
