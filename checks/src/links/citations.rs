//! The repository explains itself: its comments and docs cite its own files and give reasons,
//! never a file outside it (a shared folder, a design note) or a number of our issue tracker,
//! which a reader of a clone cannot follow. Another project's issue or PR named with the
//! project ("kubernetes PR #82090", "kubernetes/kubernetes#1234", a link to it) is a citation
//! a reader can follow, and passes.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// Words before an issue number that name no project: the number is then our tracker's.
const NO_PROJECT: &[&str] = &[
    "a", "after", "an", "and", "as", "at", "before", "by", "close", "closed", "closes", "evictkit",
    "fix", "fixed", "fixes", "for", "from", "in", "is", "its", "of", "on", "or", "our", "per",
    "resolve", "resolved", "resolves", "see", "since", "that", "the", "this", "to", "under", "was",
    "with",
];

/// What a line cites that a reader of the repository cannot follow, each as the words that
/// cite it. `markdown_names` are the names of the repository's Markdown files (`README.md`,
/// ...): a bare Markdown file name among them is ours.
pub(crate) fn unfollowable(line: &str, markdown_names: &BTreeSet<String>) -> Vec<String> {
    let tokens: Vec<&str> = line.split_whitespace().collect();
    let before = |k: usize| k.checked_sub(1).map(|j| tokens[j]);
    let mut found = Vec::new();
    let mut k = 0;
    while k < tokens.len() {
        let token = tokens[k];
        let word = trimmed(token);
        if let Some(tracker) = tracker_path(token) {
            found.push(tracker);
        } else if token.contains("://") {
            // Another site's address: its numbers are its own.
        } else if word.contains("../shared/") || word.starts_with("/work/shared/") {
            found.push(word.to_owned());
        } else if let Some(name) = foreign_markdown(token, markdown_names) {
            found.push(name.to_owned());
        } else if is_keyword(word) && tokens.get(k + 1).is_some_and(|next| number(next).is_some()) {
            if opens_aside(token) || no_project(before(k)) {
                found.push(format!("{word} {}", trimmed(tokens[k + 1])));
            }
            k += 1;
        } else if let Some(digits) = number(token).filter(|_| trimmed(token).starts_with('#'))
            && (opens_aside(token) || no_project(before(k)))
        {
            found.push(format!("#{digits}"));
        }
        k += 1;
    }
    found
}

/// A bare Markdown file name in the token (a link's text or target included) that the repository does
/// not hold.
fn foreign_markdown<'a>(token: &'a str, markdown_names: &BTreeSet<String>) -> Option<&'a str> {
    let path_char = |c: char| c.is_alphanumeric() || matches!(c, '/' | '_' | '-' | '.');
    token
        .split(|c: char| !path_char(c))
        .map(|word| word.trim_end_matches('.'))
        .find(|word| {
            let stem = word.strip_suffix(".md").unwrap_or_default();
            stem.chars().any(char::is_alphanumeric)
                && !word.contains('/')
                && !markdown_names.contains(*word)
        })
}

/// The token without the punctuation around it (a sentence's full stop included), keeping a
/// path's leading dots.
fn trimmed(token: &str) -> &str {
    let kept = |c: char| c.is_alphanumeric() || matches!(c, '/' | '_' | '-' | '#' | '.');
    token.trim_matches(|c: char| !kept(c)).trim_end_matches('.')
}

/// `issue`, `issues`, `PR`, `PRs`: a number after one is an issue's or a pull request's.
fn is_keyword(word: &str) -> bool {
    word.eq_ignore_ascii_case("issue")
        || word.eq_ignore_ascii_case("issues")
        || word == "PR"
        || word == "PRs"
}

/// The digits of a token that is a number, `#` or not, in an aside or not, with punctuation
/// after it: `42`, `#42.`, `(#42)`, `[#42](...)`.
fn number(token: &str) -> Option<&str> {
    let rest = token.trim_start_matches(['(', '[']);
    let rest = rest.strip_prefix('#').unwrap_or(rest);
    let end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    let (digits, after) = rest.split_at(end);
    let ends = after
        .chars()
        .next()
        .is_none_or(|c| !c.is_alphanumeric() && c != '_');
    (!digits.is_empty() && ends).then_some(digits)
}

/// An aside that opens with the number, `(#42)`, names no project.
fn opens_aside(token: &str) -> bool {
    token.starts_with(['(', '['])
}

/// Whether the word before a number names no project: none (the line starts there), a clause
/// ending before it (a comma, as in "the PR that would, `#<n>`,"), or one of [`NO_PROJECT`].
fn no_project(before: Option<&str>) -> bool {
    let Some(before) = before else { return true };
    if before.ends_with(['.', ',', ';']) {
        return true;
    }
    let word = trimmed(before).to_lowercase();
    let word = word.strip_suffix("'s").unwrap_or(&word);
    word.is_empty() || NO_PROJECT.contains(&word)
}

/// `evictkit/issues/<n>` or `evictkit/pull/<n>` of a path into our own tracker.
fn tracker_path(token: &str) -> Option<String> {
    ["issues/", "pull/"].into_iter().find_map(|kind| {
        let (_, after) = token.split_once(&format!("evictkit/{kind}"))?;
        let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
        (!digits.is_empty()).then(|| format!("evictkit/{kind}{digits}"))
    })
}

/// Each citation a reader cannot follow in the comments and docs of the files git tracks
/// under `root`, as `file:line: cited`; and how many files were read.
pub(crate) fn check(root: &Path) -> Result<(usize, Vec<String>)> {
    let listed = Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(root)
        .output()
        .with_context(|| format!("running git ls-files in {}", root.display()))?;
    if !listed.status.success() {
        bail!(
            "git ls-files in {} failed: {}",
            root.display(),
            String::from_utf8_lossy(&listed.stderr)
        );
    }
    let files: Vec<PathBuf> = String::from_utf8(listed.stdout)?
        .split('\0')
        .filter(|path| !path.is_empty())
        .map(PathBuf::from)
        .collect();
    let markdown_names: BTreeSet<String> = files
        .iter()
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .filter_map(|path| Some(path.file_name()?.to_string_lossy().into_owned()))
        .collect();
    let mut read = 0;
    let mut found = Vec::new();
    for file in &files {
        let Some(kind) = Kind::of(file) else { continue };
        // A file git tracks may be deleted in the working tree.
        let Ok(text) = fs::read_to_string(root.join(file)) else {
            continue;
        };
        read += 1;
        for (line, words) in kind.commentary(&text) {
            for cited in unfollowable(words, &markdown_names) {
                found.push(format!("{}:{line}: {cited}", file.display()));
            }
        }
    }
    Ok((read, found))
}

/// Where a file's comments and docs are.
#[derive(Clone, Copy)]
enum Kind {
    /// All of it but fenced code (a transcript, a command).
    Markdown,
    /// `//`, `///` and `//!` comments.
    Rust,
    /// Lines that are `#` comments: shell, TOML, YAML, Dockerfile.
    Hash,
}

impl Kind {
    fn of(path: &Path) -> Option<Self> {
        let name = path.file_name()?.to_str()?;
        match path.extension().and_then(|ext| ext.to_str()) {
            Some("md") => Some(Self::Markdown),
            Some("rs") => Some(Self::Rust),
            Some("sh" | "toml" | "yaml" | "yml") => Some(Self::Hash),
            _ if name == "Dockerfile" => Some(Self::Hash),
            _ => None,
        }
    }

    /// The comments and docs of `text`, by line number from 1.
    fn commentary(self, text: &str) -> Vec<(usize, &str)> {
        match self {
            Self::Markdown => super::prose::prose_lines(text).collect(),
            Self::Rust => numbered(text)
                .filter_map(|(line, code)| Some((line, rust_comment(code)?)))
                .collect(),
            Self::Hash => numbered(text)
                .filter_map(|(line, code)| Some((line, code.trim_start().strip_prefix('#')?)))
                .collect(),
        }
    }
}

fn numbered(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines().enumerate().map(|(i, line)| (i + 1, line))
}

/// What follows the first `//` of a line of Rust that is not inside a string literal.
fn rust_comment(line: &str) -> Option<&str> {
    let mut in_string = false;
    let mut escaped = false;
    for (i, c) in line.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if in_string => escaped = true,
            '"' => in_string = !in_string,
            '/' if !in_string && line[i..].starts_with("//") => return Some(&line[i + 2..]),
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn citations_outside_the_repository_and_issue_numbers_are_found() {
        let ours: BTreeSet<String> = ["README.md", "CHANGELOG.md", "architecture.md"]
            .map(str::to_owned)
            .into();
        // (line, what it cites that a reader cannot follow)
        let cases: &[(&str, &[&str])] = &[
            // Files outside the repository.
            ("as DESIGN.md says", &["DESIGN.md"]),
            ("see ../shared/keps/4563.md", &["../shared/keps/4563.md"]),
            ("(from /work/shared/STYLE.md)", &["/work/shared/STYLE.md"]),
            ("the rule (STYLE.md, `Errors`)", &["STYLE.md"]),
            // Our own files.
            ("see README.md and docs/architecture.md", &[]),
            ("CHANGELOG.md records it", &[]),
            ("[architecture.md](architecture.md)", &[]),
            ("README.md, docs/**/*.md", &[]),
            ("[the design](DESIGN.md#rules)", &["DESIGN.md"]),
            ("shared/ in the chart's templates", &[]),
            // Our issue numbers, bare.
            ("fixed in issue 42", &["issue 42"]),
            ("see issue #42.", &["issue #42"]),
            ("Issue 7: the drain", &["Issue 7"]),
            ("a regression (#42)", &["#42"]),
            ("fixes #42", &["#42"]),
            ("our PR #88 moved it", &["PR #88"]),
            ("evictkit issue 3", &["issue 3"]),
            ("would, #139105, was closed", &["#139105"]),
            ("which depends on #137133", &["#137133"]),
            (
                "https://github.com/evictkit/evictkit/issues/12",
                &["evictkit/issues/12"],
            ),
            ("evictkit/evictkit/pull/9", &["evictkit/pull/9"]),
            // Another project's, named.
            ("kubernetes issue #127335", &[]),
            ("kubernetes PR #82090 made it so", &[]),
            ("(kubernetes/kubernetes PR #137133, merged)", &[]),
            ("kubernetes/kubernetes#1234", &[]),
            ("upstream's PR 137133", &[]),
            (
                "| [#137133](https://github.com/kubernetes/kubernetes/pull/137133) |",
                &[],
            ),
            (
                "https://github.com/kubernetes/kubernetes/issues/127335",
                &[],
            ),
            // Numbers that are no issue.
            ("#[test] and #![deny]", &[]),
            ("case #3 of the table", &[]),
            ("[install](#install-it)", &[]),
            ("color: #000000", &[]),
            ("the issue is 42 pods", &[]),
        ];
        for (line, cited) in cases {
            assert_eq!(
                unfollowable(line, &ours),
                cited.iter().map(|c| c.to_string()).collect::<Vec<_>>(),
                "{line}"
            );
        }
    }

    #[test]
    fn comments_and_docs_are_read_where_they_are() {
        let rust = "let url = \"https://x/#42\"; // see #42\n\
                    let s = \"a \\\" // not a comment\";\n\
                    /// doc\n";
        assert_eq!(Kind::Rust.commentary(rust), [(1, " see #42"), (3, "/ doc")]);
        let hash = "key: 1 # after a value\n  # a comment\n";
        assert_eq!(Kind::Hash.commentary(hash), [(2, " a comment")]);
        let markdown = "prose\n```\nfenced #42\n```\nmore\n";
        assert_eq!(
            Kind::Markdown.commentary(markdown),
            [(1, "prose"), (5, "more")]
        );
        assert!(Kind::of(Path::new("tests/cosign/build.sh")).is_some());
        assert!(Kind::of(Path::new("Dockerfile")).is_some());
        assert!(Kind::of(Path::new("fuzz/corpus/a.bin")).is_none());
    }
}
