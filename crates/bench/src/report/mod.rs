//! Campaign results on disk and for people: the last step of `sluice bench`, after the runner
//! has filled a [`Campaign`](crate::result::Campaign).
//!
//! A campaign directory holds
//! - `campaign.json`: the whole [`Campaign`], the source of truth that [`read_campaign`] (and so
//!   `sluice bench compare`) reads back;
//! - `points/<id>.json`: each [`PointResult`](crate::result::PointResult) alone;
//! - `results.csv` (one row per point × repeat) and `intervals.csv` (one row per reporting
//!   interval), for spreadsheets and notebooks (`csv.rs`), and for `storm` campaigns
//!   `storm.csv` (one row per second of the storm, `storm.rs`);
//! - `report.html`: one self-contained page with tables and inline SVG charts (`html.rs`, the
//!   charts built in `charts.rs` from the primitives in `svg.rs`).
//!
//! [`compare`] puts several campaign directories side by side (`compare.rs`), and
//! [`summary_text`] is the table printed at the end of a run (`text.rs`). The headline numbers
//! every view shows, and their spread across repeats, are defined once in `metrics.rs`.

mod charts;
mod compare;
mod csv;
mod html;
mod metrics;
mod storm;
mod svg;
mod text;

#[cfg(test)]
mod tests;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::result::{Campaign, FORMAT_VERSION};

/// File names inside a campaign directory.
pub const CAMPAIGN_FILE: &str = "campaign.json";
pub const POINTS_DIR: &str = "points";
pub const RESULTS_CSV: &str = "results.csv";
pub const INTERVALS_CSV: &str = "intervals.csv";
/// Per-second rows of `storm` campaigns (absent otherwise).
pub const STORM_CSV: &str = "storm.csv";
pub const REPORT_HTML: &str = "report.html";
pub const COMPARE_HTML: &str = "compare.html";
pub const COMPARE_CSV: &str = "compare.csv";

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("create directory {path}: {source}")]
    CreateDir {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("write {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{dir} has no {CAMPAIGN_FILE}: not a `sluice bench` campaign directory")]
    NoCampaign { dir: PathBuf },
    #[error("{path} is not a valid campaign file: {source}")]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("encode {path}: {source}")]
    Encode {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error(
        "{path} has result format {found}, but this sluice reads formats up to {supported}: \
         use a newer sluice to read it"
    )]
    FormatTooNew {
        path: PathBuf,
        found: u32,
        supported: u32,
    },
    #[error(
        "point id {id:?} cannot name a file under {dir}: ids must be non-empty ASCII letters, \
         digits, '-', '_' or '.', not starting with '.'"
    )]
    BadPointId { id: String, dir: PathBuf },
    #[error("compare needs at least two campaign directories, got {given}")]
    TooFewCampaigns { given: usize },
}

/// Writes a campaign directory's result files: `campaign.json` (the whole campaign, pretty),
/// `points/<id>.json`, `results.csv`, `intervals.csv` and `report.html`. Creates `dir` (and
/// `dir/points`) if missing and does not touch other files in it.
///
/// Durability: when this returns `Ok`, every file has been written in full through the OS
/// (`write(2)` done, not fsynced). Each file is replaced by a plain overwrite, so a crash part
/// way can leave a truncated file; `campaign.json` is written first so that a crash while the
/// reports are being rendered still leaves the data readable, and the reports can be made again
/// from it.
pub fn write_campaign(dir: &Path, campaign: &Campaign) -> Result<(), ReportError> {
    let points_dir = dir.join(POINTS_DIR);
    // Check every id before writing anything, so a bad one leaves no half-written directory.
    for point in &campaign.points {
        if !is_safe_file_stem(&point.id) {
            return Err(ReportError::BadPointId {
                id: point.id.clone(),
                dir: points_dir,
            });
        }
    }
    create_dir(dir)?;
    write_json(&dir.join(CAMPAIGN_FILE), campaign)?;
    create_dir(&points_dir)?;
    for point in &campaign.points {
        write_json(&points_dir.join(format!("{}.json", point.id)), point)?;
    }
    write_file(&dir.join(RESULTS_CSV), &csv::results(campaign))?;
    write_file(&dir.join(INTERVALS_CSV), &csv::intervals(campaign))?;
    if let Some(text) = storm::csv(campaign) {
        write_file(&dir.join(STORM_CSV), &text)?;
    }
    write_file(&dir.join(REPORT_HTML), &html::campaign_page(campaign))
}

/// Reads `dir/campaign.json` back. Refuses a `format` newer than [`FORMAT_VERSION`] before
/// trying to parse the rest, whose meaning may have changed.
pub fn read_campaign(dir: &Path) -> Result<Campaign, ReportError> {
    /// Just the version, so a newer file is refused with a clear message rather than with
    /// whatever parse error its new fields would cause.
    #[derive(Deserialize)]
    struct FormatProbe {
        format: u32,
    }

    let path = dir.join(CAMPAIGN_FILE);
    let text = match fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(ReportError::NoCampaign {
                dir: dir.to_owned(),
            });
        }
        Err(source) => return Err(ReportError::Read { path, source }),
    };
    if let Ok(probe) = serde_json::from_str::<FormatProbe>(&text)
        && probe.format > FORMAT_VERSION
    {
        return Err(ReportError::FormatTooNew {
            path,
            found: probe.format,
            supported: FORMAT_VERSION,
        });
    }
    serde_json::from_str(&text).map_err(|source| ReportError::Parse { path, source })
}

/// `sluice bench compare DIR DIR…`: reads each campaign, writes `compare.html` and
/// `compare.csv` into `out` (created if missing; other files left alone) and returns a
/// plain-text side-by-side table for the terminal. The first directory is the baseline that
/// ratios are relative to. Files are written like [`write_campaign`]'s (complete, not fsynced).
pub fn compare(dirs: &[PathBuf], out: &Path) -> Result<String, ReportError> {
    if dirs.len() < 2 {
        return Err(ReportError::TooFewCampaigns { given: dirs.len() });
    }
    let campaigns = dirs
        .iter()
        .map(|dir| read_campaign(dir).map(|c| (dir.clone(), c)))
        .collect::<Result<Vec<_>, _>>()?;
    let comparison = compare::Comparison::new(&campaigns);
    create_dir(out)?;
    write_file(&out.join(COMPARE_CSV), &comparison.csv())?;
    write_file(&out.join(COMPARE_HTML), &comparison.html())?;
    Ok(comparison.text())
}

/// A plain-text summary of one campaign for the terminal at the end of a run: one line per
/// point with the headline numbers as `median [min–max]` across repeats, then warnings.
pub fn summary_text(campaign: &Campaign) -> String {
    text::summary(campaign)
}

/// Whether `id` can be used as a file name as is: no separators, no `..`, nothing hidden.
fn is_safe_file_stem(id: &str) -> bool {
    !id.is_empty()
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

fn create_dir(path: &Path) -> Result<(), ReportError> {
    fs::create_dir_all(path).map_err(|source| ReportError::CreateDir {
        path: path.to_owned(),
        source,
    })
}

fn write_file(path: &Path, contents: &str) -> Result<(), ReportError> {
    fs::write(path, contents).map_err(|source| ReportError::Write {
        path: path.to_owned(),
        source,
    })
}

fn write_json(path: &Path, value: &impl serde::Serialize) -> Result<(), ReportError> {
    let mut json = serde_json::to_string_pretty(value).map_err(|source| ReportError::Encode {
        path: path.to_owned(),
        source,
    })?;
    json.push('\n');
    write_file(path, &json)
}
