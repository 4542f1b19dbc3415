//! `cargo xtask check-workflows`: actionlint over .github/workflows/. The forge's jobs cannot run
//! here (no forge, no OIDC token), so this is what checks them before a tag does: the workflow
//! syntax, expressions and contexts, permissions, job needs and outputs, and each `run:` script
//! through shellcheck. actionlint is built from its Go module (tests/actionlint/build.sh).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use evictkit_harness::packages::Need;

/// actionlint checks `run:` scripts with shellcheck when it finds one, and silently not without.
const SHELLCHECK: Need = ("/usr/bin/shellcheck", "shellcheck");

pub fn check() -> Result<()> {
    evictkit_harness::packages::ensure(
        &[SHELLCHECK],
        "actionlint's check of the workflows' scripts",
    )?;
    let dir = evictkit_harness::workspace_root().join(".github/workflows");
    let count = lint(&dir, Some(Path::new(SHELLCHECK.0)))?;
    println!("actionlint: {count} workflows in .github/workflows, no problem");
    Ok(())
}

/// Lints every workflow of `dir`; how many there were, or an error with actionlint's report.
fn lint(dir: &Path, shellcheck: Option<&Path>) -> Result<usize> {
    let actionlint =
        evictkit_harness::cached_build("tests/actionlint/build.sh", &[])?.join("actionlint");
    let mut workflows: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("listing {}", dir.display()))?
        .filter_map(|entry| Some(entry.ok()?.path()))
        .filter(|path| {
            path.extension()
                .is_some_and(|extension| extension == "yml" || extension == "yaml")
        })
        .collect();
    workflows.sort();
    if workflows.is_empty() {
        bail!("no workflow (*.yml, *.yaml) in {}", dir.display());
    }
    let mut command = Command::new(&actionlint);
    command.arg("-color=false");
    // An empty path turns the shellcheck integration off.
    command.arg(format!(
        "-shellcheck={}",
        shellcheck
            .map(Path::display)
            .map(|path| path.to_string())
            .unwrap_or_default()
    ));
    let output = command
        .args(&workflows)
        .output()
        .with_context(|| format!("running {}", actionlint.display()))?;
    if !output.status.success() {
        bail!(
            "actionlint found problems in {}:\n{}{}",
            dir.display(),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(workflows.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workflow_reading_an_undefined_context_is_refused() {
        let dir = std::env::temp_dir().join(format!("evictkit-workflows-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let workflow = "on: push\njobs:\n  one:\n    runs-on: ubuntu-24.04\n    steps:\n      \
                        - run: echo ${{ github.no_such_property }}\n";
        std::fs::write(dir.join("bad.yml"), workflow).unwrap();
        let error = lint(&dir, None).unwrap_err().to_string();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(error.contains("no_such_property"), "{error}");
    }
}
