//! The crash-isolating runner: cases run in a child process so that a panic,
//! an abort, a segfault or a hang is *seen and counted*, not the end of the
//! test run.
//!
//! A test binary calls [`run_suite`] with its own test name and its groups.
//! In the parent, each group is run by re-executing the binary
//! (`std::env::current_exe()`, `--exact <test> --nocapture`) with
//! `TESSERA_BADINPUT_CHILD=<group>:<start>` set. The child builds the same
//! (deterministic) case list, prints `@case <i> <name>` before and
//! `@done <i> <outcome>` after each case, and exits after the last one. The
//! parent reads the child's stdout; when the child dies (signal, abort,
//! non-zero exit) in the middle of a case, or a case runs past the timeout
//! (the parent kills the child), the case is a `crash` or a `hang`, and a new
//! child starts at the next case.
//!
//! In the child, a case runs under `catch_unwind` and a panic hook that
//! notices panics on any thread (a worker thread of the library too), so a
//! panic is `panic`; on Linux the child also counts its threads before and
//! after each case, and threads left behind are `leak`.

use std::io::{BufRead, BufReader, Read, Write};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{Case, Group, Outcome, Verdict};

/// The environment variable that makes a test binary a child runner.
pub const CHILD_ENV: &str = "TESSERA_BADINPUT_CHILD";

/// A panic whose message contains this is a deliberate panic of *user*
/// code (an abort callback, a pool job) that the library is expected to
/// contain: the hook does not count it. If it unwinds out of the library
/// into the case, the case still counts as `panic`.
pub const DELIBERATE_PANIC: &str = "[bad-input: deliberate panic in user code]";

/// Set to `1` to print every case's outcome, not only the failures.
pub const VERBOSE_ENV: &str = "TESSERA_BADINPUT_VERBOSE";

/// How a suite runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// Longest a single case may run before the child is killed (`hang`).
    pub case_timeout: Duration,
    /// Longest a child may take to start and run its group's setup.
    pub startup_timeout: Duration,
    /// How long threads a case started may take to finish after it returns
    /// before they count as leaked.
    pub leak_grace: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            case_timeout: Duration::from_secs(10),
            startup_timeout: Duration::from_secs(60),
            leak_grace: Duration::from_secs(2),
        }
    }
}

/// The outcome of every case of one group, and the counts.
#[derive(Clone, Debug)]
pub struct GroupSummary {
    /// Group name.
    pub group: String,
    /// Per case: its name and outcome, in order (plus `crash` entries for a
    /// child that died between two cases).
    pub cases: Vec<(String, Outcome)>,
    /// Wall time of the group.
    pub elapsed: Duration,
}

impl GroupSummary {
    /// How many cases had an outcome of this kind (`ok`, `err`, ...).
    pub fn count(&self, kind: &str) -> usize {
        self.cases.iter().filter(|(_, o)| o.kind() == kind).count()
    }

    /// Cases whose outcome breaks the promise (panic, crash, hang, wrong, leak).
    pub fn failures(&self) -> impl Iterator<Item = &(String, Outcome)> {
        self.cases.iter().filter(|(_, o)| o.is_failure())
    }

    /// No failures.
    pub fn is_clean(&self) -> bool {
        self.failures().next().is_none()
    }

    /// `group: N cases, ok A, err B, panic 0, crash 0, hang 0, wrong 0, leak 0`.
    pub fn line(&self) -> String {
        format!(
            "{}: {} cases, ok {}, err {}, panic {}, crash {}, hang {}, wrong {}, leak {}",
            self.group,
            self.cases.len(),
            self.count("ok"),
            self.count("err"),
            self.count("panic"),
            self.count("crash"),
            self.count("hang"),
            self.count("wrong"),
            self.count("leak"),
        )
    }
}

/// Run `groups` as the test `test_name` of the current binary: in a child
/// process (when [`CHILD_ENV`] is set) run the asked-for cases and exit; in
/// the parent run every group in children, print one summary line per group
/// and every failing case, and return the summaries.
pub fn run_suite(test_name: &str, groups: &[Group], options: &Options) -> Vec<GroupSummary> {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        child_main(&spec, groups, options);
    }
    let mut out = Vec::new();
    for g in groups {
        let s = run_group(test_name, g, options);
        println!("{}  ({:.1} s)", s.line(), s.elapsed.as_secs_f64());
        let verbose = std::env::var(VERBOSE_ENV).is_ok_and(|v| v == "1");
        for (name, o) in &s.cases {
            if verbose || o.is_failure() {
                println!("  {name}: {o}");
            }
        }
        out.push(s);
    }
    out
}

// ---------------------------------------------------------------- child side

/// Panics seen on any thread while the current case ran.
static PANICS: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn child_main(spec: &str, groups: &[Group], options: &Options) -> ! {
    let code = match child_run(spec, groups, options) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("bad-input child: {e}");
            2
        }
    };
    let _ = std::io::stdout().flush();
    std::process::exit(code)
}

fn child_run(spec: &str, groups: &[Group], options: &Options) -> Result<(), String> {
    let (name, start) = spec
        .rsplit_once(':')
        .ok_or_else(|| format!("bad {CHILD_ENV} value '{spec}'"))?;
    let start: usize = start
        .parse()
        .map_err(|_| format!("bad start in {CHILD_ENV} value '{spec}'"))?;
    let group = groups
        .iter()
        .find(|g| g.name == name)
        .ok_or_else(|| format!("no group named '{name}'"))?;
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let thread = std::thread::current();
        let msg = format!("{} (thread '{}')", info, thread.name().unwrap_or("?"));
        if msg.contains(DELIBERATE_PANIC) {
            return;
        }
        PANICS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(one_line(&msg));
        previous(info);
    }));
    if let Some(setup) = &group.setup {
        setup().map_err(|e| format!("setup of group '{name}' failed: {e}"))?;
    }
    let cases = (group.build)();
    let mut stdout = std::io::stdout();
    // libtest has printed `test <name> ... ` without a newline: end it, so
    // that every marker starts a line.
    let _ = writeln!(stdout);
    for (i, case) in cases.into_iter().enumerate().skip(start) {
        let Case { name, run } = case;
        let _ = writeln!(stdout, "@case {i} {}", one_line(&name));
        let _ = stdout.flush();
        let outcome = run_one(run, options);
        let _ = writeln!(stdout, "@done {i} {}", outcome.encode());
        let _ = stdout.flush();
    }
    let _ = writeln!(stdout, "@end");
    Ok(())
}

fn run_one(run: Box<dyn FnOnce() -> Verdict + Send>, options: &Options) -> Outcome {
    PANICS.lock().unwrap_or_else(|p| p.into_inner()).clear();
    let before = thread_count();
    let result = catch_unwind(AssertUnwindSafe(run));
    let panics = std::mem::take(&mut *PANICS.lock().unwrap_or_else(|p| p.into_inner()));
    if let Some(first) = panics.first() {
        return Outcome::Panic(first.clone());
    }
    let verdict = match result {
        Ok(v) => v,
        Err(_) => return Outcome::Panic("a panic without a message".into()),
    };
    if let (Some(before), Some(_)) = (before, thread_count()) {
        let deadline = Instant::now() + options.leak_grace;
        loop {
            let now = thread_count().unwrap_or(before);
            if now <= before {
                break;
            }
            if Instant::now() >= deadline {
                return Outcome::Leak(format!(
                    "{} threads left running ({before} before the case, {now} after)",
                    now - before
                ));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    match verdict {
        Verdict::Ok => Outcome::Ok,
        Verdict::Err(m) => Outcome::Err(m),
        Verdict::Wrong(m) => Outcome::Wrong(m),
    }
}

/// Threads of this process (Linux: `/proc/self/status`), else `None`.
fn thread_count() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
}

/// `s` on one line, at most 300 characters.
pub(crate) fn one_line(s: &str) -> String {
    let flat: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    match flat.char_indices().nth(300) {
        Some((i, _)) => format!("{}...", &flat[..i]),
        None => flat,
    }
}

// --------------------------------------------------------------- parent side

enum Msg {
    Line(String),
    Eof,
}

/// A running child and what it says.
struct Running {
    child: Child,
    lines: Receiver<Msg>,
    stderr: Arc<Mutex<Vec<u8>>>,
}

/// Keep the last this-many bytes of a child's stderr for crash reports.
const STDERR_TAIL: usize = 4096;

fn spawn(test_name: &str, group: &str, start: usize) -> Result<Running, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let mut child = Command::new(exe)
        .args([test_name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, format!("{group}:{start}"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("spawning the child: {e}"))?;
    let (tx, lines) = mpsc::channel();
    if let Some(out) = child.stdout.take() {
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                match line {
                    Ok(l) => {
                        if tx.send(Msg::Line(l)).is_err() {
                            return;
                        }
                    }
                    Err(_) => break,
                }
            }
            let _ = tx.send(Msg::Eof);
        });
    }
    let stderr = Arc::new(Mutex::new(Vec::new()));
    if let Some(mut err) = child.stderr.take() {
        let sink = stderr.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                let mut s = sink.lock().unwrap_or_else(|p| p.into_inner());
                s.extend_from_slice(&buf[..n]);
                let excess = s.len().saturating_sub(STDERR_TAIL);
                s.drain(..excess);
            }
        });
    }
    Ok(Running {
        child,
        lines,
        stderr,
    })
}

/// What ended one child's run.
enum End {
    /// It printed `@end` and exited.
    Finished,
    /// Its stdout closed (it exited or died).
    Died,
    /// Nothing came for too long; it was killed.
    TimedOut,
}

fn run_group(test_name: &str, group: &Group, options: &Options) -> GroupSummary {
    let started = Instant::now();
    let names: Vec<String> = (group.build)().into_iter().map(|c| c.name).collect();
    let n = names.len();
    let mut outcomes: Vec<Option<Outcome>> = vec![None; n];
    let mut extra: Vec<(String, Outcome)> = Vec::new();
    let mut next = 0;
    while next < n {
        let mut run = match spawn(test_name, &group.name, next) {
            Ok(r) => r,
            Err(e) => {
                outcomes[next] = Some(Outcome::Crash(e));
                next += 1;
                continue;
            }
        };
        let mut current: Option<usize> = None;
        let mut any_case = false;
        let mut deadline = Instant::now() + options.startup_timeout;
        let end = loop {
            let wait = deadline.saturating_duration_since(Instant::now());
            match run.lines.recv_timeout(wait) {
                Ok(Msg::Line(l)) => {
                    if let Some(rest) = l.strip_prefix("@case ") {
                        let i = rest.split(' ').next().and_then(|i| i.parse().ok());
                        if let Some(i) = i.filter(|&i| i < n) {
                            current = Some(i);
                            any_case = true;
                            deadline = Instant::now() + options.case_timeout;
                        }
                    } else if let Some(rest) = l.strip_prefix("@done ") {
                        let (i, o) = rest.split_once(' ').unwrap_or((rest, ""));
                        if let Some(i) = i.parse::<usize>().ok().filter(|&i| i < n) {
                            outcomes[i] = Some(Outcome::decode(o));
                            next = i + 1;
                            current = None;
                            deadline = Instant::now() + options.case_timeout;
                        }
                    } else if l == "@end" {
                        // Wait for the exit below.
                        deadline = Instant::now() + options.case_timeout;
                    }
                }
                Ok(Msg::Eof) | Err(RecvTimeoutError::Disconnected) => break End::Died,
                Err(RecvTimeoutError::Timeout) => break End::TimedOut,
            }
        };
        let end = match end {
            End::TimedOut => {
                let _ = run.child.kill();
                let _ = run.child.wait();
                End::TimedOut
            }
            _ => match run.child.wait() {
                Ok(s) if s.success() && next >= n => End::Finished,
                _ => End::Died,
            },
        };
        let status = run
            .child
            .try_wait()
            .ok()
            .flatten()
            .map_or_else(|| "killed".to_string(), |s| s.to_string());
        let tail = {
            let s = run.stderr.lock().unwrap_or_else(|p| p.into_inner());
            String::from_utf8_lossy(&s).into_owned()
        };
        let why = |what: &str| {
            let last = tail.lines().rev().find(|l| !l.trim().is_empty());
            format!(
                "{what} ({status}); last stderr line: {}",
                last.unwrap_or("")
            )
        };
        match (end, current) {
            (End::Finished, _) => {}
            (End::TimedOut, Some(i)) => {
                outcomes[i] = Some(Outcome::Hang(format!(
                    "no answer after {:?}; killed",
                    options.case_timeout
                )));
                next = i + 1;
            }
            (End::Died, Some(i)) => {
                outcomes[i] = Some(Outcome::Crash(one_line(&why("the child died"))));
                next = i + 1;
            }
            (end, None) => {
                let what = match end {
                    End::TimedOut => "the child stopped answering between cases",
                    _ => "the child died between cases",
                };
                if !any_case {
                    // Never reached a case: blame the first one, to make progress.
                    if next < n {
                        outcomes[next] = Some(Outcome::Crash(one_line(&why(what))));
                        next += 1;
                    }
                } else {
                    let label = format!("<after case {}>", next.saturating_sub(1));
                    extra.push((label, Outcome::Crash(one_line(&why(what)))));
                }
            }
        }
    }
    let mut cases: Vec<(String, Outcome)> = names
        .into_iter()
        .zip(outcomes)
        .map(|(name, o)| {
            let o = o.unwrap_or_else(|| Outcome::Crash("never reported".into()));
            (name, o)
        })
        .collect();
    cases.extend(extra);
    GroupSummary {
        group: group.name.clone(),
        cases,
        elapsed: started.elapsed(),
    }
}
