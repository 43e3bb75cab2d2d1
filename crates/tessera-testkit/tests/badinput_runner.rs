//! The bad-input runner's own check: it must *see and count* what it exists
//! to catch. A group of deliberately broken cases — an abort, a panic, a
//! panic on another thread, a non-zero exit, a hang, a leaked thread, a
//! wrong answer — runs in child processes; each must be counted under its
//! outcome, the cases after each crash must still run (the child is
//! restarted at the next case), and the summary line must say so.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use tessera_testkit::badinput::{Case, Group, Options, Outcome, Verdict, run_suite};

fn broken() -> Vec<Case> {
    vec![
        Case::new("fine", || Verdict::Ok),
        Case::new("refuses", || {
            Verdict::from(tessera::Layout::contiguous(
                tessera::DType::F32,
                &[usize::MAX, 2],
            ))
        }),
        Case::new("aborts", || -> Verdict { std::process::abort() }),
        Case::new("fine after an abort", || Verdict::Ok),
        Case::new("panics", || -> Verdict { panic!("deliberate panic") }),
        Case::new("panics on another thread", || {
            let _ = std::thread::spawn(|| panic!("deliberate worker panic")).join();
            Verdict::Ok
        }),
        Case::new("exits with 3", || -> Verdict { std::process::exit(3) }),
        Case::new("hangs", || -> Verdict {
            std::thread::sleep(Duration::from_secs(600));
            Verdict::Ok
        }),
        Case::new("leaks a thread", || {
            std::thread::spawn(|| std::thread::sleep(Duration::from_secs(600)));
            Verdict::Ok
        }),
        Case::new("wrong answer", || Verdict::Wrong("2 + 2 = 5".into())),
        Case::new("fine at the end", || Verdict::Ok),
    ]
}

#[test]
fn runner_counts_crashes_panics_hangs_and_leaks() {
    let options = Options {
        case_timeout: Duration::from_millis(1500),
        startup_timeout: Duration::from_secs(60),
        leak_grace: Duration::from_millis(200),
    };
    let groups = [Group::new("runner-self-test", broken)];
    let summaries = run_suite(
        "runner_counts_crashes_panics_hangs_and_leaks",
        &groups,
        &options,
    );
    let s = &summaries[0];
    let kinds: Vec<&str> = s.cases.iter().map(|(_, o)| o.kind()).collect();
    assert_eq!(
        kinds,
        [
            "ok", "err", "crash", "ok", "panic", "panic", "crash", "hang", "leak", "wrong", "ok"
        ],
        "{:#?}",
        s.cases
    );
    assert_eq!(
        s.line(),
        "runner-self-test: 11 cases, ok 3, err 1, panic 2, crash 2, hang 1, wrong 1, leak 1"
    );
    assert!(!s.is_clean());
    assert_eq!(s.failures().count(), 7);
    match &s.cases[2].1 {
        Outcome::Crash(why) => assert!(why.contains("signal"), "{why}"),
        o => panic!("abort counted as {o}"),
    }
    match &s.cases[4].1 {
        Outcome::Panic(why) => assert!(why.contains("deliberate panic"), "{why}"),
        o => panic!("panic counted as {o}"),
    }
    match &s.cases[6].1 {
        Outcome::Crash(why) => assert!(why.contains("exit status: 3"), "{why}"),
        o => panic!("exit counted as {o}"),
    }
}
