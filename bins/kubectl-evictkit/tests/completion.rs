//! Shell completion as kubectl asks for it: kubectl runs `kubectl_complete-evictkit` from PATH
//! with the words after `kubectl evictkit` (the last one being completed, "" for a new word) and
//! reads a candidate a line, `value<TAB>description`, then Cobra's `:<directive>`. The script
//! shipped in the release archive (plugins/kubectl_complete-evictkit) runs the plugin itself.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The completion script run as kubectl runs it: from PATH, beside the plugin, no cluster.
fn complete(words: &[&str]) -> Vec<String> {
    let plugin = Path::new(env!("CARGO_BIN_EXE_kubectl-evictkit"));
    let script = workspace_root().join("plugins/kubectl_complete-evictkit");
    let path = std::env::join_paths(
        std::iter::once(plugin.parent().unwrap().to_path_buf()).chain(std::env::split_paths(
            &std::env::var_os("PATH").unwrap_or_default(),
        )),
    )
    .unwrap();
    let output = Command::new(&script)
        .args(words)
        .env("PATH", path)
        // No cluster: completion must not need one.
        .env("KUBECONFIG", "/nonexistent")
        .output()
        .unwrap_or_else(|error| panic!("running {}: {error}", script.display()));
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(
        output.status.success(),
        "{words:?}: {}{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout.lines().map(str::to_owned).collect()
}

fn values(lines: &[String]) -> Vec<&str> {
    lines
        .iter()
        .filter(|line| !line.starts_with(':'))
        .map(|line| line.split('\t').next().unwrap())
        .collect()
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .unwrap()
        .to_path_buf()
}

#[test]
fn a_new_word_is_one_of_the_subcommands() {
    let lines = complete(&[""]);
    let values = values(&lines);
    for subcommand in [
        "explain",
        "drain-preview",
        "requests",
        "drain",
        "describe",
        "completion",
    ] {
        assert!(values.contains(&subcommand), "{subcommand}: {lines:?}");
    }
    // The request kubectl_complete-evictkit makes is no command a user types.
    assert!(!values.contains(&"__complete"), "{lines:?}");
    // Each subcommand with its description, and the directive last: no file names.
    assert!(
        lines.iter().any(|line| line.starts_with("explain\t")),
        "{lines:?}"
    );
    assert_eq!(lines.last().map(String::as_str), Some(":4"), "{lines:?}");
}

#[test]
fn a_prefix_keeps_only_what_it_starts() {
    assert_eq!(values(&complete(&["dr"])), ["drain-preview", "drain"]);
    assert_eq!(values(&complete(&["req"])), ["requests"]);
}

#[test]
fn flags_and_their_values_are_completed_after_a_subcommand() {
    let flags = complete(&["requests", "--"]);
    let flags = values(&flags);
    for flag in [
        "--all-namespaces",
        "--namespace",
        "--output",
        "--kubeconfig",
    ] {
        assert!(flags.contains(&flag), "{flag}: {flags:?}");
    }
    assert_eq!(
        values(&complete(&["requests", "-o", ""])),
        ["table", "json", "yaml"]
    );
    assert_eq!(values(&complete(&["completion", "fi"])), ["fish"]);
}

#[test]
fn a_directory_is_completed_without_a_space_after_it() {
    let root = workspace_root();
    let lines = complete(&["--kubeconfig", &format!("{}/plugi", root.display())]);
    assert_eq!(
        lines,
        [format!("{}/plugins/", root.display()), ":6".to_owned()]
    );
}
