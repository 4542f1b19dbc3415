//! The benches' figures as CSV files under `target/bench/`, one row per measured case. A rerun
//! of a case replaces its row (the key: the first `key_columns` columns), so a file gathers the
//! cases of several runs, e.g. the small sizes on one day and the largest on another. Every row
//! written by [`record`] says where it came from ([`PROVENANCE`]): the commit measured, the date,
//! and the machine's 1-minute load average when its case started and when it was written, since
//! runs of different days and loads share a file.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail, ensure};

/// `target/bench/<name>`, its directory created.
pub fn path(name: &str) -> Result<PathBuf> {
    let dir = crate::workspace::workspace_root().join("target/bench");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir.join(name))
}

/// The columns [`record`] appends to every row.
pub const PROVENANCE: &[&str] = &["commit", "date", "loadavg_start", "loadavg_end"];

/// Where a measured case came from: taken when it starts, completed when its rows are written.
#[derive(Clone, Debug)]
pub struct Provenance {
    /// The short commit measured, `+dirty` with uncommitted changes to tracked files.
    pub commit: String,
    /// When the case started, UTC to the minute.
    pub date: String,
    /// The 1-minute load average when the case started.
    pub loadavg_start: String,
}

impl Provenance {
    /// The commit of the working tree, the time and the load average now.
    pub fn now() -> Result<Self> {
        Ok(Self {
            commit: commit()?,
            date: minute_now(),
            loadavg_start: loadavg()?,
        })
    }

    /// The [`PROVENANCE`] values of a row written now.
    fn values(&self, loadavg_end: &str) -> [String; 4] {
        [
            self.commit.clone(),
            self.date.clone(),
            self.loadavg_start.clone(),
            loadavg_end.to_owned(),
        ]
    }
}

/// The short commit of the working tree, `+dirty` with uncommitted changes to tracked files.
pub fn commit() -> Result<String> {
    let git = |args: &[&str]| -> Result<String> {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(crate::workspace::workspace_root())
            .output()
            .with_context(|| format!("running git {}", args.join(" ")))?;
        ensure!(
            out.status.success(),
            "git {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    let commit = git(&["rev-parse", "--short", "HEAD"])?;
    let dirty = !git(&["status", "--porcelain", "--untracked-files=no"])?.is_empty();
    Ok(format!("{commit}{}", if dirty { "+dirty" } else { "" }))
}

/// The time now, UTC to the minute.
pub fn minute_now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%MZ")
        .to_string()
}

/// The machine's load average over the last minute (`/proc/loadavg`).
pub fn loadavg() -> Result<String> {
    let text = std::fs::read_to_string("/proc/loadavg").context("reading /proc/loadavg")?;
    text.split_whitespace()
        .next()
        .map(str::to_owned)
        .context("/proc/loadavg is empty")
}

/// [`upsert`] with the [`PROVENANCE`] columns appended to `header` and to each row: the case
/// started as `provenance` says and its rows are written now.
pub fn record(
    path: &Path,
    header: &[&str],
    key_columns: usize,
    rows: &[Vec<String>],
    provenance: &Provenance,
) -> Result<()> {
    let header: Vec<&str> = header.iter().chain(PROVENANCE).copied().collect();
    let end = loadavg()?;
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|row| row.iter().cloned().chain(provenance.values(&end)).collect())
        .collect();
    upsert(path, &header, key_columns, &rows)
}

/// Writes `rows` into the CSV file at `path` under `header`, replacing the rows of the file
/// whose first `key_columns` values equal a new row's, and keeping the rest in order. A file
/// with another header is an error naming both (its columns changed: move it away).
pub fn upsert(
    path: &Path,
    header: &[&str],
    key_columns: usize,
    rows: &[Vec<String>],
) -> Result<()> {
    ensure!(
        key_columns <= header.len(),
        "{key_columns} key columns of {}",
        header.len()
    );
    for row in rows {
        ensure!(
            row.len() == header.len(),
            "a row of {} values for the {} columns of {}",
            row.len(),
            header.len(),
            path.display()
        );
        // Unquoted on purpose: the files are read back (here and by plots) by splitting on commas.
        if let Some(value) = row.iter().find(|value| value.contains([',', '\n'])) {
            bail!(
                "the value {value:?} for {} holds a comma or a line break",
                path.display()
            );
        }
    }
    let header_line = header.join(",");
    let mut kept: Vec<Vec<String>> = Vec::new();
    if path.exists() {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let mut lines = text.lines();
        let existing = lines.next().unwrap_or_default();
        ensure!(
            existing == header_line,
            "{} has the columns {existing:?}, not {header_line:?}: move it away",
            path.display()
        );
        kept = lines
            .map(|line| line.split(',').map(str::to_owned).collect::<Vec<_>>())
            .filter(|old| {
                !rows
                    .iter()
                    .any(|new| new[..key_columns] == old[..key_columns.min(old.len())])
            })
            .collect();
    }
    kept.extend(rows.iter().cloned());
    let mut text = header_line;
    text.push('\n');
    for row in &kept {
        text.push_str(&row.join(","));
        text.push('\n');
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// The rows of the CSV file at `path` (without its header), each value by column name.
pub fn read(path: &Path) -> Result<Vec<std::collections::BTreeMap<String, String>>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap_or_default().split(',').collect();
    Ok(lines
        .map(|line| {
            header
                .iter()
                .zip(line.split(','))
                .map(|(column, value)| ((*column).to_owned(), value.to_owned()))
                .collect()
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rerun_replaces_its_case_and_keeps_the_others() {
        let dir = std::env::temp_dir().join(format!("evictkit-csv-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.csv");
        let _ = std::fs::remove_file(&path);
        let row = |a: &str, b: &str, v: &str| vec![a.to_owned(), b.to_owned(), v.to_owned()];
        upsert(
            &path,
            &["size", "side", "value"],
            2,
            &[row("1000", "ours", "1"), row("1000", "upstream", "2")],
        )
        .unwrap();
        upsert(
            &path,
            &["size", "side", "value"],
            2,
            &[row("1000", "ours", "3")],
        )
        .unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "size,side,value\n1000,upstream,2\n1000,ours,3\n"
        );
        assert_eq!(read(&path).unwrap()[1]["value"], "3");
        let error = upsert(
            &path,
            &["size", "value"],
            1,
            &[vec!["1".into(), "2".into()]],
        )
        .unwrap_err();
        assert!(error.to_string().contains("move it away"), "{error}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_recorded_row_says_its_commit_date_and_load() {
        let path = std::env::temp_dir().join(format!(
            "evictkit-csv-provenance-{}.csv",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&path);
        let provenance = Provenance {
            commit: "abc1234".into(),
            date: "2026-12-06T01:30Z".into(),
            loadavg_start: "3.10".into(),
        };
        record(
            &path,
            &["size", "value"],
            1,
            &[vec!["1000".into(), "7".into()]],
            &provenance,
        )
        .unwrap();
        let rows = read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0]["commit"], "abc1234");
        assert_eq!(rows[0]["date"], "2026-12-06T01:30Z");
        assert_eq!(rows[0]["loadavg_start"], "3.10");
        assert!(rows[0]["loadavg_end"].parse::<f64>().is_ok(), "{rows:?}");
        let now = Provenance::now().unwrap();
        assert!(now.commit.len() >= 7, "{now:?}");
    }

    #[test]
    fn a_value_with_a_comma_is_refused_since_the_file_is_read_by_splitting_on_commas() {
        let path =
            std::env::temp_dir().join(format!("evictkit-csv-comma-{}.csv", std::process::id()));
        let error = upsert(
            &path,
            &["scenario", "size"],
            1,
            &[vec![
                "floor".into(),
                "25 calls at once, PDB per-namespace".into(),
            ]],
        )
        .unwrap_err();
        assert!(error.to_string().contains("PDB per-namespace"), "{error}");
        assert!(!path.exists(), "nothing written");
    }
}
