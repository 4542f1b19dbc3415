//! Processes on this machine: free loopback ports, whether a PID is still the binary started,
//! its memory and CPU from /proc, a log's tail, and a command run to completion.

use std::fs;
use std::io::Write as _;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// Picks distinct free loopback ports by holding all listeners until every port is chosen.
pub fn free_ports<const N: usize>() -> Result<[u16; N]> {
    let listeners = (0..N)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<Vec<_>>>()?;
    let ports: Vec<u16> = listeners
        .iter()
        .map(|listener| listener.local_addr().map(|addr| addr.port()))
        .collect::<std::io::Result<_>>()?;
    Ok(ports.try_into().expect("N ports"))
}

/// A free loopback port (for a component's metrics or webhook server).
pub fn free_port() -> Result<u16> {
    let [port] = free_ports()?;
    Ok(port)
}

/// The PID runs and is the binary we started (PIDs are reused).
pub fn process_runs(pid: u32, bin: &Path) -> bool {
    let Ok(cmdline) = fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // A zombie has exited; it only waits for its parent to reap it.
    let zombie = stat
        .rsplit_once(") ")
        .is_some_and(|(_, rest)| rest.starts_with('Z'));
    // The command line is empty for a moment while the process is inside execve.
    let argv0 = cmdline.split(|byte| *byte == 0).next().unwrap_or_default();
    !zombie
        && (argv0.is_empty() || Path::new(std::str::from_utf8(argv0).unwrap_or_default()) == bin)
}

/// Resident memory of a process now (VmRSS), in KiB.
pub fn rss_kib(pid: u32) -> Result<u64> {
    proc_status_kib(pid, "VmRSS")
}

/// The highest resident memory the process has had so far (VmHWM), in KiB.
pub fn peak_rss_kib(pid: u32) -> Result<u64> {
    proc_status_kib(pid, "VmHWM")
}

fn proc_status_kib(pid: u32, field: &str) -> Result<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status"))?;
    parse_status_kib(&status, field).with_context(|| format!("no {field} in /proc/{pid}/status"))
}

fn parse_status_kib(status: &str, field: &str) -> Option<u64> {
    status.lines().find_map(|line| {
        line.strip_prefix(field)?
            .strip_prefix(':')?
            .trim()
            .strip_suffix("kB")?
            .trim()
            .parse()
            .ok()
    })
}

/// utime + stime of a process, from `/proc/<pid>/stat` (in clock ticks of 1/100 s on Linux).
pub fn cpu_seconds(pid: u32) -> Result<f64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name may hold spaces; the fields after its closing parenthesis do not.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .context("malformed /proc/<pid>/stat")?
        .1
        .split_whitespace()
        .collect();
    let ticks = |i: usize| -> Result<f64> {
        Ok(fields
            .get(i)
            .context("short /proc/<pid>/stat")?
            .parse::<f64>()?)
    };
    // utime and stime are fields 14 and 15 of stat(5); here 0-based after the name: 11 and 12.
    Ok((ticks(11)? + ticks(12)?) / 100.0)
}

/// SIGTERM, then SIGKILL if the process still runs 10 s later.
pub fn stop(pid: u32, bin: &Path) {
    signal(pid, "TERM");
    let start = Instant::now();
    while process_runs(pid, bin) && start.elapsed() < Duration::from_secs(10) {
        sleep(Duration::from_millis(100));
    }
    if process_runs(pid, bin) {
        signal(pid, "KILL");
    }
}

/// Sends `signal` (a name: TERM, STOP, ...) to `pid`.
pub(crate) fn signal(pid: u32, signal: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status();
}

/// The last `lines` lines of the file at `path` (a log), empty if it cannot be read.
pub fn tail(path: &Path, lines: usize) -> String {
    let content = fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = content.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Runs `command` to completion with `input` on its stdin; its stdout, or an error naming it as
/// `what` with all it printed (a tool's complaint may be on either stream).
pub fn stdout_of(what: &str, command: &mut Command, input: Option<&str>) -> Result<String> {
    let mut child = command
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("running {what}"))?;
    if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
        stdin.write_all(input.as_bytes())?;
    }
    let output = child.wait_with_output()?;
    if !output.status.success() {
        bail!(
            "{what} failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr).trim_end()
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Runs `command` with its output on ours; fails naming it unless it exits 0.
pub fn run_command(command: &mut Command) -> Result<()> {
    eprintln!("--> {command:?}");
    let status = command
        .status()
        .with_context(|| format!("running {command:?}"))?;
    if !status.success() {
        bail!("{command:?} exited with {status}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_fields_in_kib() {
        let status = "Name:\tx\nVmHWM:\t   2048 kB\nVmRSS:\t   1024 kB\nThreads:\t4\n";
        // (field, value)
        let cases = [
            ("VmRSS", Some(1024)),
            ("VmHWM", Some(2048)),
            ("Threads", None),
            ("VmSwap", None),
        ];
        for (field, want) in cases {
            assert_eq!(parse_status_kib(status, field), want, "{field}");
        }
    }

    #[test]
    fn ports_are_distinct() {
        let [a, b, c] = free_ports().unwrap();
        assert!(a != b && b != c && a != c, "{a} {b} {c}");
    }
}
