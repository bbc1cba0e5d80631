//! Traces crafted to grow numatrace's tables: each command that reads a
//! trace keeps memory and time within its stated bounds on them, for one
//! process as for many. The traces are built with the trace writer.
#![allow(unused_crate_dependencies)] // a test crate sees every dependency of its package
use std::{path::Path, process::Command};

use numa_core::{
    decode::{fixtures::fault, Event, Snapshot},
    trace,
};
use numa_ebpf_common::{EventKind, Outcome, ScanEvent};

const NUMATRACE: &str = env!("CARGO_BIN_EXE_numatrace");
const S: u64 = 1_000_000_000;
const T0: u64 = 1_000 * S;
/// The most a scan record indexes whole: 32768 chunks of 2 MiB.
const WIDEST_PASS: u64 = 64 << 30;

fn scan(tgid: u64, start: u64, end: u64, ts_ns: u64) -> Event {
    Event::Scan(ScanEvent {
        kind: EventKind::Scan as u32,
        pid_tgid: tgid << 32 | tgid,
        start,
        end,
        ts_ns,
        ..Default::default()
    })
}

fn write(path: &Path, events: impl IntoIterator<Item = Event>) {
    let mut w = trace::Writer::new(Vec::new(), &trace::fixtures::header()).expect("writer");
    w.snapshot(&Snapshot {
        ts_ns: T0 - S,
        ..Default::default()
    })
    .expect("snapshot");
    let mut last = T0;
    for ev in events {
        last = ev.ts_ns();
        w.event(&ev).expect("event");
    }
    w.snapshot(&Snapshot {
        ts_ns: last + 1,
        ..Default::default()
    })
    .expect("snapshot");
    let bytes = w.finish(last + 1, "duration").expect("finish");
    std::fs::write(path, bytes).expect("write the trace");
}

/// One process's `passes` scan passes, each over 64 GiB of address space
/// it never scanned before.
fn one_process_passes(path: &Path, passes: u64) {
    write(
        path,
        (0..passes).map(|i| {
            let start = (1 << 40) + i * WIDEST_PASS;
            scan(7, start, start + WIDEST_PASS, T0 + i * 1_000_000)
        }),
    );
}

/// `procs` processes each scanning 84 MiB (42 chunks: the index is full
/// after about 100 000 of them), then `more` new processes each scanning
/// once.
fn many_processes(path: &Path, procs: u64, more: u64) {
    write(
        path,
        (0..procs + more).map(|i| scan(1_000 + i, 1 << 30, (1 << 30) + (84 << 20), T0 + i * 1000)),
    );
}

/// Hint faults of `procs` processes, one page each.
fn many_fault_processes(path: &Path, procs: u64) {
    write(
        path,
        (0..procs).map(|i| {
            let mut f = fault(i, i, 5, Outcome::RejectLatency);
            f.ts_ns = T0 + i * 1000;
            f.pid_tgid = (10_000 + i) << 32 | (10_000 + i);
            Event::Fault(f)
        }),
    );
}

/// Peak RSS (KiB) and wall time of `numatrace ARGS`, which must succeed.
// Reaped by wait4, which also gives the child's peak RSS.
#[allow(clippy::zombie_processes)]
fn run(args: &[&str]) -> (u64, std::time::Duration) {
    let start = std::time::Instant::now();
    let child = Command::new(NUMATRACE)
        .args(args)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("run numatrace");
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid value; wait4 on our own child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(r, pid, "wait4");
    let elapsed = start.elapsed();
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "numatrace {args:?}: status {status:#x}"
    );
    (usage.ru_maxrss as u64, elapsed)
}

fn temp(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("numatrace-crafted-{}-{name}", std::process::id()))
}

/// A few hundred scan records of one process once took `stats` past
/// 600 MiB, and each more record took more: the scan index's cap held only
/// across processes.
#[test]
fn one_process_scan_passes_stay_within_the_scan_index_cap() {
    let path = temp("one-process.trace");
    one_process_passes(&path, 400);
    let (kib, _) = run(&["stats", path.to_str().expect("utf-8")]);
    let _ = std::fs::remove_file(&path);
    // The index's 4 Mi entries, about 256 MiB, plus the rest of stats.
    assert!(kib < 480 << 10, "peak RSS {kib} KiB");
}

/// `hist --by process` once kept about 3 KB per process for the whole run
/// (309 MB for 100 000 one-fault processes); its groups are bounded now.
#[test]
fn hist_by_process_stays_bounded_over_many_processes() {
    let path = temp("faults-100k.trace");
    many_fault_processes(&path, 100_000);
    let (kib, _) = run(&[
        "hist",
        "--from",
        path.to_str().expect("utf-8"),
        "--by",
        "process",
    ]);
    let _ = std::fs::remove_file(&path);
    assert!(kib < 128 << 10, "peak RSS {kib} KiB");
}

/// Once the scan index was full, each new process's scan record walked
/// every process (10 000 records after 100 000 processes: 4.3 times the
/// 100 000 alone); eviction is O(1) amortised now. Side by side, with a
/// generous bound.
#[test]
fn scans_after_a_full_index_cost_what_the_rest_cost() {
    let base = temp("scans-100k.trace");
    let more = temp("scans-100k-more.trace");
    many_processes(&base, 100_000, 0);
    many_processes(&more, 100_000, 10_000);
    let (_, t_base) = run(&["stats", base.to_str().expect("utf-8")]);
    let (_, t_more) = run(&["stats", more.to_str().expect("utf-8")]);
    let _ = std::fs::remove_file(&base);
    let _ = std::fs::remove_file(&more);
    assert!(
        t_more.as_secs_f64() < 2.5 * t_base.as_secs_f64() + 0.5,
        "100 000 processes: {t_base:?}; 10 000 scan records more: {t_more:?}"
    );
}
