//! The workspace and what is built in it: its root, the target directory the running
//! executable was built in (the components lie beside it), cargo as `cargo xtask` runs it
//! nested, and the repository's Go build scripts with their caches.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// Runs one of the repository's Go build scripts (`tests/<tool>/build.sh`, relative to the
/// workspace root, with `args`), which builds into a cache keyed by version only when the cache
/// lacks the binaries and prints the bin directory last; returns that directory. Its progress
/// goes to our stderr.
pub fn cached_build(script: &str, args: &[&str]) -> Result<PathBuf> {
    let script = workspace_root().join(script);
    let output = std::process::Command::new("bash")
        .arg(&script)
        .args(args)
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    if !output.status.success() {
        bail!(
            "{} failed ({}; see the lines above)",
            script.display(),
            output.status
        );
    }
    let stdout = String::from_utf8(output.stdout)?;
    let dir = stdout
        .lines()
        .last()
        .with_context(|| format!("{} printed no bin directory", script.display()))?;
    Ok(PathBuf::from(dir.trim()))
}

/// The workspace root (this crate is two levels below it).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crates/harness is two levels below the workspace root")
        .to_path_buf()
}

/// Where `cargo build --bins` put the components: the dev profile's directory of
/// [`target_dir`].
pub fn debug_dir() -> PathBuf {
    target_dir().join("debug")
}

/// The target directory this very executable was built in (a test lies in
/// `<target>/debug/deps/`, the lab and xtask in `<target>/debug/`). Not `CARGO_TARGET_DIR`:
/// cargo hands it to what it runs only when it was exported, it says nothing of `--target-dir`
/// or `build.target-dir`, and a relative one is relative to where cargo started, not to a
/// test's working directory. A rebuild while it runs changes nothing here: Linux then names the
/// executable `<file> (deleted)`, in the same directory.
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the running executable has a path");
    target_dir_of(&exe)
}

/// The target directory of a binary cargo built: above its profile's directory, and above
/// `deps/` for a test.
fn target_dir_of(exe: &Path) -> PathBuf {
    let mut dir = exe.parent().expect("an executable lies in a directory");
    if dir.ends_with("deps") {
        dir = dir.parent().expect("deps/ lies in a profile's directory");
    }
    dir.parent()
        .expect("a profile's directory lies in the target directory")
        .to_path_buf()
}

/// [`nested_cargo`] for the builds xtask's and the lab's runs make (the tests, the
/// demo), without incremental caches: those builds compile each workspace crate once per run,
/// and the caches only took disk (1.1 GB beside clippy's 1.6 GB of dependencies in a clean
/// clone; a CI machine ran out of space) and time to write. One setting for all of them, so one
/// run's builds do not rebuild each other's crates.
pub fn cargo() -> std::process::Command {
    let mut command = nested_cargo();
    command.env("CARGO_INCREMENTAL", "0");
    command
}

/// `cargo` in the workspace root, in the environment `cargo xtask` was typed in: without the
/// variables `cargo run` set for the binary it runs (`CARGO_PKG_NAME`, `CARGO_MANIFEST_DIR`,
/// ...). ring's build script reruns when one of them changes (it names them in
/// `rerun-if-env-changed`), and with it rustls, kube and all above them: the lab's build inside
/// `cargo xtask bench` and the next `cargo xtask` rebuilt them in turn, minutes each.
pub fn nested_cargo() -> std::process::Command {
    let mut command = std::process::Command::new("cargo");
    command.current_dir(workspace_root());
    for (name, _) in std::env::vars_os() {
        if set_by_cargo_run(&name.to_string_lossy()) {
            command.env_remove(name);
        }
    }
    command
}

/// Whether `cargo run` sets the variable `name` for the binary it runs (a package's, not the
/// toolchain's: `CARGO`, `RUSTC` and the like stay).
fn set_by_cargo_run(name: &str) -> bool {
    name.starts_with("CARGO_PKG_")
        || name.starts_with("CARGO_MANIFEST_")
        || matches!(name, "CARGO_CRATE_NAME" | "CARGO_BIN_NAME" | "OUT_DIR")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_dir_of_a_test_and_of_a_binary() {
        // (executable, its target directory)
        let cases = [
            ("/w/target/debug/deps/drain-0123abcd", "/w/target"),
            ("/w/target/debug/lab", "/w/target"),
            ("/tmp/t/release/deps/scale-0123abcd", "/tmp/t"),
            ("/tmp/t/debug/xtask", "/tmp/t"),
        ];
        for (exe, want) in cases {
            assert_eq!(target_dir_of(Path::new(exe)), Path::new(want), "{exe}");
        }
    }

    #[test]
    fn debug_dir_is_where_this_test_was_built() {
        // This unit test is a dev-profile binary in `<target>/debug/deps/`, beside the
        // components `cargo build --bins` writes to `<target>/debug/`, whatever the target.
        let exe = std::env::current_exe().unwrap();
        let beside = debug_dir().join("deps").join(exe.file_name().unwrap());
        assert!(
            beside.exists(),
            "{} is not {}",
            beside.display(),
            exe.display()
        );
    }

    #[test]
    fn nested_cargo_leaves_out_what_cargo_run_set_for_its_binary() {
        // (variable, left out)
        let cases = [
            ("CARGO_PKG_NAME", true),
            ("CARGO_PKG_VERSION_MAJOR", true),
            ("CARGO_MANIFEST_DIR", true),
            ("CARGO_MANIFEST_PATH", true),
            ("CARGO_CRATE_NAME", true),
            ("CARGO_BIN_NAME", true),
            ("OUT_DIR", true),
            ("CARGO", false),
            ("CARGO_TARGET_DIR", false),
            ("CARGO_INCREMENTAL", false),
            ("RUSTUP_TOOLCHAIN", false),
            ("KUBECONFIG", false),
        ];
        for (name, left_out) in cases {
            assert_eq!(set_by_cargo_run(name), left_out, "{name}");
        }
    }
}
