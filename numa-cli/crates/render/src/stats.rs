//! The text of `numatrace stats`: the run's faults, decisions, scans,
//! costs, funnel, quantiles and histograms.
use std::io::Write;

use numa_core::{
    model::{
        cgroups::{CgroupRow, OTHER_CGROUPS},
        totals::Report,
    },
    printable::printable,
};
use numa_ebpf_common::Outcome;

/// The whole report, section by section.
pub fn print_human(r: &Report, out: &mut impl Write) -> std::io::Result<()> {
    print_faults(r, out)?;
    print_decisions(r, out)?;
    print_scans_and_losses(r, out)?;
    print_costs(r, out)?;
    print_funnel(&r.funnel, r.skips_observable, out)?;
    print_cgroups(&r.by_cgroup, out)?;
    print_quantiles(r, out)?;
    writeln!(out, "\n  scan-to-fault latency (ms)")?;
    crate::histtext::write(out, &r.latency_ms, "ms")?;
    writeln!(
        out,
        "\n  fault-count delta (per-process hint faults between scan and fault)"
    )?;
    crate::histtext::write(out, &r.fault_delta, "")?;
    Ok(())
}

/// `--by cgroup`: each cgroup's page counts, named as memory.stat names
/// them, and where its slow-tier pages stop.
fn print_cgroups(rows: &[CgroupRow], out: &mut impl Write) -> std::io::Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    writeln!(out, "\n  by cgroup, in pages (memory.stat's names)")?;
    writeln!(
        out,
        "    {:>16} {:>10} {:>8} {:>18} {:>13} {:>9}  cgroup",
        "numa_hint_faults", "decisions", "promote", "pgpromote_success", "migrate_fail", "pgdemote"
    )?;
    for row in rows {
        let c = &row.counts;
        let name = match (&row.path, row.id) {
            (_, OTHER_CGROUPS) => "(the other cgroups)".into(),
            (Some(p), _) => printable(p).into_owned(),
            (None, id) => format!("id {id} (no path: removed, or another boot)"),
        };
        writeln!(
            out,
            "    {:>16} {:>10} {:>8} {:>18} {:>13} {:>9}  {name}",
            c.hint_faults, c.decisions, c.kernel_promote, c.promoted, c.migrate_fail, c.demoted
        )?;
        if let Some(f) = &row.funnel {
            writeln!(out, "      {}", f.verdict)?;
        }
    }
    Ok(())
}

/// The vmstat delta of `k`, or "-" when the trace has none.
fn vmstat(r: &Report, k: &str) -> String {
    r.vmstat_delta.get(k).map_or("-".to_owned(), u64::to_string)
}

/// Hint faults beside vmstat's, and those without a record.
fn print_faults(r: &Report, out: &mut impl Write) -> std::io::Result<()> {
    let vm = |k: &str| vmstat(r, k);
    writeln!(out, "numatrace stats over {:.1} s", r.duration_s)?;
    writeln!(
        out,
        "  hint faults          {:>12}   (vmstat numa_hint_faults {})",
        r.hint_faults,
        vm("numa_hint_faults")
    )?;
    let u = &r.unrecorded;
    if u.not_sent + u.open_at_end > 0 {
        writeln!(
            out,
            "    without a record   {:>12}   ({} not sent: filtered, sampled or dropped; {} not ended at the last snapshot)",
            u.not_sent + u.open_at_end,
            u.not_sent,
            u.open_at_end
        )?;
    }
    Ok(())
}

/// The kernel's decisions by reason, migrations and promoted pages, in
/// folios and pages.
fn print_decisions(r: &Report, out: &mut impl Write) -> std::io::Result<()> {
    let vm = |k: &str| vmstat(r, k);
    let p = &r.pages;
    let page = |o: Outcome| p.by_outcome.get(o.name()).copied().unwrap_or(0);
    writeln!(
        out,
        "  (folios, one per hint fault; pages as vmstat counts them)"
    )?;
    writeln!(
        out,
        "  promotion decisions  {:>12}   pages {}",
        r.decisions, p.decisions
    )?;
    writeln!(
        out,
        "    promote            {:>12}   pages {}   (free space: {}, pages {})",
        r.kernel_promote,
        p.kernel_promote,
        r.free_space_promote,
        page(Outcome::PromoteFreeSpace)
    )?;
    writeln!(
        out,
        "    reject threshold   {:>12}   pages {}   ({})",
        r.kernel_reject.latency,
        page(Outcome::RejectLatency),
        r.kernel_threshold_reason
    )?;
    writeln!(
        out,
        "    reject rate limit  {:>12}   pages {}",
        r.kernel_reject.rate_limit,
        page(Outcome::RejectRateLimit)
    )?;
    writeln!(
        out,
        "    reject other       {:>12}   pages {}   not tiering: {}",
        r.kernel_reject.other,
        page(Outcome::RejectOther),
        r.not_tiering
    )?;
    writeln!(
        out,
        "  migrations ok/fail   {:>12} / {}   pages {} / {}",
        r.migrate.success, r.migrate.fail, p.migrate_success, p.migrate_fail
    )?;
    writeln!(
        out,
        "  promoted pages       {:>12}   (vmstat pgpromote_success {})",
        p.promoted,
        vm("pgpromote_success")
    )?;
    print_demotions(r, out)
}

/// Reclaim's demotions per folio, beside vmstat's pgdemote_* in pages.
fn print_demotions(r: &Report, out: &mut impl Write) -> std::io::Result<()> {
    if r.demotions_observable != Some(true) {
        return writeln!(
            out,
            "  demoted pages        {:>12}   (not seen per folio here: the demote hook was not attached; vmstat pgdemote_kswapd {}, pgdemote_direct {})",
            "-",
            vmstat(r, "pgdemote_kswapd"),
            vmstat(r, "pgdemote_direct"),
        );
    }
    let d = &r.demotions;
    let by = |k: &str| d.by_reclaimer.get(k).copied().unwrap_or(0);
    writeln!(
        out,
        "  demoted pages        {:>12}   (kswapd {}, direct {}, khugepaged {}; vmstat pgdemote_kswapd {}, pgdemote_direct {}, pgdemote_khugepaged {})",
        d.pages,
        by("kswapd"),
        by("direct"),
        by("khugepaged"),
        vmstat(r, "pgdemote_kswapd"),
        vmstat(r, "pgdemote_direct"),
        vmstat(r, "pgdemote_khugepaged"),
    )?;
    writeln!(
        out,
        "    folios             {:>12}   pages {} ({} retries of a folio in its batch; {} reclaim batches)",
        d.folios, d.folio_pages, d.retries, d.batches
    )?;
    if d.alloc_failed > 0 {
        writeln!(
            out,
            "    no room below      {:>12}   (chosen for demotion, no lower-tier folio could be allocated)",
            d.alloc_failed
        )?;
    }
    let l = &r.lifecycle;
    writeln!(
        out,
        "  ping-pong            {:>12}   of {} promoted folios demoted again within {:.0} s ({} pages); {} later; {} demoted folios promoted again, {} of them promoted before",
        l.pingpong, l.promotions, l.window_s, l.pingpong_pages, l.demoted_after_window, l.returned, l.repromotions
    )?;
    if l.sampled_one_in > 1 {
        writeln!(
            out,
            "    sampled            1 in {:>7}   folios followed (the table of {} was full, {} let go): counts are estimates, ping-pong +/- {:.0} (3 standard errors)",
            l.sampled_one_in,
            numa_core::model::lifecycle::MAX_FOLLOWED,
            l.forgotten,
            l.pingpong_error
        )?;
    }
    let p = &l.pfn_links;
    if p.down_by_pfn + p.down_by_identity + p.up_checked > 0 {
        writeln!(
            out,
            "    by PFN             {:>12}   demotions linked by the PFN their promotion allocated, {} by identity alone ({} reused PFNs not linked); {} demoted folios faulted again, {} of {} on the PFN their demotion filled",
            p.down_by_pfn, p.down_by_identity, p.down_reused, l.refaulted, p.up_same, p.up_checked
        )?;
    }
    if let Some(d) = l.dram.as_ref().filter(|d| d.rate > 1) {
        writeln!(
            out,
            "    top tier           1 in {:>7}   PFNs followed ({} of {}, {} of --map-budget {}): ping-pongs linked by PFN are estimates",
            d.rate,
            d.followed_pfns,
            d.top_pfns,
            numa_core::mapplan::human_bytes(d.bytes),
            numa_core::mapplan::human_bytes(d.budget_bytes)
        )?;
    }
    print_pingpong_shares(l, out)
}

/// Where the ping-pongs are: the promoting processes with the most, the
/// node pairs the promotions went between, and the promoting cgroups.
fn print_pingpong_shares(
    l: &numa_core::model::lifecycle::LifecycleReport,
    out: &mut impl Write,
) -> std::io::Result<()> {
    let procs = l
        .pingpong_by_process
        .iter()
        .take(3)
        .map(|p| format!("pid {}: {}", p.pid, trips_text(&p.trips)));
    let node = |n: Option<i32>| n.map_or("other".to_owned(), |n| format!("N{n}"));
    let nodes = l
        .pingpong_by_nodes
        .iter()
        .map(|r| format!("{}->{}: {}", node(r.src), node(r.dst), trips_text(&r.trips)));
    let cgroups = l
        .pingpong_by_cgroup
        .iter()
        .take(3)
        .map(|c| format!("cgroup {}: {}", c.cgroup_id, trips_text(&c.trips)));
    for (label, rows) in [
        ("by process", procs.collect::<Vec<_>>()),
        ("by nodes", nodes.collect()),
        ("by cgroup", cgroups.collect()),
    ] {
        if !rows.is_empty() {
            writeln!(out, "    {label:<18} {}", rows.join("; "))?;
        }
    }
    Ok(())
}

/// One key's trips in a line: ping-pongs of promotions, the reclaimers
/// that demoted them, the median residency, the bytes moved for nothing
/// and the folios promoted again.
fn trips_text(t: &numa_core::model::lifecycle::TripCounts) -> String {
    let mut s = format!("{} of {}", t.pingpong, t.promotions);
    let demoted: Vec<String> = t
        .demoted_by
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    if !demoted.is_empty() {
        s += &format!(" (demoted: {})", demoted.join(", "));
    }
    if let Some(ms) = t.residency_p50_ms {
        s += &format!(", median {:.1} s", ms as f64 / 1e3);
    }
    if t.moved_for_nothing_bytes > 0 {
        s += &format!(
            ", {} for nothing",
            numa_core::mapplan::human_bytes(t.moved_for_nothing_bytes)
        );
    }
    if t.repromotions > 0 {
        s += &format!(", {} promoted again", t.repromotions);
    }
    s
}

/// The scanner's work, and what the probes lost or sent late.
fn print_scans_and_losses(r: &Report, out: &mut impl Write) -> std::io::Result<()> {
    let vm = |k: &str| vmstat(r, k);
    writeln!(
        out,
        "  scan ranges          {:>12}   PTEs updated {} (vmstat numa_pte_updates {})",
        r.scan_ranges,
        r.scan_ptes_updated,
        vm("numa_pte_updates")
    )?;
    writeln!(out, "  stamp misses         {:>12}", r.stamp_misses)?;
    let c = &r.checks;
    if c.stamps_from_pass + c.stamps_unmatched > 0 {
        writeln!(
            out,
            "  faults' passes       {:>12}   found by the folio's access value ({} of them one of several processes' passes of the same tick); {} not (another process's scan, before attach, or a lost pass record)",
            c.stamps_from_pass, c.stamps_ambiguous, c.stamps_unmatched
        )?;
    }
    writeln!(
        out,
        "  ring drops           {:>12}   map evictions {}",
        r.drops, r.evictions
    )?;
    if r.runs_missed > 0 {
        writeln!(
            out,
            "  runs missed          {:>12}   (a probe preempted on its CPU)",
            r.runs_missed
        )?;
    }
    if r.late_records > 0 {
        writeln!(
            out,
            "  late fault records   {:>12}   (sent without task_numa_fault's probe: {} failed migrations, {} at a thread's exit)",
            r.late_records, r.no_account_records, r.exit_records
        )?;
    }
    Ok(())
}

/// Sampling, the probes' time in the scanner and on the fault path, and
/// numatrace's own CPU.
fn print_costs(r: &Report, out: &mut impl Write) -> std::io::Result<()> {
    if let Some(s) = &r.sampling {
        writeln!(out, "  {}", s.describe())?;
    }
    if let Some(c) = &r.scanner_cost {
        writeln!(
            out,
            "  in the scanner       at most {:.1} ns of program time per protected PTE \
             (passes {:.1}, the decision's exchange {:.1}); \
             the kernel charges its scanner 32 times its runtime",
            c.ns_per_pte_at_most, c.pass_ns_per_pte, c.exchange_ns_per_pte
        )?;
    }
    if let Some(c) = &r.fault_cost {
        writeln!(
            out,
            "  on the fault path    at most {:.0} ns of program time per hint fault \
             ({:.2} program runs each, each behind a trampoline or kprobe not counted here); \
             a slower fault comes later after its scan, past hot_threshold_ms sooner",
            c.ns_per_hint_fault_at_most, c.runs_per_hint_fault
        )?;
    }
    if let Some(c) = &r.numatrace_cpu {
        writeln!(
            out,
            "  numatrace's own CPU  attaching {:.2} s, running {:.2} s ({:.0} ns per record read)",
            c.attach_s, c.run_s, c.run_ns_per_record
        )?;
    }
    if let Some(d) = &r.damon {
        writeln!(out, "  {}", d.describe())?;
    }
    Ok(())
}

/// The quantiles, with their rank error when folios were sampled.
fn print_quantiles(r: &Report, out: &mut impl Write) -> std::io::Result<()> {
    let e = &r.estimates;
    let row = |q: &std::collections::BTreeMap<std::borrow::Cow<str>, Option<f64>>| {
        q.iter()
            .map(|(k, v)| format!("{k} {}", v.map_or("-".to_owned(), |v| format!("<={v}"))))
            .collect::<Vec<_>>()
            .join(", ")
    };
    writeln!(out, "\n  latency ms: {}", row(&e.latency_ms))?;
    writeln!(out, "  fault delta: {}", row(&e.fault_delta))?;
    if e.rank_error > 0.0 {
        writeln!(
            out,
            "  (from sampled folios: each pN lies between the full population's p(N-{0:.1}) and p(N+{0:.1}) at 99.9%)",
            100.0 * e.rank_error
        )?;
    }
    Ok(())
}

/// The funnel section: per process, its verdict and the stages behind it.
pub fn print_funnel(
    rows: &[numa_core::model::funnel::ProcessFunnel],
    skips_observable: Option<bool>,
    out: &mut impl Write,
) -> std::io::Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "\n  funnel (slow-tier pages by process, most activity first; faults, decisions and migrations in folios, one per hint fault, and in pages, as vmstat's pgpromote_* count them)"
    )?;
    // "N folios / P pages": the pages say how much memory a count moved.
    let fp = |folios: u64, pages: u64| format!("{folios} folios / {pages} pages");
    for p in rows {
        let s = &p.stages;
        let comm = if p.comm.is_empty() { "" } else { " " };
        let name = printable(&p.comm);
        writeln!(out, "    pid {}{comm}{name}: {}", p.pid, p.verdict)?;
        if let Some([start, end]) = p.verdict_vma {
            writeln!(out, "      in VMA {start:#x}-{end:#x}")?;
        }
        let last = s
            .last_scan_s_ago
            .map_or("none".to_owned(), |t| format!("{t:.1} s ago"));
        writeln!(
            out,
            "      scanned {} passes, {} PTEs protected, last pass {last}",
            s.scan_passes, s.ptes_protected
        )?;
        if skips_observable == Some(false) {
            writeln!(
                out,
                "      skips not observable on this kernel (no sched:sched_skip_vma_numa tracepoint)"
            )?;
        } else if !s.skips.is_empty() {
            let skips: Vec<String> = s
                .skips
                .iter()
                .map(|(r, k)| match k.since_last_scan {
                    0 => format!("{r} {}", k.count),
                    n => format!("{r} {} ({n} since the last pass)", k.count),
                })
                .collect();
            writeln!(out, "      skipped {}", skips.join(", "))?;
        }
        writeln!(
            out,
            "      faulted {}, promoted {}\n      refused: latency {}, rate limit {}, other {}\n      migrations: ok {}, failed {}",
            fp(s.slow_faults, s.slow_fault_pages),
            fp(s.promoted, s.promoted_pages),
            fp(s.rejected_latency, s.rejected_latency_pages),
            fp(s.rejected_rate_limit, s.rejected_rate_limit_pages),
            fp(s.rejected_other, s.rejected_other_pages),
            fp(s.migrate_ok, s.migrate_ok_pages),
            fp(s.migrate_fail, s.migrate_fail_pages)
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use numa_core::model::lifecycle::{
        CgroupPingpong, LifecycleReport, NodesPingpong, ProcessPingpong, TripCounts,
    };

    #[test]
    fn ping_pong_shares_name_the_processes_and_node_pairs() {
        let trips = |pingpong, promotions| TripCounts {
            promotions,
            pingpong,
            ..TripCounts::default()
        };
        let l = LifecycleReport {
            pingpong_by_process: vec![ProcessPingpong {
                pid: 914,
                trips: TripCounts {
                    demoted_by: [("direct".to_owned(), 9), ("kswapd".to_owned(), 60)].into(),
                    pingpong_pages: 51 * 512,
                    moved_for_nothing_bytes: 51 * 512 * 2 * 4096,
                    residency_p50_ms: Some(17_179),
                    repromotions: 3,
                    ..trips(51, 100)
                },
            }],
            pingpong_by_nodes: vec![
                NodesPingpong {
                    src: Some(1),
                    dst: Some(0),
                    trips: trips(50, 90),
                },
                NodesPingpong {
                    src: None,
                    dst: None,
                    trips: trips(1, 10),
                },
            ],
            pingpong_by_cgroup: vec![CgroupPingpong {
                cgroup_id: 0,
                trips: trips(51, 100),
            }],
            ..LifecycleReport::default()
        };
        let mut out = Vec::new();
        super::print_pingpong_shares(&l, &mut out).expect("write");
        assert_eq!(
            String::from_utf8_lossy(&out),
            "    by process         pid 914: 51 of 100 (demoted: direct 9, kswapd 60), median 17.2 s, 204.0 MiB for nothing, 3 promoted again\n    \
             by nodes           N1->N0: 50 of 90; other->other: 1 of 10\n    \
             by cgroup          cgroup 0: 51 of 100\n"
        );
        let mut out = Vec::new();
        super::print_pingpong_shares(&LifecycleReport::default(), &mut out).expect("write");
        assert!(out.is_empty(), "no ping-pong, no lines");
    }
}
