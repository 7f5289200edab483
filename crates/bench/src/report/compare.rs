//! `sluice bench compare`: several campaigns (e.g. Sluice and Apache Kafka on the same
//! workload) side by side.
//!
//! Points are matched by `label` (their dimension values), so campaigns of the same workload
//! line up whatever order they ran in. For each matched point and headline number the table
//! shows every campaign's `median [min–max]` and its ratio to the first campaign's median, the
//! baseline. The same table goes to the terminal, `compare.csv` and `compare.html`; the HTML
//! adds each campaign's metadata and overlaid charts (one colour per campaign).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::charts;
use super::html::{self, esc, spread_cell};
use super::metrics::{self, Metric, Verdict, fmt_num, fmt_spread};
use super::svg::{self, Chart, Series, XScale};
use super::text::{self, TextTable};
use crate::result::{Campaign, PointResult, Spread};

#[derive(Debug)]
pub(crate) struct Comparison<'a> {
    campaigns: Vec<&'a Campaign>,
    dirs: Vec<&'a Path>,
    /// One display name per campaign: the broker label, made unique.
    names: Vec<String>,
    /// Every point label, in the order first seen (the first campaign's order first).
    labels: Vec<&'a str>,
    /// Headline numbers some campaign has.
    metrics: Vec<&'static Metric>,
}

/// One line of the table: one point, one number, one spread per campaign.
#[derive(Debug)]
struct Row<'a> {
    label: &'a str,
    metric: &'static Metric,
    spreads: Vec<Option<Spread>>,
}

impl Row<'_> {
    /// Campaign `i`'s median over the first campaign's.
    fn ratio(&self, i: usize) -> Option<f64> {
        metrics::ratio(self.spreads[0].as_ref(), self.spreads[i].as_ref())
    }
}

impl<'a> Comparison<'a> {
    pub(crate) fn new(campaigns: &'a [(PathBuf, Campaign)]) -> Comparison<'a> {
        let dirs: Vec<&Path> = campaigns.iter().map(|(d, _)| d.as_path()).collect();
        let campaigns: Vec<&Campaign> = campaigns.iter().map(|(_, c)| c).collect();
        let names = campaigns
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let label = if c.broker.label.is_empty() {
                    "campaign"
                } else {
                    c.broker.label.as_str()
                };
                let same = campaigns
                    .iter()
                    .filter(|o| o.broker.label == c.broker.label)
                    .count();
                if same > 1 {
                    format!("{label} #{}", i + 1)
                } else {
                    label.to_owned()
                }
            })
            .collect();
        let mut labels: Vec<&str> = Vec::new();
        for point in campaigns.iter().flat_map(|c| &c.points) {
            if !labels.contains(&point.label.as_str()) {
                labels.push(&point.label);
            }
        }
        let all_points: Vec<&PointResult> = campaigns.iter().flat_map(|c| &c.points).collect();
        let metrics = metrics::present_metrics(&all_points);
        Comparison {
            campaigns,
            dirs,
            names,
            labels,
            metrics,
        }
    }

    fn point(&self, campaign: usize, label: &str) -> Option<&'a PointResult> {
        self.campaigns[campaign]
            .points
            .iter()
            .find(|p| p.label == label)
    }

    fn rows(&self) -> Vec<Row<'a>> {
        let mut rows = Vec::new();
        for &label in &self.labels {
            for &metric in &self.metrics {
                let spreads: Vec<Option<Spread>> = (0..self.campaigns.len())
                    .map(|c| {
                        self.point(c, label)
                            .and_then(|p| metrics::point_spread(p, metric))
                    })
                    .collect();
                if spreads.iter().any(Option::is_some) {
                    rows.push(Row {
                        label,
                        metric,
                        spreads,
                    });
                }
            }
        }
        rows
    }

    /// The terminal table (see [`super::compare`]).
    pub(crate) fn text(&self) -> String {
        let mut out = String::new();
        for (i, c) in self.campaigns.iter().enumerate() {
            let _ = writeln!(
                out,
                "[{}] {}: broker {} {}; {} ({}) in {}\n    {}; {}; sluice {} ({})",
                i + 1,
                self.names[i],
                c.broker.label,
                c.broker.version,
                c.name,
                c.mode,
                self.dirs[i].display(),
                text::machine_text(&c.machine),
                c.client.name,
                c.sluice_version,
                c.git_commit
            );
        }
        let mut header = vec!["point".to_owned(), "metric".to_owned()];
        for (i, name) in self.names.iter().enumerate() {
            header.push(name.clone());
            if i > 0 {
                header.push(format!("{name}/{}", self.names[0]));
            }
        }
        let mut table = TextTable::new(2, header);
        let mut previous_label = None;
        for row in self.rows() {
            let label = if previous_label == Some(row.label) {
                String::new()
            } else {
                row.label.to_owned()
            };
            previous_label = Some(row.label);
            let mut cells = vec![label, row.metric.title.to_owned()];
            for (i, spread) in row.spreads.iter().enumerate() {
                cells.push(spread.as_ref().map_or_else(|| "-".to_owned(), fmt_spread));
                if i > 0 {
                    cells.push(
                        row.ratio(i)
                            .map_or_else(|| "-".to_owned(), |r| format!("×{}", fmt_ratio(r))),
                    );
                }
            }
            table.push(cells);
        }
        out.push_str(&table.render());
        for (i, c) in self.campaigns.iter().enumerate() {
            let notes = c.warnings.len() + text::repeat_notes(c).len();
            if notes > 0 {
                let _ = writeln!(
                    out,
                    "WARNING: {} has {notes} warning(s); see compare.html",
                    self.names[i]
                );
            }
        }
        out
    }

    /// `compare.csv`: the table, one column group per campaign (median, min, max, cv, and for
    /// all but the first the ratio of medians to the first).
    pub(crate) fn csv(&self) -> String {
        let mut out = String::new();
        let mut header = vec!["label".to_owned(), "metric".to_owned()];
        for (i, name) in self.names.iter().enumerate() {
            header.extend(["median", "min", "max", "cv"].map(|s| format!("{name} {s}")));
            if i > 0 {
                header.push(format!("{name} ratio"));
            }
        }
        super::csv::text_row(&mut out, &header);
        for row in self.rows() {
            let mut cells = vec![row.label.to_owned(), row.metric.key.to_owned()];
            for (i, spread) in row.spreads.iter().enumerate() {
                match spread {
                    Some(s) => cells.extend([s.median, s.min, s.max, s.cv].map(csv_num)),
                    None => cells.extend(std::iter::repeat_n(String::new(), 4)),
                }
                if i > 0 {
                    cells.push(row.ratio(i).map_or_else(String::new, csv_num));
                }
            }
            super::csv::text_row(&mut out, &cells);
        }
        out
    }

    /// `compare.html`.
    pub(crate) fn html(&self) -> String {
        let title = format!("Comparison: {}", self.names.join(" vs "));
        let mut body = format!("<h1>{}</h1>\n", esc(&title));
        let warnings: Vec<String> = self
            .campaigns
            .iter()
            .zip(&self.names)
            .flat_map(|(c, name)| {
                c.warnings
                    .iter()
                    .cloned()
                    .chain(text::repeat_notes(c))
                    .map(move |w| format!("{name}: {w}"))
            })
            .collect();
        body.push_str(&html::warnings_box(&warnings, &[]));
        body.push_str("<h2>Campaigns</h2>\n");
        body.push_str(&self.metadata_table());
        let _ = writeln!(
            body,
            "<h2>Headline numbers</h2><p>Ratios are medians over {}'s; \
             <span class=\"better\">green</span> is better by more than 5%, \
             <span class=\"worse\">red</span> worse.</p>",
            esc(&self.names[0])
        );
        body.push_str(&self.table_html());
        for &label in &self.labels {
            let storm: String = self.storm_charts(label).iter().map(svg::render).collect();
            let _ = writeln!(
                body,
                "<section><h2>{}</h2><div class=\"charts\">{storm}{}{}{}</div></section>",
                esc(label),
                svg::render(&self.throughput_chart(label)),
                svg::render(&self.distribution_chart(label, "e2e")),
                svg::render(&self.distribution_chart(label, "ack"))
            );
        }
        html::page(&title, &body)
    }

    fn metadata_table(&self) -> String {
        type Field = fn(&Campaign) -> String;
        let fields: [(&str, Field); 11] = [
            ("campaign", |c| format!("{} ({})", c.name, c.mode)),
            ("broker", |c| {
                format!("{} {}", c.broker.label, c.broker.version)
            }),
            ("bootstrap", |c| c.bootstrap.clone()),
            ("client", |c| {
                format!("{} ({})", c.client.name, c.client.security_protocol())
            }),
            ("sluice", |c| {
                format!("{} ({})", c.sluice_version, c.git_commit)
            }),
            ("machine", |c| text::machine_text(&c.machine)),
            ("started", |c| c.started_at.clone()),
            ("finished", |c| c.finished_at.clone()),
            ("dimensions", |c| c.dimensions.join(", ")),
            ("points", |c| c.points.len().to_string()),
            ("warnings", |c| c.warnings.len().to_string()),
        ];
        let mut header = vec![""];
        header.extend(self.names.iter().map(String::as_str));
        let mut rows = vec![{
            let mut row = vec!["<b>directory</b>".to_owned()];
            row.extend(
                self.dirs
                    .iter()
                    .map(|d| format!("<code>{}</code>", esc(&d.display().to_string()))),
            );
            row
        }];
        for (name, field) in fields {
            let mut row = vec![format!("<b>{name}</b>")];
            row.extend(self.campaigns.iter().map(|c| esc(&field(c))));
            rows.push(row);
        }
        html::table("", &header, &rows)
    }

    fn table_html(&self) -> String {
        let mut header = vec!["point".to_owned(), "metric".to_owned()];
        let mut align = String::from("ll");
        for (i, name) in self.names.iter().enumerate() {
            header.push(name.clone());
            align.push('r');
            if i > 0 {
                header.push(format!("{name} / {}", self.names[0]));
                align.push('r');
            }
        }
        let rows: Vec<Vec<String>> = self
            .rows()
            .iter()
            .map(|row| {
                let mut cells = vec![esc(row.label), esc(row.metric.title)];
                for (i, spread) in row.spreads.iter().enumerate() {
                    cells.push(spread_cell(spread.as_ref()));
                    if i > 0 {
                        cells.push(ratio_cell(row.metric, row.ratio(i)));
                    }
                }
                cells
            })
            .collect();
        if rows.is_empty() {
            return "<div class=\"nodata\">no headline numbers: no data</div>\n".to_owned();
        }
        let header: Vec<&str> = header.iter().map(String::as_str).collect();
        html::table(&align, &header, &rows)
    }

    /// Acknowledged records/s over time of every repeat of the matching points, one colour per
    /// campaign, one dash pattern per repeat.
    fn throughput_chart(&self, label: &str) -> Chart {
        let mut series = Vec::new();
        for (c, name) in self.names.iter().enumerate() {
            let Some(point) = self.point(c, label) else {
                continue;
            };
            for (k, r) in point.repeats.iter().enumerate() {
                let name = series_name(name, point, r.repeat);
                let (color, dash) = (svg::color(c), svg::dash(k));
                series.push(charts::interval_series(
                    name,
                    &r.intervals,
                    color,
                    dash,
                    |i| Some(i.acked_rps),
                ));
            }
        }
        Chart {
            title: format!("{label} · acknowledged throughput"),
            x_label: "time since start (s)".to_owned(),
            y_label: "records/s".to_owned(),
            x_scale: XScale::Linear,
            series,
            bands: Vec::new(),
        }
    }

    /// For storm campaigns: goodput as a share of the offered new records, and ack p99, per
    /// second, one colour per campaign (each broker at multiples of its own capacity, so the
    /// shares compare where the rates would not). Empty when no campaign ran a storm here.
    fn storm_charts(&self, label: &str) -> Vec<Chart> {
        let mut fraction = Vec::new();
        let mut p99 = Vec::new();
        let mut band = None;
        for (c, name) in self.names.iter().enumerate() {
            let Some(point) = self.point(c, label) else {
                continue;
            };
            for (k, r) in point.repeats.iter().enumerate() {
                let Some(st) = &r.storm else { continue };
                band.get_or_insert_with(|| charts::storm_band(st));
                let name = series_name(name, point, r.repeat);
                let (color, dash) = (svg::color(c), svg::dash(k));
                fraction.push(charts::storm_series(
                    format!("{name} (capacity {})", fmt_num(st.capacity_rps)),
                    &st.seconds,
                    color,
                    dash,
                    |s| {
                        (s.offered_rps > 0.0)
                            .then(|| crate::storm::series::judged_goodput(s) / s.offered_rps)
                    },
                ));
                p99.push(charts::storm_series(name, &st.seconds, color, dash, |s| {
                    (s.ack_count > 0).then_some(s.ack_p99_ms)
                }));
            }
        }
        let Some(band) = band else {
            return Vec::new();
        };
        vec![
            Chart {
                title: format!(
                    "{label} · retry storm: goodput / offered new records (after the storm: \
                     records offered after it)"
                ),
                x_label: "seconds since the before phase began".to_owned(),
                y_label: "goodput / offered".to_owned(),
                x_scale: XScale::Linear,
                series: fraction,
                bands: vec![band.clone()],
            },
            Chart {
                title: format!("{label} · retry storm: ack p99 per second"),
                x_label: "seconds since the before phase began".to_owned(),
                y_label: "ms".to_owned(),
                x_scale: XScale::Linear,
                series: p99,
                bands: vec![band],
            },
        ]
    }

    /// `which` is `e2e` or `ack`.
    fn distribution_chart(&self, label: &str, which: &str) -> Chart {
        let mut series: Vec<Series> = Vec::new();
        for (c, name) in self.names.iter().enumerate() {
            let Some(point) = self.point(c, label) else {
                continue;
            };
            for (k, r) in point.repeats.iter().enumerate() {
                let latency = if which == "ack" {
                    &r.ack_latency
                } else {
                    &r.e2e_latency
                };
                let name = series_name(name, point, r.repeat);
                series.extend(charts::distribution_series(
                    name,
                    latency,
                    svg::color(c),
                    svg::dash(k),
                ));
            }
        }
        Chart {
            title: format!("{label} · {which} latency distribution"),
            x_label: "percentile".to_owned(),
            y_label: "ms".to_owned(),
            x_scale: XScale::Percentile,
            series,
            bands: Vec::new(),
        }
    }
}

fn series_name(campaign: &str, point: &PointResult, repeat: u32) -> String {
    if point.repeats.len() > 1 {
        format!("{campaign} r{repeat}")
    } else {
        campaign.to_owned()
    }
}

fn ratio_cell(metric: &Metric, ratio: Option<f64>) -> String {
    let Some(r) = ratio else {
        return "–".to_owned();
    };
    let class = match metrics::ratio_verdict(metric, r) {
        Verdict::Better => " class=\"better\"",
        Verdict::Worse => " class=\"worse\"",
        Verdict::Same => "",
    };
    format!("<span{class}>×{}</span>", fmt_ratio(r))
}

fn fmt_ratio(r: f64) -> String {
    if r >= 100.0 {
        fmt_num(r)
    } else {
        format!("{r:.2}")
    }
}

fn csv_num(v: f64) -> String {
    if v.is_finite() {
        v.to_string()
    } else {
        String::new()
    }
}
