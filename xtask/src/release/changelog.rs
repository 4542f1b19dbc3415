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

/// A release the CHANGELOG records as published: its version and the commit it was released
/// from, as its heading names it: `## 0.1.0 (commit <40 hex digits>)`. A clone may lack the
/// forge's `v<version>` tags (CI checks out commits), so the record that travels with every
/// clone is this file; the heading is written when the next version's section is opened.
#[derive(Debug, PartialEq, Eq)]
pub struct Released {
    pub version: String,
    pub commit: String,
}

/// The newest release before `current` (by `major.minor.patch`, pre-releases aside). Fails if
/// that release's heading names no commit: nothing could build it again.
pub fn previous(changelog: &str, current: &str) -> Result<Option<Released>> {
    let Some(current_numbers) = numbers(current) else {
        bail!("{current} is no major.minor.patch version");
    };
    let newest = changelog
        .lines()
        .filter_map(|line| line.strip_prefix("## "))
        .filter_map(|heading| {
            let (version, rest) = heading
                .trim()
                .split_once(char::is_whitespace)
                .unwrap_or((heading.trim(), ""));
            let version_numbers = numbers(version)?;
            (version_numbers < current_numbers).then_some((version_numbers, version, rest))
        })
        .max_by_key(|(version_numbers, _, _)| *version_numbers);
    let Some((_, version, rest)) = newest else {
        return Ok(None);
    };
    let commit = rest
        .trim()
        .strip_prefix("(commit ")
        .and_then(|rest| rest.strip_suffix(')'))
        .filter(|commit| commit.len() == 40 && commit.bytes().all(|b| b.is_ascii_hexdigit()));
    match commit {
        Some(commit) => Ok(Some(Released {
            version: version.to_string(),
            commit: commit.to_ascii_lowercase(),
        })),
        None => bail!(
            "CHANGELOG.md's `## {version}` heading names no commit: write the commit {version} \
             was released from as `## {version} (commit <40 hex digits>)`"
        ),
    }
}

/// `major.minor.patch` of a release version; none for a pre-release or anything else.
fn numbers(version: &str) -> Option<[u64; 3]> {
    let parts: Vec<u64> = version
        .split('.')
        .map(|part| part.parse().ok())
        .collect::<Option<_>>()?;
    parts.try_into().ok()
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
    fn the_previous_release_is_the_newest_version_before_the_current_one_with_its_commit() {
        let commit = "a5245a2b355bc252844091d9e8671d32d2c9bfbd";
        let changelog = format!(
            "# Changelog\n\n## 0.11.0\n\nnext\n\n## 0.10.0 (commit {commit})\n\nten\n\n\
             ## 0.2.0 (commit {})\n\ntwo\n\n## 0.2.0-rc.1\n\nrc\n\n## 0.1.0\n\nfirst\n",
            "b".repeat(40)
        );
        let released = |version: &str, commit: &str| {
            Some(Released {
                version: version.into(),
                commit: commit.into(),
            })
        };
        // Numbers, not text: 0.10.0 is after 0.2.0.
        assert_eq!(
            previous(&changelog, "0.11.0").unwrap(),
            released("0.10.0", commit)
        );
        assert_eq!(
            previous(&changelog, "0.10.0").unwrap(),
            released("0.2.0", &"b".repeat(40))
        );
        assert_eq!(previous(&changelog, "0.1.0").unwrap(), None);
        // A release nothing can build again is an error, not a skipped upgrade.
        let error = previous(&changelog, "0.2.0").unwrap_err().to_string();
        assert!(
            error.contains("`## 0.1.0` heading names no commit"),
            "{error}"
        );
    }

    #[test]
    fn the_workspace_version_has_its_section() {
        let changelog =
            std::fs::read_to_string(evictkit_harness::workspace_root().join("CHANGELOG.md"))
                .unwrap();
        section(&changelog, env!("CARGO_PKG_VERSION")).unwrap();
    }
}
