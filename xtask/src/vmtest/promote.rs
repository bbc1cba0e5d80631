//! VM test of `numatrace promote`: moves only in scope, above the free
//! floor, survives a killed target; --dry-run moves nothing. One run with DRAM filled by an
//! idle process and three hot-chunks workloads:
//! - A (in scope of the real promoter): the pages it moved must be on node 0
//!   afterwards (its own move_pages query at the end, and A's summary; the
//!   promoter is stopped with SIGSTOP while A counts and exits);
//! - B (outside the real promoter's `--pid`, in scope of a `--dry-run`
//!   promoter): nothing moved B's pages, so B has no more pages on DRAM than
//!   the kernel itself promoted for it;
//! - C (in scope), killed with SIGKILL mid-run: the promoter keeps running,
//!   and stops by itself once A has exited too (every --pid process gone),
//!   as the dry run does once B has exited.
//!
//! Node 0's MemFree is sampled every 0.2 s during the run: it never goes
//! below the promoter's floor, except by what the kernel promoted itself.
use std::path::Path;

use anyhow::{ensure, Context, Result};
use numa_host::promoter_state::PromoterState;
use numa_promote::{ProcRow, PromoteReport};

use crate::kernels::Series;
use crate::results::{on_dram_at_end, read_report, text};
use numa_core::workload::Summary;

/// The guest script (`$RESULTS` is the test's results directory).
pub(super) const SCRIPT: &str = concat!(
    "echo 2 > /proc/sys/kernel/numa_balancing\n",
    fill_dram!(300, 240),
    include_str!("promote.sh")
);

/// How a `--pid` promote run ends once its processes have exited.
const SCOPE_EXITED: &str = "every --pid process exited";

fn proc_row(report: &PromoteReport, pid: u64) -> Option<&ProcRow> {
    report.processes.iter().find(|p| u64::from(p.pid) == pid)
}

/// The pids of the workloads A, B and C.
struct Pids {
    a: u64,
    b: u64,
    c: u64,
}

pub(super) fn check(dir: &Path, _console: &str, _series: Series) -> Result<()> {
    let pids = read_pids(dir)?;
    ensure!(
        text(dir, "promote.rc")?.trim() == "0",
        "promote exited with {}",
        text(dir, "promote.rc")?.trim()
    );
    ensure!(
        text(dir, "dry.rc")?.trim() == "0",
        "promote --dry-run exited with {}",
        text(dir, "dry.rc")?.trim()
    );
    let p: PromoteReport = read_report(dir, "promote.json")?;
    let dry: PromoteReport = read_report(dir, "dry.json")?;
    let wa: Summary = read_report(dir, "a.json")?;
    let wb: Summary = read_report(dir, "b.json")?;
    let moved = check_in_scope(dir, &p, &wa, pids.a)?;
    check_floor(dir, &p)?;
    check_out_of_scope(&p, &dry, &wb, pids.b)?;
    check_state_file(dir, moved)?;
    check_killed(dir, &p, pids.c)
}

fn read_pids(dir: &Path) -> Result<Pids> {
    let pids: Vec<u64> = text(dir, "pids")?
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();
    let [a, b, c] = pids[..] else {
        anyhow::bail!("pids file does not hold three pids: {pids:?}");
    };
    Ok(Pids { a, b, c })
}

/// The promoter worked on A and its pages are on node 0 afterwards.
/// Returns the pages the promoter moved in all.
fn check_in_scope(dir: &Path, p: &PromoteReport, wa: &Summary, a: u64) -> Result<u64> {
    let moved = p.moved_pages;
    let row_a = proc_row(p, a).context("A is not in the promoter's report")?;
    let moved_a = row_a.moves.moved;
    let demoted = p.kernel_pgdemote;
    println!(
        "    promote: moved {moved} pages (A {moved_a}), {} failures, {:.2} MB/s in calls, kernel pgpromote +{}, pgdemote +{demoted}, agreement {:.1}%",
        p.failures,
        p.mb_per_s_in_calls,
        p.kernel_pgpromote_success,
        p.agreement_pct,
    );
    ensure!(moved_a > 0, "numatrace moved none of A's pages");
    // A's and C's slow pages (40960) fit the default --queue of 65536.
    let dropped = p.mover.queue.dropped_full;
    ensure!(
        dropped == 0,
        "{dropped} requests dropped with a queue that holds every page"
    );
    let v = &p.mover.verify;
    let (checked, on, elsewhere, gone) = (v.checked, v.on_target, v.elsewhere, v.gone);
    ensure!(
        checked == moved && on + elsewhere + gone == checked,
        "verify counts inconsistent: {v:?}"
    );
    ensure!(
        elsewhere <= demoted,
        "{elsewhere} moved pages are no longer on node 0 but the kernel demoted only {demoted}"
    );
    if let Ok(why) = text(dir, "fence.late") {
        anyhow::bail!(
            "the promoter was not frozen while A counted its pages: {}",
            why.trim()
        );
    }
    let a_on_dram = on_dram_at_end(wa)?;
    ensure!(
        a_on_dram + demoted >= moved_a,
        "A finds {a_on_dram} of its pages on DRAM, numatrace moved {moved_a} (demoted {demoted})"
    );
    Ok(moved)
}

/// The free floor held: the promoter's own minimum headroom, and the
/// sampled MemFree (other allocations and the kernel's own promotions
/// may take some: 16 MiB plus what the kernel promoted).
fn check_floor(dir: &Path, p: &PromoteReport) -> Result<()> {
    let floor_kb: u64 = text(dir, "floor_kb")?.trim().parse().context("floor_kb")?;
    let kernel_kb = p.kernel_pgpromote_success * 4;
    let samples: Vec<u64> = text(dir, "memfree.txt")?
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    ensure!(
        samples.len() >= 20,
        "only {} MemFree samples",
        samples.len()
    );
    let min = samples.iter().copied().min().unwrap_or(0);
    println!(
        "    node 0 floor {floor_kb} KiB; MemFree min {min} KiB over {} samples; promoter waited at the floor {}x",
        samples.len(),
        p.mover.floor_waits
    );
    ensure!(
        min + 16 * 1024 + kernel_kb >= floor_kb,
        "node 0 MemFree fell to {min} KiB, below the floor {floor_kb} KiB (kernel promoted {kernel_kb} KiB)"
    );
    Ok(())
}

/// B: outside the real promoter's scope, inside the dry run's.
fn check_out_of_scope(p: &PromoteReport, dry: &PromoteReport, wb: &Summary, b: u64) -> Result<()> {
    if let Some(row) = proc_row(p, b) {
        ensure!(
            row.moves.moved == 0,
            "the promoter moved pages of B (out of scope)"
        );
        ensure!(!row.in_scope, "B is in the promoter's scope");
    }
    ensure!(dry.moved_pages == 0, "--dry-run moved pages");
    ensure!(dry.mover.move_calls == 0, "--dry-run called move_pages");
    let would = dry.mover.would_move_pages;
    ensure!(would > 0, "--dry-run found nothing it would move");
    ensure!(
        dry.facts.stopped == SCOPE_EXITED,
        "the dry run stopped with {:?} (expected {SCOPE_EXITED:?} once B had exited)",
        dry.facts.stopped
    );
    let row_b = proc_row(dry, b).context("B is not in the dry run's report")?;
    // Each run saw B's promotions but for the records it lost (ring full,
    // or a probe run the kernel skipped because it was preempted on that
    // CPU, which lazy-preemption kernels do): a bound far below what the
    // promoter moving B's pages would put on DRAM (the dry run's `would`).
    let seen = |r: &PromoteReport, row: Option<&ProcRow>| {
        let k = row.map_or(0, |row| row.kernel_promoted);
        (k, r.ring_drops + r.runs_missed)
    };
    let (k_dry, lost_dry) = seen(dry, Some(row_b));
    let (k_real, lost_real) = seen(p, proc_row(p, b));
    let bound = (k_dry + lost_dry).max(k_real + lost_real);
    let b_on_dram = on_dram_at_end(wb)?;
    println!(
        "    B: dry run would move {would} pages; B has {b_on_dram} pages on DRAM; the kernel promoted {k_dry} + {lost_dry} lost (dry run), {k_real} + {lost_real} lost (promoter)"
    );
    ensure!(
        b_on_dram <= bound,
        "B has {b_on_dram} pages on DRAM but the kernel promoted at most {bound} (records lost included): someone moved B's pages"
    );
    Ok(())
}

/// The state file `top` and `export` read: published while it ran,
/// removed at the end; the dry run published to its own path.
fn check_state_file(dir: &Path, moved: u64) -> Result<()> {
    let st: PromoterState =
        read_report(dir, "state.json").context("the promoter's state file was never seen")?;
    let promote_pid: u64 = text(dir, "promote.pid")?
        .trim()
        .parse()
        .context("promote.pid")?;
    let st_moved = st.moved_pages;
    println!(
        "    state file: pid {}, moved {st_moved} pages ({:.0}/s), failures {}, queue {}",
        st.pid, st.moved_pages_per_s, st.failures, st.queue_depth
    );
    ensure!(
        u64::from(st.pid) == promote_pid && !st.dry_run,
        "the state file is not the real promoter's: {st:?}"
    );
    ensure!(
        st_moved > 0 && st_moved <= moved,
        "the state file says {st_moved} pages moved, the report {moved}"
    );
    ensure!(
        !dir.join("state.left").exists(),
        "/run/numatrace/promoter.json was left behind after the promoter exited"
    );
    let dry_st: PromoterState =
        read_report(dir, "dry-state.sample").context("the dry run published no state")?;
    ensure!(
        dry_st.dry_run && dry_st.moved_pages == 0,
        "dry run state: {dry_st:?}"
    );
    Ok(())
}

/// C was killed mid-run; the promoter kept going until A had exited too,
/// then stopped by itself and reported.
fn check_killed(dir: &Path, p: &PromoteReport, c: u64) -> Result<()> {
    ensure!(dir.join("c.killed").exists(), "C was not killed");
    ensure!(
        p.facts.stopped == SCOPE_EXITED,
        "the promoter stopped with {:?} (expected {SCOPE_EXITED:?} once A and C had exited)",
        p.facts.stopped
    );
    let dur = p.duration_s;
    ensure!(dur >= 25.0, "the promoter ran only {dur:.1} s");
    // C may not have taken a hint fault before it was killed (the scanner
    // reaches each process in its own time): report it when it did.
    match proc_row(p, c) {
        Some(row_c) => println!(
            "    C (killed at 15 s): {} requests, {} moved, exit seen by the mover: {}",
            row_c.requested, row_c.moves.moved, row_c.moves.exited
        ),
        None => println!("    C (killed at 15 s): no hint faults before the kill"),
    }
    Ok(())
}
