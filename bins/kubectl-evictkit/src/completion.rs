//! Shell completion, both ways a user types the plugin.
//!
//! `kubectl evictkit <TAB>`: kubectl completes a plugin's arguments by running
//! `kubectl_complete-evictkit` from PATH with the words after `kubectl evictkit`, the last one
//! being the word to complete ("" for a new word), and reads one candidate a line
//! (`value<TAB>description`) with Cobra's `:<directive>` last. The release archive's
//! `kubectl_complete-evictkit` runs `kubectl-evictkit __complete "$@"`, answered here from the
//! CLI's own definition, so the candidates always match the installed binary.
//!
//! `kubectl-evictkit <TAB>`: `kubectl-evictkit completion <shell>` prints a script to source.

use std::ffi::OsString;
use std::io::Write as _;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use clap_complete::Shell;

/// The first argument of the completion script's call; not a subcommand a user types.
const KUBECTL_REQUEST: &str = "__complete";
/// The name the script completes and the archive installs.
const BINARY: &str = "kubectl-evictkit";
/// Cobra's ShellCompDirectiveNoFileComp: what we list is all there is; a file name is never an
/// answer kubectl should add (file arguments, e.g. --kubeconfig, are completed by us).
const NO_FILE_COMPLETION: u8 = 4;
/// Cobra's ShellCompDirectiveNoSpace: a directory is completed further, not ended by a space.
const NO_SPACE: u8 = 2;

#[derive(Debug, clap::Args)]
pub struct CompletionArgs {
    /// The shell to print the script for (kubectl's own completion of `kubectl evictkit` needs
    /// none: it runs kubectl_complete-evictkit from the release archive).
    #[arg(value_enum)]
    shell: Shell,
}

/// `kubectl-evictkit completion <shell>`: the shell's script on stdout.
pub fn print_script(args: &CompletionArgs, mut cli: clap::Command) -> Result<()> {
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut cli, BINARY, &mut out);
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(&out)?;
    stdout.flush()?;
    Ok(())
}

/// When the process was started as `kubectl-evictkit __complete WORDS...` (by
/// kubectl_complete-evictkit): prints the answer and returns the exit code. `cli` builds the
/// command line's definition.
pub fn answer_kubectl(cli: impl FnOnce() -> clap::Command) -> Option<ExitCode> {
    let mut args = std::env::args_os().skip(1);
    if args.next()? != KUBECTL_REQUEST {
        return None;
    }
    let answer = std::env::current_dir()
        .context("reading the current directory")
        .and_then(|dir| candidates(cli(), args.collect(), &dir));
    let printed = answer.and_then(|text| {
        let mut stdout = std::io::stdout().lock();
        stdout.write_all(text.as_bytes())?;
        Ok(stdout.flush()?)
    });
    Some(match printed {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: completing: {error:#}");
            ExitCode::FAILURE
        }
    })
}

/// Cobra's completion answer for `words` (the last one is completed; paths relative to `dir`).
fn candidates(mut cli: clap::Command, mut words: Vec<OsString>, dir: &Path) -> Result<String> {
    if words.is_empty() {
        // kubectl always passes the word being completed; a bare call completes a new word.
        words.push(OsString::new());
    }
    let mut args = vec![OsString::from(BINARY)];
    args.extend(words);
    let index = args.len() - 1;
    let found = clap_complete::engine::complete(&mut cli, args, index, Some(dir))
        .context("completing the command line")?;
    let mut answer = String::new();
    let mut directive = NO_FILE_COMPLETION;
    for candidate in found.iter().filter(|candidate| !candidate.is_hide_set()) {
        let value = candidate.get_value().to_string_lossy();
        if value.ends_with(std::path::MAIN_SEPARATOR) {
            directive |= NO_SPACE;
        }
        answer.push_str(&value);
        let help = candidate.get_help().map(ToString::to_string);
        // The first line: kubectl's shells show one line per candidate.
        if let Some(help) = help.as_deref().and_then(|help| help.lines().next()) {
            answer.push('\t');
            answer.push_str(help);
        }
        answer.push('\n');
    }
    answer.push_str(&format!(":{directive}\n"));
    Ok(answer)
}
