//! CHANGELOG.md: one `## <version>` section per release, newest first. A release needs its own.

use anyhow::{Result, bail};

/// The text of the `## <version>` section (after its heading line, up to the next `## `), which
/// must say something: a heading alone is no changelog. The heading may carry more after the
/// version, e.g. `## 0.1.0 - 2026-12-05`.
pub fn section<'a>(changelog: &'a str, version: &str) -> Result<&'a str> {
    let mut start = None;
    let mut offset = 0;
    for line in changelog.split_inclusive('\n') {
        let heading = line.strip_prefix("## ").map(str::trim);
        match (start, heading) {
            (None, Some(heading))
                if heading == version
                    || heading
                        .strip_prefix(version)
                        .is_some_and(|rest| rest.starts_with([' ', '\t'])) =>
            {
                start = Some(offset + line.len());
            }
            (Some(from), Some(_)) => return non_empty(&changelog[from..offset], version),
            _ => {}
        }
        offset += line.len();
    }
    match start {
        Some(from) => non_empty(&changelog[from..], version),
        None => bail!("CHANGELOG.md has no `## {version}` section: write what {version} changes"),
    }
}

fn non_empty<'a>(text: &'a str, version: &str) -> Result<&'a str> {
    if text.trim().is_empty() {
        bail!("CHANGELOG.md's `## {version}` section is empty");
    }
    Ok(text.trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHANGELOG: &str = "# Changelog\n\n## 0.2.0 - 2027-01-10\n\n- faster\n\n## 0.1.0\n\nfirst\n\n## 0.1.0-rc.1\n\n";

    #[test]
    fn sections_are_found_by_their_exact_version() {
        let cases = [
            ("0.2.0", Ok("- faster")),
            ("0.1.0", Ok("first")),
            // A heading that only starts with the version is another release.
            ("0.1", Err("no `## 0.1` section")),
            ("0.3.0", Err("no `## 0.3.0` section")),
            ("0.1.0-rc.1", Err("`## 0.1.0-rc.1` section is empty")),
        ];
        for (version, expected) in cases {
            let got = section(CHANGELOG, version).map_err(|error| error.to_string());
            match expected {
                Ok(text) => assert_eq!(got.as_deref(), Ok(text), "{version}"),
                Err(words) => assert!(
                    got.as_ref().is_err_and(|error| error.contains(words)),
                    "{version}: {got:?}"
                ),
            }
        }
    }

    #[test]
    fn the_workspace_version_has_its_section() {
        let changelog =
            std::fs::read_to_string(crate::workspace_root().join("CHANGELOG.md")).unwrap();
        section(&changelog, env!("CARGO_PKG_VERSION")).unwrap();
    }
}
