//! No module of a crate imports one that imports it back, directly or through others, and no
//! top-level module (a group, with everything under it) does either (docs/architecture.md,
//! layers): a reader can learn the crate bottom-up, a group at a time. An import is any path
//! the module's code names through `crate::`, `super::`, `self::` or one of its child modules,
//! in `use` or inline, test code included; comments and string literals are not code.
//! Declaring a child (`mod child;`) imports nothing; a parent that also uses its child while the
//! child uses the parent is a cycle: what both need goes in a module of its own.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

use anyhow::{Context, Result, bail};

/// Which modules each module imports (itself never), by path from the crate root (`""` is the
/// root, `"serving::webhook"` a module).
#[derive(Debug, Default)]
pub struct Graph {
    pub imports: BTreeMap<String, BTreeSet<String>>,
}

/// The workspace's members as Cargo.toml lists them: a directory with `src/` is a crate, any
/// other holds one crate per subdirectory (fuzz/ is a workspace of its own).
const MEMBERS: [&str; 6] = ["crates", "bins", "xtask", "checks", "lab", "tests/e2e"];

/// Fails naming every crate of the workspace at `root` whose modules import each other; else
/// says, per crate, how many modules and imports it read.
pub fn check_workspace(root: &Path) -> Result<String> {
    let mut sources = Vec::new();
    for dir in MEMBERS.iter().map(|d| root.join(d)) {
        if dir.join("src").is_dir() {
            sources.push(dir.join("src"));
            continue;
        }
        let mut members: Vec<_> = fs::read_dir(&dir)
            .with_context(|| format!("reading {}", dir.display()))?
            .map(|entry| entry.map(|e| e.path().join("src")))
            .collect::<Result<_, _>>()
            .with_context(|| format!("reading {}", dir.display()))?;
        members.sort();
        sources.extend(members.into_iter().filter(|src| src.is_dir()));
    }
    let (mut passed, mut failed) = (Vec::new(), Vec::new());
    for src in &sources {
        match check(src) {
            Ok(summary) => passed.push(summary),
            Err(error) => failed.push(error.to_string()),
        }
    }
    if !failed.is_empty() {
        bail!("{}", failed.join("\n"));
    }
    Ok(passed.join("\n"))
}

/// Fails when modules of the crate whose sources are in `src` import each other; else says how
/// many modules and imports it read.
pub fn check(src: &Path) -> Result<String> {
    let graph = Graph::of_crate(src)?;
    let groups = graph.top_level();
    let described: Vec<String> = [&graph, &groups]
        .into_iter()
        .flat_map(|g| g.cycles().into_iter().map(move |c| g.describe(&c)))
        .collect();
    if !described.is_empty() {
        bail!(
            "modules of {} import each other (move what both need to a module of its own):\n  {}",
            src.display(),
            described.join("\n  ")
        );
    }
    Ok(format!(
        "{}: {} modules, {} imports, no cycle among them or among the {} top-level modules",
        src.display(),
        graph.imports.len(),
        graph.imports.values().map(BTreeSet::len).sum::<usize>(),
        groups.imports.len(),
    ))
}

impl Graph {
    /// The modules of the crate whose sources are in `src`: its library (`lib.rs` and every
    /// `.rs` under it; a binary's `main.rs` beside it is another crate, one that only calls the
    /// library), or its binary where it has no library (`main.rs` as the root).
    pub fn of_crate(src: &Path) -> Result<Self> {
        let root = if src.join("lib.rs").is_file() {
            "lib"
        } else {
            "main"
        };
        let mut sources = Vec::new();
        read_modules(src, root, &mut Vec::new(), &mut sources)?;
        Ok(Self::from_sources(&sources))
    }

    /// The graph of `sources`: each module's path and its file's text.
    pub fn from_sources(sources: &[(String, String)]) -> Self {
        let known: BTreeSet<&str> = sources.iter().map(|(path, _)| path.as_str()).collect();
        let imports = sources
            .iter()
            .map(|(path, text)| (path.clone(), imports_of(path, text, &known)))
            .collect();
        Self { imports }
    }

    /// The graph of the top-level modules, each standing for everything under it (the root,
    /// `""`, for itself).
    pub fn top_level(&self) -> Self {
        let top = |module: &str| module.split("::").next().unwrap_or_default().to_owned();
        let mut imports: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (from, to) in &self.imports {
            let group = top(from);
            let targets = imports.entry(group.clone()).or_default();
            targets.extend(to.iter().map(|t| top(t)).filter(|t| *t != group));
        }
        Self { imports }
    }

    /// The groups of modules that import each other (strongly connected, more than one
    /// module), each sorted.
    pub fn cycles(&self) -> Vec<Vec<String>> {
        let mut tarjan = Tarjan::default();
        for module in self.imports.keys() {
            if !tarjan.index.contains_key(module.as_str()) {
                tarjan.visit(module, self);
            }
        }
        tarjan.cycles
    }

    /// `members` with the imports among them, e.g. `a, b (a -> b, b -> a)`.
    fn describe(&self, members: &[String]) -> String {
        let inside: Vec<String> = members
            .iter()
            .flat_map(|from| {
                self.imports[from]
                    .iter()
                    .filter(|to| members.contains(to))
                    .map(move |to| format!("{} -> {}", name(from), name(to)))
            })
            .collect();
        let names: Vec<&str> = members.iter().map(|m| name(m)).collect();
        format!("{} ({})", names.join(", "), inside.join(", "))
    }
}

fn name(module: &str) -> &str {
    if module.is_empty() { "<root>" } else { module }
}

fn read_modules(
    dir: &Path,
    root: &str,
    parents: &mut Vec<String>,
    sources: &mut Vec<(String, String)>,
) -> Result<()> {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .collect::<Result<_, _>>()
        .with_context(|| format!("reading {}", dir.display()))?;
    entries.sort_by_key(|entry| entry.file_name());
    for entry in entries {
        let file = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        if entry.file_type()?.is_dir() {
            parents.push(file);
            read_modules(&path, root, parents, sources)?;
            parents.pop();
            continue;
        }
        let Some(stem) = file.strip_suffix(".rs") else {
            continue;
        };
        let crate_root = matches!(stem, "lib" | "main");
        if parents.is_empty() && crate_root && stem != root {
            continue;
        }
        let mut module = parents.clone();
        if !(stem == "mod" || (parents.is_empty() && stem == root)) {
            module.push(stem.to_owned());
        }
        let text =
            fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        sources.push((module.join("::"), text));
    }
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token<'a> {
    Ident(&'a str),
    PathSep,
    Open,
    Close,
    Semi,
    Comma,
    Star,
    Other,
}

/// The tokens of Rust source that matter for paths; comments, string and character literals
/// are skipped whole (a lifetime is skipped as its quote).
fn tokens(source: &str) -> Vec<Token<'_>> {
    let bytes = source.as_bytes();
    let at = |i: usize| bytes.get(i).copied().unwrap_or(0);
    let ident_char = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'/' if at(i + 1) == b'/' => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if at(i + 1) == b'*' => {
                let mut depth = 0;
                while i < bytes.len() {
                    if bytes[i] == b'/' && at(i + 1) == b'*' {
                        depth += 1;
                        i += 2;
                    } else if bytes[i] == b'*' && at(i + 1) == b'/' {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        i += 1;
                    }
                }
            }
            b'"' => i = after_string(bytes, i + 1),
            b'\'' => {
                i += 1;
                if at(i) == b'\\' {
                    i += 2;
                    while i < bytes.len() && bytes[i] != b'\'' {
                        i += 1;
                    }
                    i += 1;
                } else {
                    let width = source[i..].chars().next().map_or(1, char::len_utf8);
                    if at(i + width) == b'\'' {
                        i += width + 1;
                    }
                }
            }
            b if b.is_ascii_alphabetic() || b == b'_' => {
                let start = i;
                while i < bytes.len() && ident_char(bytes[i]) {
                    i += 1;
                }
                let word = &source[start..i];
                if matches!(word, "r" | "br") && matches!(at(i), b'"' | b'#') {
                    let hashes = bytes[i..].iter().take_while(|&&b| b == b'#').count();
                    if at(i + hashes) == b'"' {
                        i = after_raw_string(bytes, i + hashes + 1, hashes);
                        continue;
                    }
                    // A raw identifier (`r#type`): the word after the hash.
                    i += hashes;
                    let start = i;
                    while i < bytes.len() && ident_char(bytes[i]) {
                        i += 1;
                    }
                    out.push(Token::Ident(&source[start..i]));
                    continue;
                }
                out.push(Token::Ident(word));
            }
            b':' if at(i + 1) == b':' => {
                out.push(Token::PathSep);
                i += 2;
            }
            b if b.is_ascii_whitespace() => i += 1,
            b => {
                out.push(match b {
                    b'{' => Token::Open,
                    b'}' => Token::Close,
                    b';' => Token::Semi,
                    b',' => Token::Comma,
                    b'*' => Token::Star,
                    _ => Token::Other,
                });
                i += 1;
            }
        }
    }
    out
}

fn after_string(bytes: &[u8], mut i: usize) -> usize {
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'"' => return i + 1,
            _ => i += 1,
        }
    }
    i
}

fn after_raw_string(bytes: &[u8], mut i: usize, hashes: usize) -> usize {
    while i < bytes.len() {
        if bytes[i] == b'"' && bytes[i + 1..].iter().take(hashes).all(|&b| b == b'#') {
            let end = i + 1 + hashes;
            if end <= bytes.len() {
                return end;
            }
        }
        i += 1;
    }
    i
}

/// The modules `module` (whose file holds `text`) imports, among `known`.
fn imports_of(module: &str, text: &str, known: &BTreeSet<&str>) -> BTreeSet<String> {
    let tokens = tokens(text);
    let mut reader = Reader {
        module,
        base: if module.is_empty() {
            Vec::new()
        } else {
            module.split("::").collect()
        },
        inline: Vec::new(),
        known,
        imports: BTreeSet::new(),
    };
    let mut depth = 0usize;
    let mut i = 0;
    while i < tokens.len() {
        match tokens[i] {
            Token::Ident("mod") => {
                if let (Some(Token::Ident(name)), Some(Token::Open)) =
                    (tokens.get(i + 1), tokens.get(i + 2))
                {
                    depth += 1;
                    reader.inline.push((name, depth));
                    i += 3;
                    continue;
                }
            }
            Token::Open => depth += 1,
            Token::Close => {
                while reader.inline.last().is_some_and(|&(_, d)| d == depth) {
                    reader.inline.pop();
                }
                depth = depth.saturating_sub(1);
            }
            Token::Ident("use") => {
                i = reader.use_tree(&tokens, i + 1, &[]);
                continue;
            }
            Token::Ident(first)
                if tokens.get(i + 1) == Some(&Token::PathSep)
                    && (i == 0 || tokens[i - 1] != Token::PathSep) =>
            {
                let mut path = vec![first];
                let mut j = i + 1;
                while let (Some(Token::PathSep), Some(Token::Ident(next))) =
                    (tokens.get(j), tokens.get(j + 1))
                {
                    path.push(next);
                    j += 2;
                }
                reader.resolve(&path);
                i = j;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    reader.imports
}

struct Reader<'a, 'k> {
    module: &'a str,
    base: Vec<&'a str>,
    /// Inline modules open here (`mod tests { ... }`) and the brace depth each closes at.
    inline: Vec<(&'a str, usize)>,
    known: &'k BTreeSet<&'k str>,
    imports: BTreeSet<String>,
}

impl<'a> Reader<'a, '_> {
    /// Reads the use tree starting at `i` under `prefix`; returns the index after it.
    fn use_tree(&mut self, tokens: &[Token<'a>], mut i: usize, prefix: &[&'a str]) -> usize {
        let mut path = prefix.to_vec();
        while let Some(&token) = tokens.get(i) {
            match token {
                Token::Open => {
                    i += 1;
                    while tokens.get(i).is_some_and(|t| *t != Token::Close) {
                        i = self.use_tree(tokens, i, &path);
                        if tokens.get(i) == Some(&Token::Comma) {
                            i += 1;
                        }
                    }
                    return i + 1;
                }
                Token::Star => {
                    self.resolve(&path);
                    return i + 1;
                }
                Token::Comma | Token::Close | Token::Semi => {
                    if path.last() == Some(&"self") {
                        path.pop();
                    }
                    self.resolve(&path);
                    return i;
                }
                Token::Ident("as") => i += 2,
                Token::Ident(segment) => {
                    path.push(segment);
                    i += 1;
                }
                _ => i += 1,
            }
        }
        i
    }

    /// Records the module `path` (named where the reader is) lies in, if it is one of the
    /// crate's and not this one.
    fn resolve(&mut self, path: &[&'a str]) {
        let Some((&head, rest)) = path.split_first() else {
            return;
        };
        let mut here: Vec<&str> = self.base.clone();
        here.extend(self.inline.iter().map(|&(name, _)| name));
        let mut rest = rest;
        let mut full = match head {
            "crate" => Vec::new(),
            "self" => here,
            "super" => {
                here.pop();
                while let Some((&"super", more)) = rest.split_first() {
                    here.pop();
                    rest = more;
                }
                here
            }
            child => {
                here.push(child);
                if !self.known.contains(here.join("::").as_str()) {
                    return;
                }
                here
            }
        };
        full.extend_from_slice(rest);
        for length in (0..=full.len()).rev() {
            let candidate = full[..length].join("::");
            if self.known.contains(candidate.as_str()) {
                if candidate != self.module {
                    self.imports.insert(candidate);
                }
                return;
            }
        }
    }
}

#[derive(Default)]
struct Tarjan<'g> {
    next: usize,
    index: BTreeMap<&'g str, usize>,
    low: BTreeMap<&'g str, usize>,
    stack: Vec<&'g str>,
    on_stack: BTreeSet<&'g str>,
    cycles: Vec<Vec<String>>,
}

impl<'g> Tarjan<'g> {
    fn visit(&mut self, module: &'g str, graph: &'g Graph) {
        self.index.insert(module, self.next);
        self.low.insert(module, self.next);
        self.next += 1;
        self.stack.push(module);
        self.on_stack.insert(module);
        for to in graph.imports.get(module).into_iter().flatten() {
            if !self.index.contains_key(to.as_str()) {
                self.visit(to, graph);
                let low = self.low[module].min(self.low[to.as_str()]);
                self.low.insert(module, low);
            } else if self.on_stack.contains(to.as_str()) {
                let low = self.low[module].min(self.index[to.as_str()]);
                self.low.insert(module, low);
            }
        }
        if self.low[module] == self.index[module] {
            let mut members = Vec::new();
            while let Some(member) = self.stack.pop() {
                self.on_stack.remove(member);
                members.push(member.to_owned());
                if member == module {
                    break;
                }
            }
            if members.len() > 1 {
                members.sort();
                self.cycles.push(members);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(sources: &[(&str, &str)]) -> Graph {
        let sources: Vec<(String, String)> = sources
            .iter()
            .map(|(path, text)| (path.to_string(), text.to_string()))
            .collect();
        Graph::from_sources(&sources)
    }

    /// A case's name, its modules (path, source) and the cycles expected among them.
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a [&'a [&'a str]]);

    #[test]
    fn modules_that_import_each_other_are_a_cycle() {
        let lib = "pub mod a;\npub mod b;\npub mod c;\npub mod p;";
        #[rustfmt::skip]
        let cases: [Case; 9] = [
            ("one way", &[("", lib), ("a", "use crate::b::B;"), ("b", "pub struct B;")], &[]),
            ("both ways", &[("", lib), ("a", "use crate::b::B;"), ("b", "use crate::a::A;")], &[&["a", "b"]]),
            ("through a third", &[("", lib), ("a", "use crate::b::B;"), ("b", "fn f() { crate::c::f() }"), ("c", "use crate::a::{self, A};")], &[&["a", "b", "c"]]),
            ("in a test", &[("", lib), ("a", "use crate::b::B;"), ("b", "#[cfg(test)]\nmod tests {\n    use super::*;\n    use crate::a::A;\n}")], &[&["a", "b"]]),
            ("in a comment or a string", &[("", lib), ("a", "use crate::b::B;"), ("b", "// crate::a::A\n/* crate::a */\nconst S: &str = \"crate::a::A\";\nconst R: &str = r#\"crate::a\"#;\nconst C: char = '\"';\nfn f<'x>(_: &'x str) {}")], &[]),
            ("a child naming its parent", &[("", lib), ("p", "mod q;\npub struct E;"), ("p::q", "use super::E;")], &[]),
            ("a parent importing from its child, which imports the parent", &[("", lib), ("p", "mod q;\npub use q::Q;\npub struct E;"), ("p::q", "use super::E;\npub struct Q;")], &[&["p", "p::q"]]),
            ("a grandchild's test reaching a sibling of its parent", &[("", lib), ("p", "mod q;\nmod r;"), ("p::q", "mod tests { use super::super::r::f; }"), ("p::r", "use crate::p::q::Q;")], &[&["p::q", "p::r"]]),
            ("a nested use tree", &[("", lib), ("a", "use crate::{b::{self, B}, c as see};"), ("c", "use crate::a;"), ("b", "")], &[&["a", "c"]]),
        ];
        for (case, sources, want) in cases {
            let cycles = graph(sources).cycles();
            let want: Vec<Vec<String>> = want
                .iter()
                .map(|c| c.iter().map(|m| m.to_string()).collect())
                .collect();
            assert_eq!(cycles, want, "{case}");
        }
    }

    #[test]
    fn top_level_modules_that_import_each_other_through_their_children_are_a_cycle() {
        #[rustfmt::skip]
        let sources: &[(&str, &str)] = &[
            ("", "pub mod a;\npub mod b;\npub mod m;"),
            ("a", "pub mod x;\npub mod w;"), ("a::x", "use crate::b::y::Y;"), ("a::w", ""),
            ("b", "pub mod y;\npub mod z;"), ("b::y", ""), ("b::z", "use crate::a::w::W;"),
            ("m", "use crate::{a::x, b::z};"),
        ];
        let graph = graph(sources);
        assert_eq!(graph.cycles(), Vec::<Vec<String>>::new());
        let groups = graph.top_level();
        assert_eq!(groups.cycles(), [["a", "b"]]);
        assert_eq!(
            groups.describe(&groups.cycles()[0]),
            "a, b (a -> b, b -> a)"
        );
    }

    #[test]
    fn a_cycle_is_told_with_its_imports() {
        let graph = graph(&[("a", "use crate::b::B;"), ("b", "use crate::a::A;")]);
        assert_eq!(graph.describe(&graph.cycles()[0]), "a, b (a -> b, b -> a)");
    }
}
