//! `numatrace workload move-pages`: the mover's throughput against the
//! minimal baseline, on the same page set. A buffer is placed on the slow
//! node, then moved to the DRAM node either by one move_pages(2) call for
//! every page (`--via baseline`) or by promote's [`Mover`] fed one request
//! per page (`--via mover`: coalescing, batches sized to `--batch-ms`, the
//! query before each batch, rate limit and free floor, per-page
//! accounting). Prints one JSON line; `cargo xtask bench promote` runs both
//! alternately in one boot and prints the ratio.
use std::{io::Write, process::ExitCode, sync::Arc};

use anyhow::{ensure, Context, Result};
use clap::ValueEnum;

use numa_core::{
    topology::Node,
    workload::{MovePagesSummary, MoverTimes},
};
use numa_host::{clock::monotonic_ns, system};
use numa_promote::{
    bucket, floor,
    mover::{Mover, MoverConfig, Shared, Step, SysEnv, PAGE},
    queue::Request,
    scope::Scope,
    sys,
};

use crate::{
    cli::{MovePagesArgs, MoveVia},
    workload::{slow_and_dram_nodes, Region},
};

/// A buffer of `--mb` touched on `slow`, and the address of each page.
fn place_on_slow(a: &MovePagesArgs, slow: u32) -> Result<(Region, Vec<u64>)> {
    ensure!(a.mb > 0, "--mb must be at least 1");
    let region = Region::placed_then_released(a.mb as usize * (1 << 20), false, slow)?;
    let on_slow = region.pages_on(slow) as u64;
    let pages: Vec<u64> = (0..region.len as u64)
        .step_by(PAGE as usize)
        .map(|o| region.ptr as u64 + o)
        .collect();
    ensure!(
        on_slow == pages.len() as u64,
        "only {on_slow} of {} pages landed on node {slow}",
        pages.len()
    );
    Ok((region, pages))
}

/// One move_pages call for every page: pages moved, calls made.
fn via_baseline(pid: u32, pages: &[u64], dram: u32) -> Result<(u64, u64)> {
    let nodes = vec![dram as i32; pages.len()];
    let mut status = vec![i32::MIN; pages.len()];
    sys::move_pages(pid, pages, &nodes, &mut status).context("move_pages")?;
    Ok((
        status.iter().filter(|&&s| s == dram as i32).count() as u64,
        1,
    ))
}

fn mover_config(a: &MovePagesArgs, nodes: &[Node]) -> Result<MoverConfig> {
    Ok(MoverConfig {
        rate_bytes_per_s: bucket::parse_rate(&a.rate_limit)
            .context("--rate-limit: e.g. 256MiB/s or 0")?,
        min_free: floor::MinFree::parse(&a.min_free).context("--min-free: e.g. 5% or 200MiB")?,
        batch_ms: a.batch_ms,
        max_retries: 3,
        retry_backoff_ms: 200,
        // Every page is queued before the first move.
        max_queued_pages: usize::try_from(a.mb.saturating_mul(256)).unwrap_or(usize::MAX),
        dry_run: false,
        tier_of: system::memory_tiers()
            .iter()
            .flat_map(|t| t.nodes.iter().map(move |n| (*n as i32, t.id)))
            .collect(),
        cpus_of: nodes.iter().map(|n| (n.id, n.cpus.len() as u64)).collect(),
    })
}

/// Promote's mover fed one request per page, stepped until idle. Returns
/// the pages moved, the calls made, when the moving ended (the final check
/// of where the pages are comes after) and where the time went.
fn via_mover(
    a: &MovePagesArgs,
    nodes: &[Node],
    pid: u32,
    pages: &[u64],
    (slow, dram): (u32, u32),
) -> Result<(u64, u64, u64, MoverTimes)> {
    let cfg = mover_config(a, nodes)?;
    let shared = Arc::new(Shared::default());
    let mut m = Mover::new(cfg, Scope::pids(&[pid])?, SysEnv, shared);
    for &addr in pages {
        m.push(Request {
            pid,
            addr,
            src_node: slow as i32,
            target: dram,
            nr_pages: 1,
            ts_ns: 0,
        });
    }
    loop {
        match m.step() {
            Step::Worked => {}
            Step::Idle => break,
            Step::Wait(ns) => {
                std::thread::sleep(std::time::Duration::from_nanos(ns.min(50_000_000)))
            }
        }
    }
    let t_end = monotonic_ns();
    let r = m.finish();
    let verify_s = monotonic_ns().saturating_sub(t_end) as f64 / 1e9;
    let times = MoverTimes {
        verify_s,
        move_calls: r.move_calls,
        move_s: r.move_ns as f64 / 1e9,
        query_calls: r.query_calls,
        query_s: r.query_ns as f64 / 1e9,
        meminfo_reads: r.meminfo_reads,
        batch_pages: r.batch_pages,
        ns_per_page: r.ns_per_page,
        fixed_ns_per_call: r.fixed_ns_per_call,
    };
    Ok((r.statuses.moved, r.move_calls + r.query_calls, t_end, times))
}

pub(crate) fn move_pages(a: &MovePagesArgs) -> Result<ExitCode> {
    let nodes = system::nodes();
    let (slow, dram) = slow_and_dram_nodes(a.slow_node, a.dram_node, &nodes, "")?;
    let (region, pages) = place_on_slow(a, slow)?;
    let pid = std::process::id();
    let t0 = monotonic_ns();
    let mut times = None;
    // Stopped when the pages are moved: the mover's end-of-run check of
    // where they are is reported apart (`verify_s`), not timed.
    let mut t_end = None;
    let (moved, calls) = match a.via {
        MoveVia::Baseline => via_baseline(pid, &pages, dram)?,
        MoveVia::Mover => {
            let (moved, calls, end, t) = via_mover(a, &nodes, pid, &pages, (slow, dram))?;
            t_end = Some(end);
            times = Some(t);
            (moved, calls)
        }
    };
    let secs = t_end.unwrap_or_else(monotonic_ns).saturating_sub(t0) as f64 / 1e9;
    let on_dram = region.pages_on(dram) as u64;
    let bytes = moved * PAGE;
    let r = MovePagesSummary {
        via: a
            .via
            .to_possible_value()
            .map(|v| v.get_name().to_owned())
            .unwrap_or_default(),
        pages: pages.len() as u64,
        moved,
        bytes,
        seconds: secs,
        mb_per_s: bytes as f64 / 1e6 / secs.max(1e-9),
        pages_per_s: moved as f64 / secs.max(1e-9),
        calls,
        on_dram_after: on_dram,
        mover: times,
    };
    writeln!(std::io::stdout(), "{}", serde_json::to_string(&r)?)?;
    Ok(ExitCode::SUCCESS)
}
