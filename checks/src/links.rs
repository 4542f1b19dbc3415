//! `cargo xtask check-links`: every relative link in the documentation (README.md, docs/**/*.md,
//! charts/**/README.md) points at a file or directory that exists, and every `#anchor` at a
//! heading (or an `id`/`name` anchor) of the Markdown file it names, as GitHub renders it; and
//! no comment or doc cites what a reader of the repository cannot follow ([`citations`]: a file
//! outside it, a number of our issue tracker). Links to other sites are not followed: the check
//! runs offline, in a second.

use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::path::{Component, Path, PathBuf};

use anyhow::{Context, Result, bail};

mod citations;
mod prose;

use prose::prose_lines;

pub fn check() -> Result<()> {
    let root = evictkit_harness::workspace_root();
    let files = documentation(&root)?;
    let (links, dead) = dead_links(&root, &files)?;
    let (read, unfollowable) = citations::check(&root)?;
    let mut failures = Vec::new();
    if !dead.is_empty() {
        failures.push(format!("{} dead links in the documentation:", dead.len()));
        failures.extend(dead.iter().map(|dead| format!("  {dead}")));
    }
    if !unfollowable.is_empty() {
        failures.push(format!(
            "{} citations a reader of the repository cannot follow (a file outside it, a number \
             of our issue tracker): cite docs/ or give the reason",
            unfollowable.len()
        ));
        failures.extend(unfollowable.iter().map(|cited| format!("  {cited}")));
    }
    if !failures.is_empty() {
        bail!("{}", failures.join("\n"));
    }
    println!(
        "{links} relative links in {} Markdown files, none dead; no comment or doc in {read} \
         files cites what a reader cannot follow",
        files.len()
    );
    Ok(())
}

/// README.md, docs/**/*.md and charts/**/README.md, relative to `root`, sorted.
fn documentation(root: &Path) -> Result<Vec<PathBuf>> {
    let mut files = vec![PathBuf::from("README.md")];
    markdown_under(root, Path::new("docs"), &mut files, &|_| true)?;
    markdown_under(root, Path::new("charts"), &mut files, &|name| {
        name == "README.md"
    })?;
    files.sort();
    Ok(files)
}

fn markdown_under(
    root: &Path,
    dir: &Path,
    files: &mut Vec<PathBuf>,
    wanted: &dyn Fn(&str) -> bool,
) -> Result<()> {
    let Ok(entries) = fs::read_dir(root.join(dir)) else {
        return Ok(());
    };
    for entry in entries {
        let entry = entry.with_context(|| format!("reading {}", dir.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = dir.join(&name);
        if entry.file_type()?.is_dir() {
            markdown_under(root, &path, files, wanted)?;
        } else if name.ends_with(".md") && wanted(&name) {
            files.push(path);
        }
    }
    Ok(())
}

/// How many relative links `files` (relative to `root`) hold, and each dead one as
/// `file:line: target (why)`.
fn dead_links(root: &Path, files: &[PathBuf]) -> Result<(usize, Vec<String>)> {
    let mut anchors: HashMap<PathBuf, BTreeSet<String>> = HashMap::new();
    let mut dead = Vec::new();
    let mut count = 0;
    for file in files {
        let text = fs::read_to_string(root.join(file))
            .with_context(|| format!("reading {}", file.display()))?;
        for link in links(&text) {
            let Some((path, anchor)) = relative(&link.target) else {
                continue;
            };
            count += 1;
            let target = if path.is_empty() {
                file.clone()
            } else {
                let dir = file.parent().unwrap_or(Path::new(""));
                match normalise(&dir.join(path)) {
                    Some(target) => target,
                    None => {
                        dead.push(dead_link(file, &link, "outside the repository"));
                        continue;
                    }
                }
            };
            if !root.join(&target).exists() {
                dead.push(dead_link(file, &link, "no such file"));
                continue;
            }
            let Some(anchor) = anchor else { continue };
            if target.extension().is_none_or(|ext| ext != "md") {
                continue;
            }
            if !anchors.contains_key(&target) {
                let text = fs::read_to_string(root.join(&target))
                    .with_context(|| format!("reading {}", target.display()))?;
                anchors.insert(target.clone(), anchors_of(&text));
            }
            if !anchors[&target].contains(anchor) {
                let why = format!("no heading #{anchor} in {}", target.display());
                dead.push(dead_link(file, &link, &why));
            }
        }
    }
    Ok((count, dead))
}

fn dead_link(file: &Path, link: &Link, why: &str) -> String {
    format!("{}:{}: {} ({why})", file.display(), link.line, link.target)
}

/// A link's path and anchor when it points into the repository: not a URL with a scheme, not
/// an absolute path (GitHub resolves those against the site, not the repository).
fn relative(target: &str) -> Option<(&str, Option<&str>)> {
    let scheme = target
        .split_once(':')
        .is_some_and(|(scheme, _)| !scheme.is_empty() && !scheme.contains(['/', '#', '.']));
    if scheme || target.starts_with('/') || target.is_empty() {
        return None;
    }
    let (path, anchor) = match target.split_once('#') {
        Some((path, anchor)) => (path, Some(anchor)),
        None => (target, None),
    };
    let path = path.split_once('?').map_or(path, |(path, _)| path);
    Some((path, anchor.filter(|anchor| !anchor.is_empty())))
}

/// `path` with `.` and `..` resolved; `None` when it climbs above the root.
fn normalise(path: &Path) -> Option<PathBuf> {
    let mut normal = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                if !normal.pop() {
                    return None;
                }
            }
            Component::Normal(part) => normal.push(part),
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(normal)
}

#[derive(Debug, PartialEq)]
struct Link {
    line: usize,
    target: String,
}

/// The targets of the inline links and images (`[text](target "title")`) and of the reference
/// definitions (`[name]: target`) of a Markdown text, outside code blocks and code spans.
fn links(markdown: &str) -> Vec<Link> {
    let mut links = Vec::new();
    for (line, text) in prose_lines(markdown) {
        let text = without_code_spans(text);
        if let Some(target) = reference_definition(&text) {
            links.push(Link {
                line,
                target: target.to_owned(),
            });
            continue;
        }
        let mut rest = text.as_str();
        while let Some(start) = rest.find("](") {
            let after = &rest[start + 2..];
            let mut depth = 0usize;
            let end = after
                .char_indices()
                .find(|&(_, c)| match c {
                    '(' => {
                        depth += 1;
                        false
                    }
                    ')' if depth == 0 => true,
                    ')' => {
                        depth -= 1;
                        false
                    }
                    _ => false,
                })
                .map_or(after.len(), |(i, _)| i);
            let inside = after[..end].trim();
            let target = match inside.strip_prefix('<') {
                Some(angled) => angled.split_once('>').map_or(angled, |(target, _)| target),
                None => inside.split_whitespace().next().unwrap_or_default(),
            };
            if !target.is_empty() {
                links.push(Link {
                    line,
                    target: target.to_owned(),
                });
            }
            rest = &after[end..];
        }
    }
    links
}

/// `[name]: target` at the start of a line (up to three spaces in).
fn reference_definition(line: &str) -> Option<&str> {
    let trimmed = line.strip_prefix("   ").or(line.strip_prefix("  "));
    let trimmed = trimmed.or(line.strip_prefix(' ')).unwrap_or(line);
    let rest = trimmed.strip_prefix('[')?;
    let (label, after) = rest.split_once("]:")?;
    if label.is_empty() || label.starts_with('^') {
        return None;
    }
    after.split_whitespace().next()
}

/// The line with its code spans (`` `...` ``, any number of backticks) taken out.
fn without_code_spans(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(start) = rest.find('`') {
        out.push_str(&rest[..start]);
        let ticks = rest[start..].chars().take_while(|&c| c == '`').count();
        let after = &rest[start + ticks..];
        let closing = "`".repeat(ticks);
        match after.find(&closing) {
            Some(end) => rest = &after[end + ticks..],
            None => {
                out.push_str(&rest[start..]);
                return out;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The anchors GitHub gives a Markdown file: one per ATX heading (see [`slug`]; a repeated one
/// gets `-1`, `-2`, ...), plus explicit `id="..."` and `name="..."` attributes.
pub(crate) fn anchors_of(markdown: &str) -> BTreeSet<String> {
    let mut anchors = BTreeSet::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (_, line) in prose_lines(markdown) {
        for attribute in [" id=\"", " name=\""] {
            let mut rest = line;
            while let Some(start) = rest.find(attribute) {
                let after = &rest[start + attribute.len()..];
                let Some((value, tail)) = after.split_once('"') else {
                    break;
                };
                anchors.insert(value.to_owned());
                rest = tail;
            }
        }
        let Some(heading) = heading(line) else {
            continue;
        };
        let base = slug(heading);
        let repeats = seen.entry(base.clone()).or_default();
        let anchor = match *repeats {
            0 => base,
            n => format!("{base}-{n}"),
        };
        *repeats += 1;
        anchors.insert(anchor);
    }
    anchors
}

/// The text of an ATX heading line (`## Text ##`), up to three spaces in.
fn heading(line: &str) -> Option<&str> {
    let trimmed = line.trim_start();
    if line.len() - trimmed.len() > 3 {
        return None;
    }
    let level = trimmed.chars().take_while(|&c| c == '#').count();
    if !(1..=6).contains(&level) {
        return None;
    }
    let text = &trimmed[level..];
    if !(text.is_empty() || text.starts_with([' ', '\t'])) {
        return None;
    }
    let text = text.trim();
    // A closing sequence of #s is no part of the text when a space comes before it.
    let closed = text.trim_end_matches('#');
    let text = if closed.is_empty() || closed.ends_with([' ', '\t']) {
        closed.trim_end()
    } else {
        text
    };
    Some(text)
}

/// GitHub's anchor of a heading: the text as rendered (link targets, code backticks and HTML
/// tags gone), lower-cased, every character but letters, digits, `-`, `_` and spaces dropped,
/// then each space a `-`.
fn slug(heading: &str) -> String {
    let mut rendered = String::new();
    let mut rest = heading;
    // [text](target) -> text
    while let Some(start) = rest.find('[') {
        rendered.push_str(&rest[..start]);
        let after = &rest[start + 1..];
        match after.split_once("](") {
            Some((text, tail)) if !text.contains(']') => {
                rendered.push_str(text);
                rest = tail.split_once(')').map_or("", |(_, tail)| tail);
            }
            _ => {
                rendered.push('[');
                rest = after;
            }
        }
    }
    rendered.push_str(rest);
    let mut text = String::new();
    let mut in_tag = false;
    for c in rendered.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => in_tag = false,
            _ if in_tag => {}
            c => text.push(c),
        }
    }
    text.to_lowercase()
        .chars()
        .filter(|&c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anchors_are_githubs() {
        // (heading line, anchor): cases checked against pages GitHub renders.
        let cases = [
            ("# evictkit", "evictkit"),
            (
                "### affinity-evictor: what to watch",
                "affinity-evictor-what-to-watch",
            ),
            (
                "## Kubernetes versions and APIs",
                "kubernetes-versions-and-apis",
            ),
            ("## `kubectl evictkit drain`", "kubectl-evictkit-drain"),
            (
                "## Metrics, alerts and the dashboard",
                "metrics-alerts-and-the-dashboard",
            ),
            ("## What's new (v0.2)?", "whats-new-v02"),
            ("## A  double space", "a--double-space"),
            ("## See [the chart](charts/README.md) ##", "see-the-chart"),
            ("## snake_case stays", "snake_case-stays"),
            ("## Ünïcode", "ünïcode"),
        ];
        for (line, anchor) in cases {
            assert_eq!(slug(heading(line).unwrap()), anchor, "{line}");
        }
        assert_eq!(heading("#hashtag"), None);
        assert_eq!(heading("    # indented code"), None);
    }

    #[test]
    fn repeated_headings_and_explicit_anchors() {
        let anchors = anchors_of(
            "# Metrics\n## Metrics\n```\n# not a heading\n```\n## Metrics\n<a id=\"here\"></a>\n",
        );
        let wanted = ["here", "metrics", "metrics-1", "metrics-2"];
        assert_eq!(anchors, wanted.map(str::to_owned).into());
    }

    #[test]
    fn links_outside_code_are_found() {
        let text = "see [a](docs/a.md#x) and ![img](p.png \"t\")\n\
                    ```sh\n[not](a-link.md)\n```\n\
                    `[code](span.md)` [b](<with space.md>) [c](x.md(1))\n\
                    [ref]: docs/ref.md\n";
        let targets: Vec<(usize, String)> = links(text)
            .into_iter()
            .map(|link| (link.line, link.target))
            .collect();
        let wanted = [
            (1, "docs/a.md#x"),
            (1, "p.png"),
            (5, "with space.md"),
            (5, "x.md(1)"),
            (6, "docs/ref.md"),
        ];
        assert_eq!(targets, wanted.map(|(line, t)| (line, t.to_owned())));
    }

    #[test]
    fn only_links_into_the_repository_are_checked() {
        assert_eq!(relative("https://example.com/a.md"), None);
        assert_eq!(relative("mailto:someone@example.com"), None);
        assert_eq!(relative("/absolute"), None);
        assert_eq!(relative("docs/a.md#b"), Some(("docs/a.md", Some("b"))));
        assert_eq!(relative("#b"), Some(("", Some("b"))));
        assert_eq!(relative("a.md?plain=1"), Some(("a.md", None)));
    }

    /// A planted dead link of each kind fails the check; the live ones pass.
    #[test]
    fn dead_links_and_anchors_are_reported() {
        let root = std::env::temp_dir().join(format!("xtask-links-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(root.join("docs/operate")).unwrap();
        fs::create_dir_all(root.join("charts/one")).unwrap();
        let write = |path: &str, text: &str| fs::write(root.join(path), text).unwrap();
        write(
            "README.md",
            "# Top\n## Install it\n[ok](docs/operate/a.md#what-to-watch) [ok](#install-it) \
             [ok](charts/one/) [ok](https://example.com/gone)\n\
             [dead](docs/gone.md) [dead](docs/operate/a.md#metrics) [dead](#install)\n",
        );
        write(
            "docs/operate/a.md",
            "# A\n## What to watch\n[ok](../../README.md#top) [dead](../../../outside.md)\n",
        );
        write("charts/one/README.md", "[dead](../two/README.md)\n");
        let files = documentation(&root).unwrap();
        let (count, dead) = dead_links(&root, &files).unwrap();
        fs::remove_dir_all(&root).unwrap();
        assert_eq!(count, 9, "{dead:?}");
        assert_eq!(
            dead,
            [
                "README.md:4: docs/gone.md (no such file)",
                "README.md:4: docs/operate/a.md#metrics (no heading #metrics in docs/operate/a.md)",
                "README.md:4: #install (no heading #install in README.md)",
                "charts/one/README.md:1: ../two/README.md (no such file)",
                "docs/operate/a.md:3: ../../../outside.md (outside the repository)",
            ]
        );
    }
}
