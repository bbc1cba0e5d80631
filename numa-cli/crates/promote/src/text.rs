//! The promote report as text: what the pipeline asked for, what moved
//! (or, in a dry run, would have), the limits that held moves back, and
//! the busiest processes. Each count says its unit: folios (one per
//! fault, one address in a move_pages call) or pages (a THP's 512, what
//! vmstat's pgpromote_success counts).
use std::io::Write;

use numa_core::{model::policy::params_text, printable::printable};

use super::PromoteReport;

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

/// The configured rate limit, as the report states it.
fn rate_limit_text(bytes_per_s: u64) -> String {
    if bytes_per_s == 0 {
        "unlimited".to_owned()
    } else {
        format!("{:.0} MiB/s", mib(bytes_per_s))
    }
}

pub fn write_human(r: &PromoteReport, out: &mut impl Write) -> std::io::Result<()> {
    write_header(r, out)?;
    if r.facts.dry_run {
        write_would_move(r, out)?;
    } else {
        write_moves(r, out)?;
        write_limits(r, out)?;
    }
    write_kernel(r, out)?;
    if r.ring_drops + r.runs_missed > 0 {
        writeln!(
            out,
            "  lost        {} records to a full ring, {} to probe runs the kernel skipped (preempted on their CPU)",
            r.ring_drops, r.runs_missed
        )?;
    }
    writeln!(out)?;
    write_processes(r, out)
}

/// The kernel's own promotions beside numatrace's, in pages as vmstat
/// counts them.
fn write_kernel(r: &PromoteReport, out: &mut impl Write) -> std::io::Result<()> {
    let ours = if r.facts.dry_run {
        format!("numatrace would move {} pages", r.mover.would_move_pages)
    } else {
        format!("numatrace moved {} pages", r.moved_pages)
    };
    writeln!(
        out,
        "  kernel      pgpromote_success +{} pages, pgdemote +{} pages in the same window (all processes); \
         in scope the kernel promoted {} pages ({} folios), {ours}",
        r.kernel_pgpromote_success,
        r.kernel_pgdemote,
        r.events.kernel_promote_pages,
        r.events.kernel_promote
    )?;
    let e = &r.events;
    writeln!(
        out,
        "  ping-pong   {} of the folios numatrace sent to be moved ({} pages) demoted again within {:.0} s; \
         {} of the kernel's own promotions",
        e.pingpong,
        e.pingpong_pages,
        numa_core::model::lifecycle::PINGPONG_WINDOW_NS as f64 / 1e9,
        e.kernel_pingpong
    )
}

/// The run, and what the pipeline saw and asked for.
fn write_header(r: &PromoteReport, out: &mut impl Write) -> std::io::Result<()> {
    let params = params_text(&r.facts.model_params, ",");
    let m = &r.mover;
    let e = &r.events;
    writeln!(
        out,
        "numatrace promote{}: {:.1} s ({}), {} with {} {}",
        if r.facts.dry_run { " --dry-run" } else { "" },
        r.duration_s,
        r.facts.stopped,
        r.facts.scope,
        r.facts.model,
        params
    )?;
    writeln!(
        out,
        "  decisions   {} folios ({} pages) on slow nodes in scope ({} hint faults seen, {} decisions out of scope ignored)",
        e.decisions, e.decision_pages, e.hint_faults, e.out_of_scope
    )?;
    let a = &e.agreement;
    writeln!(
        out,
        "  model       promote {} / kernel promoted {} folios: agreement {:.1}% (both {}, kernel only {}, model only {}, neither {})",
        e.model_promote, e.kernel_promote, r.agreement_pct, a.both, a.kernel_only, a.model_only, a.neither
    )?;
    writeln!(
        out,
        "              in pages: promote {} / kernel promoted {}: agreement {:.1}% (both {}, kernel only {}, model only {}, neither {})",
        e.model_promote_pages, e.kernel_promote_pages, r.agreement_pages_pct, a.both_pages, a.kernel_only_pages, a.model_only_pages, a.neither_pages
    )?;
    writeln!(
        out,
        "  queue       {} requests ({} pages), {} new folios, {} duplicates coalesced, {} without target; dropped: {} channel full, {} queue full",
        e.requested, e.requested_pages, m.queue.queued, m.queue.coalesced, e.no_target, e.queue_overflows, m.queue.dropped_full
    )?;
    Ok(())
}

/// A dry run: what would have moved, and the rate that would need.
fn write_would_move(r: &PromoteReport, out: &mut impl Write) -> std::io::Result<()> {
    let m = &r.mover;
    writeln!(
        out,
        "  would move  {} pages in {} folios ({:.1} MiB), nothing moved; rate needed: {:.2} MiB/s mean, {:.2} MiB/s peak (1 s windows); --rate-limit {}",
        m.would_move_pages,
        m.would_move_folios,
        mib(m.would_move_bytes),
        r.rate_needed_mib_per_s,
        r.peak_rate_needed_mib_per_s,
        rate_limit_text(r.facts.rate_limit_bytes_per_s)
    )?;
    if m.queue.dropped_full > 0 {
        writeln!(
            out,
            "              at least: {} requests for folios beyond the first {} were not counted (--queue)",
            m.queue.dropped_full, m.queue.queued
        )?;
    }
    for (node, n) in &m.would_move_by_target {
        writeln!(out, "              to node {node}: {n} pages")?;
    }
    Ok(())
}

/// What moved, at what cost, and how each page ended.
fn write_moves(r: &PromoteReport, out: &mut impl Write) -> std::io::Result<()> {
    let m = &r.mover;
    writeln!(
        out,
        "  moved       {} pages in {} folios ({:.1} MiB): {:.2} MB/s over the run, {:.1} MB/s inside move_pages",
        r.moved_pages,
        r.moved_folios,
        mib(r.moved_bytes),
        r.mb_per_s,
        r.mb_per_s_in_calls
    )?;
    writeln!(
        out,
        "  move_pages  {} calls, {:.3} s moving + {:.3} s querying ({} queries); batch now {} pages{}",
        m.move_calls,
        r.move_pages_s,
        r.query_s,
        m.query_calls,
        m.batch_pages,
        m.ns_per_page
            .map_or(String::new(), |c| format!(" at {:.1} us/page", c / 1e3))
    )?;
    let s = &m.statuses;
    writeln!(
        out,
        "  statuses    (folios) moved {}  already-on-target {}  EBUSY {}  ENOMEM {}  EACCES {}  EFAULT {}  ENOENT {}  not-migrated {}  other {}",
        s.moved, s.already_on_target, s.ebusy, s.enomem, s.eacces, s.efault, s.enoent, s.not_migrated, s.other
    )?;
    Ok(())
}

/// The limits that held moves back, and the pages dropped or checked.
fn write_limits(r: &PromoteReport, out: &mut impl Write) -> std::io::Result<()> {
    let m = &r.mover;
    let floors: Vec<String> = m
        .floor_kb
        .iter()
        .map(|(n, f)| {
            format!(
                "node {n} >= {:.1} MiB free (least headroom {:.1} MiB)",
                *f as f64 / 1024.0,
                m.min_headroom_kb.get(n).copied().unwrap_or(0) as f64 / 1024.0
            )
        })
        .collect();
    writeln!(
        out,
        "  limits      rate {} (waited {}x); floor {} (waited {}x); {} folios given up after {} retries; {} left queued",
        rate_limit_text(r.facts.rate_limit_bytes_per_s),
        m.rate_waits,
        if floors.is_empty() { r.facts.min_free.clone() } else { floors.join(", ") },
        m.floor_waits,
        m.gave_up,
        r.facts.max_retries,
        m.left_in_queue
    )?;
    writeln!(
        out,
        "  processes   {} exited mid-run, {} refused (EPERM), {} folios dropped with them, {} dropped out of scope, {} pids served again for a new process",
        m.processes_exited, m.processes_refused, m.dropped_exited, m.dropped_out_of_scope, m.pids_reused
    )?;
    writeln!(
        out,
        "  verify      {} moved folios checked at the end: {} on target, {} elsewhere, {} gone",
        m.verify.checked, m.verify.on_target, m.verify.elsewhere, m.verify.gone
    )?;
    Ok(())
}

/// The busiest processes, in scope first: folios, and the pages the
/// kernel and numatrace moved (or would).
fn write_processes(r: &PromoteReport, out: &mut impl Write) -> std::io::Result<()> {
    writeln!(out, "  processes (folios; pg: pages)")?;
    writeln!(
        out,
        "  {:>7} {:<16} {:>5} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>9} {:>7} {:>9} {:>9}",
        "PID",
        "COMM",
        "scope",
        "faults",
        "decisions",
        "k:promo",
        "k:pg",
        "model",
        "queued",
        "moved",
        "moved:pg",
        "failed",
        "would",
        "would:pg"
    )?;
    for p in r.processes.iter().take(20) {
        let m = &p.moves;
        writeln!(
            out,
            "  {:>7} {:<16} {:>5} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>9} {:>7} {:>9} {:>9}{}",
            p.pid,
            printable(&p.comm),
            if p.in_scope { "yes" } else { "no" },
            p.hint_faults,
            p.decisions,
            p.kernel_promoted,
            p.kernel_promoted_pages,
            p.model_promote,
            p.requested,
            m.moved,
            m.moved_pages,
            m.failed,
            m.would_move,
            m.would_move_pages,
            if m.exited { "  (exited)" } else { "" }
        )?;
    }
    Ok(())
}
