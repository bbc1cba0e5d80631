//! The text of `numatrace shadow` and `numatrace replay`: the models
//! against the kernel as a human report, CSV or JSON, and a threshold
//! sweep's table.
use std::io::Write;

use anyhow::Result;

use numa_core::model::{
    funnel::{ProcessFunnel, Watch},
    policy::params_text,
    scorecard::Scorecard,
    shadow::{Agreement, RefaultReport, Shadow, ShadowReport},
};
use numa_core::{
    decode::{Event, Snapshot},
    params::KernelParams,
    plan::AttachPlan,
    printable::printable,
    sink::Sink,
};

/// The shadow report with the promotion funnel of the same events.
#[derive(serde::Serialize)]
pub struct Output<'a> {
    #[serde(flatten)]
    pub shadow: &'a ShadowReport,
    pub funnel: Vec<ProcessFunnel>,
    /// As in `stats`: whether the kernel reports the VMAs its scanner skips.
    pub skips_observable: Option<bool>,
    /// Every policy judged against a truth file, when one was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scorecard: Option<&'a Scorecard>,
}

impl<'a> Output<'a> {
    pub fn new(
        shadow: &'a ShadowReport,
        funnel: &Watch,
        plan: Option<&AttachPlan>,
        params: Option<&KernelParams>,
    ) -> Self {
        Output {
            shadow,
            funnel: funnel.report(params.map_or_else(Default::default, |p| p.hotness)),
            skips_observable: numa_core::model::totals::skips_observable(plan),
            scorecard: None,
        }
    }

    pub fn with_scorecard(self, scorecard: Option<&'a Scorecard>) -> Self {
        Output { scorecard, ..self }
    }
}

/// Writes an interim report every `every_ns` of snapshot time while the
/// shadow engine runs: each report in one write, so no other line of the
/// same stream lands inside it.
pub struct Interval<'a, W: Write> {
    shadow: &'a mut Shadow,
    every_ns: u64,
    last_ns: Option<u64>,
    json: bool,
    out: W,
}

impl<'a, W: Write> Interval<'a, W> {
    /// `every_ns` 0: no interim report.
    pub fn new(shadow: &'a mut Shadow, every_ns: u64, json: bool, out: W) -> Self {
        Interval {
            shadow,
            every_ns,
            last_ns: None,
            json,
            out,
        }
    }
}

impl<W: Write> Sink for Interval<'_, W> {
    fn header(&mut self, h: &numa_core::trace::Header) -> Result<()> {
        self.shadow.header(h);
        Ok(())
    }
    fn event(&mut self, ev: &Event) -> Result<()> {
        self.shadow.event(ev);
        Ok(())
    }
    fn snapshot(&mut self, s: &Snapshot) -> Result<()> {
        self.shadow.snapshot(s);
        let last = *self.last_ns.get_or_insert(s.ts_ns);
        if self.every_ns > 0 && s.ts_ns.saturating_sub(last) >= self.every_ns {
            self.last_ns = Some(s.ts_ns);
            let r = self.shadow.report();
            let mut buf = Vec::new();
            if self.json {
                writeln!(buf, "{}", serde_json::to_string(&r)?)?;
            } else {
                write_human(&r, &mut buf)?;
            }
            self.out.write_all(&buf)?;
        }
        Ok(())
    }
}

/// One row per model. The columns before `decision_pages` count folios
/// (`refault_pages` too: refused folios followed); those from it on, pages.
pub fn write_csv(r: &ShadowReport, out: &mut impl Write) -> std::io::Result<()> {
    writeln!(out, "model,params,decisions,kernel_promote,promote,reject,both,kernel_only,model_only,neither,agreement_pct,refault_pages,refaulted,refaulted_pct,\
         decision_pages,kernel_promote_pages,promote_pages,reject_pages,both_pages,kernel_only_pages,model_only_pages,neither_pages,agreement_pages_pct,refault_followed_pages,refaulted_pages,refaulted_pages_pct,\
         pingpong_shared,pingpong_avoided")?;
    for m in &r.models {
        let (a, e) = (&m.agreement, &m.refault_after_model_only);
        writeln!(
            out,
            "{},{},{},{},{},{},{},{},{},{},{:.2},{},{},{:.2},{},{},{},{},{},{},{},{},{:.2},{},{},{:.2},{},{}",
            m.name,
            params_text(&m.params, ";"),
            r.decisions,
            r.kernel.promote,
            m.promote,
            m.reject,
            a.both,
            a.kernel_only,
            a.model_only,
            a.neither,
            m.agreement_pct,
            e.pages,
            e.refaulted,
            e.refaulted_pct,
            r.decision_pages,
            r.kernel.promote_pages,
            m.projected.promote_pages,
            m.reject_pages,
            a.both_pages,
            a.kernel_only_pages,
            a.model_only_pages,
            a.neither_pages,
            m.agreement_pages_pct,
            e.followed_pages,
            e.refaulted_pages,
            e.refaulted_pages_pct,
            m.pingpong.shared,
            m.pingpong.avoided
        )?;
    }
    Ok(())
}

pub fn write_human(r: &ShadowReport, out: &mut impl Write) -> std::io::Result<()> {
    writeln!(
        out,
        "numatrace shadow report: {:.1} s, {} hint faults ({} pages), {} tiering decisions ({} pages), {} events lost to ring drops",
        r.duration_s, r.hint_faults, r.hint_fault_pages, r.decisions, r.decision_pages, r.drops
    )?;
    writeln!(out, "  {UNITS}")?;
    write_sampling(r, out)?;
    writeln!(out)?;
    write_policies(r, out)?;
    writeln!(out)?;
    write_projected(r, out)?;
    writeln!(out)?;
    write_agreement(r, out)?;
    writeln!(out)?;
    write_evidence(r, out)?;
    write_pingpong_cost(r, out)?;
    writeln!(out)?;
    write_processes(r, out)
}

/// The cost column: of the kernel's promotions reclaim demoted again,
/// those each model would also have made.
fn write_pingpong_cost(r: &ShadowReport, out: &mut impl Write) -> std::io::Result<()> {
    let l = &r.lifecycle;
    if l.promotions == 0 {
        return Ok(());
    }
    writeln!(
        out,
        "  ping-pong cost: the kernel's promotions demoted again within {:.0} s: {} of {} ({} pages)",
        l.window_s, l.pingpong, l.promotions, l.pingpong_pages
    )?;
    for m in &r.models {
        let c = &m.pingpong;
        writeln!(
            out,
            "  {:<40} {:>8} would have been made too, {:>8} avoided",
            m.name, c.shared, c.avoided
        )?;
    }
    writeln!(
        out,
        "  note: what a model promotes that the kernel refused stayed on the slow tier: whether it would have bounced is not observable"
    )
}

/// What the tables count, said once above them.
const UNITS: &str = "units: folios, one per hint fault (as vmstat's numa_hint_faults), and pages, \
    a THP's 512 (as vmstat's pgpromote_success and pgpromote_candidate): compare pages with vmstat";

/// A `folios` row of a table and its `pages` row, each after its label.
fn two_rows(
    out: &mut impl Write,
    labels: [&str; 2],
    row: impl Fn(&mut dyn Write, bool) -> std::io::Result<()>,
) -> std::io::Result<()> {
    for (pages, (label, unit)) in [false, true]
        .into_iter()
        .zip(labels.iter().zip(["folios", "pages"]))
    {
        write!(out, "  {label:<34} {unit:<6}")?;
        row(out, pages)?;
        writeln!(out)?;
    }
    Ok(())
}

/// How much of the slow memory the models saw, and their error from it.
fn write_sampling(r: &ShadowReport, out: &mut impl Write) -> std::io::Result<()> {
    let Some(s) = &r.sampling else {
        return Ok(());
    };
    writeln!(out, "  {}", s.sampling.describe())?;
    if !s.sampling.sampled() {
        return Ok(());
    }
    writeln!(
        out,
        "  models judged {} of the {} decisions (followed folios; {} of {} pages); model counts are of those, \
         x{} for all; agreement error (of folios) at 3 sigma:",
        r.judged_decisions, r.decisions, r.judged_decision_pages, r.decision_pages, s.sampling.rate
    )?;
    for (m, e) in r.models.iter().zip(&s.agreement_pct_error) {
        writeln!(
            out,
            "    {:<28} {:.1}% +/- {:.1}",
            m.name, m.agreement_pct, e
        )?;
    }
    Ok(())
}

/// What the kernel and each model decided, by reason: folios, then pages.
fn write_policies(r: &ShadowReport, out: &mut impl Write) -> std::io::Result<()> {
    writeln!(
        out,
        "  {:<34} {:<6} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "policy", "unit", "promote", "rej:lat", "rej:rate", "rej:other", "agree%"
    )?;
    let k = &r.kernel;
    let kernel = [
        format!("kernel (free space {})", k.free_space),
        format!("  (free space {})", k.free_space_pages),
    ];
    two_rows(out, [&kernel[0], &kernel[1]], |out, pages| {
        let pick = |folios: u64, in_pages: u64| if pages { in_pages } else { folios };
        write!(
            out,
            " {:>10} {:>10} {:>10} {:>10} {:>10}",
            pick(k.promote, k.promote_pages),
            pick(k.reject_latency, k.reject_latency_pages),
            pick(k.reject_rate_limit, k.reject_rate_limit_pages),
            pick(k.reject_other, k.reject_other_pages),
            "-"
        )
    })?;
    for m in &r.models {
        let label = truncate(&format!("{} {}", m.name, params_text(&m.params, ",")), 34);
        two_rows(out, [&label, ""], |out, pages| {
            let (reasons, promote, agree) = if pages {
                (
                    &m.reasons_pages,
                    m.projected.promote_pages,
                    m.agreement_pages_pct,
                )
            } else {
                (&m.reasons, m.promote, m.agreement_pct)
            };
            let reason = |n: &str| reasons.get(n).copied().unwrap_or(0);
            write!(
                out,
                " {:>10} {:>10} {:>10} {:>10} {:>9.1}%",
                promote,
                reason("latency") + reason("fault_count") + reason("first_touch"),
                reason("rate_limit"),
                reason("no_stamp"),
                agree
            )
        })?;
    }
    writeln!(
        out,
        "  kernel migrations: {} succeeded, {} failed (folios); {} and {} pages",
        k.migrate_success, k.migrate_fail, k.migrate_success_pages, k.migrate_fail_pages
    )
}

/// The benchmark counters each model projects: pages to compare with
/// vmstat, and the same in folios.
fn write_projected(r: &ShadowReport, out: &mut impl Write) -> std::io::Result<()> {
    writeln!(
        out,
        "  {:<34} {:<6} {:>10} {:>11} {:>14} {:>15}",
        "projected (pages: as vmstat)",
        "unit",
        "promote",
        "candidates",
        "rej:threshold",
        "rej:rate_limit"
    )?;
    for m in &r.models {
        let p = &m.projected;
        two_rows(out, [&truncate(&m.name, 34), ""], |out, pages| {
            let row = if pages {
                [
                    p.promote_pages,
                    p.candidate_pages,
                    p.reject_threshold_pages,
                    p.reject_rate_limit_pages,
                ]
            } else {
                [
                    m.promote,
                    p.candidate_folios,
                    p.reject_threshold,
                    p.reject_rate_limit,
                ]
            };
            write!(
                out,
                " {:>10} {:>11} {:>14} {:>15}",
                row[0], row[1], row[2], row[3]
            )
        })?;
    }
    Ok(())
}

/// Each model's decisions against the kernel's: folios, then pages.
fn write_agreement(r: &ShadowReport, out: &mut impl Write) -> std::io::Result<()> {
    writeln!(
        out,
        "  {:<34} {:<6} {:>10} {:>12} {:>11} {:>11}",
        "agreement with the kernel", "unit", "both", "kernel_only", "model_only", "neither"
    )?;
    for m in &r.models {
        let a = &m.agreement;
        two_rows(out, [&truncate(&m.name, 34), ""], |out, pages| {
            let row = if pages {
                [
                    a.both_pages,
                    a.kernel_only_pages,
                    a.model_only_pages,
                    a.neither_pages,
                ]
            } else {
                [a.both, a.kernel_only, a.model_only, a.neither]
            };
            write!(
                out,
                " {:>10} {:>12} {:>11} {:>11}",
                row[0], row[1], row[2], row[3]
            )
        })?;
    }
    write_stamped_elsewhere(r, out)
}

/// Agreement on shared folios a scan of another process stamped, where the
/// fault-count patch subtracts one process's count from another's.
fn write_stamped_elsewhere(r: &ShadowReport, out: &mut impl Write) -> std::io::Result<()> {
    let n = |a: &Agreement| a.both + a.kernel_only + a.model_only + a.neither;
    if r.models
        .iter()
        .all(|m| n(&m.agreement_stamped_elsewhere) == 0)
    {
        return Ok(());
    }
    writeln!(
        out,
        "  on folios stamped by another process's scan (shared memory):"
    )?;
    for m in &r.models {
        let a = &m.agreement_stamped_elsewhere;
        writeln!(
            out,
            "    {:<32} {:>6.2}% of {} decisions",
            truncate(&m.name, 32),
            a.agree_pct(),
            n(a)
        )?;
    }
    Ok(())
}

/// Whether refused pages were still hot, and the latencies the kernel
/// rejected against its threshold.
fn write_evidence(r: &ShadowReport, out: &mut impl Write) -> std::io::Result<()> {
    writeln!(
        out,
        "  outcome evidence: refused folios that faulted again (were still hot)"
    )?;
    for m in &r.models {
        write_refault(
            out,
            &format!("{} wanted, kernel refused", m.name),
            &m.refault_after_model_only,
        )?;
    }
    write_refault(
        out,
        "kernel refused, no model wanted",
        &r.refault_after_neither,
    )?;
    writeln!(out, "  note: {}", r.evidence_note)?;
    if !r.latency_threshold_samples.is_empty() {
        writeln!(out)?;
        writeln!(out, "  rejected samples: latency  threshold (ms)")?;
        for s in r.latency_threshold_samples.iter().take(8) {
            writeln!(out, "  {:>24} {:>10}", s.latency_ms, s.threshold_ms)?;
        }
    }
    Ok(())
}

fn write_refault(out: &mut impl Write, label: &str, e: &RefaultReport) -> std::io::Result<()> {
    writeln!(
        out,
        "  {:<40} {:>8} folios ({} pages), {:>8} refaulted ({:>5.1}%; {} pages, {:.1}%), delay p50 {} ms, p90 {} ms",
        label,
        e.pages,
        e.followed_pages,
        e.refaulted,
        e.refaulted_pct,
        e.refaulted_pages,
        e.refaulted_pages_pct,
        e.delay_ms_p50.map_or("-".into(), |v| format!("<={v}")),
        e.delay_ms_p90.map_or("-".into(), |v| format!("<={v}"))
    )
}

/// Per process, then per node pair: folios, then pages.
fn write_processes(r: &ShadowReport, out: &mut impl Write) -> std::io::Result<()> {
    writeln!(
        out,
        "  {:>7} {:<16} {:<6} {:>10} {:>10} {:>10} {:>10}  model would-promote",
        "PID", "COMM", "unit", "faults", "decisions", "k:promote", "k:rej:lat"
    )?;
    for p in &r.processes {
        for (unit, row, models) in [
            (
                "folios",
                [
                    p.hint_faults,
                    p.decisions,
                    p.kernel_promote,
                    p.reject_latency,
                ],
                &p.model_promote,
            ),
            (
                "pages",
                [
                    p.hint_fault_pages,
                    p.decision_pages,
                    p.kernel_promote_pages,
                    p.reject_latency_pages,
                ],
                &p.model_promote_pages,
            ),
        ] {
            writeln!(
                out,
                "  {:>7} {:<16} {unit:<6} {:>10} {:>10} {:>10} {:>10}  {models:?}",
                p.pid,
                printable(&p.comm),
                row[0],
                row[1],
                row[2],
                row[3]
            )?;
        }
        write_would_change(r, p, out)?;
    }
    writeln!(out)?;
    for n in &r.node_pairs {
        writeln!(
            out,
            "  node {} -> {}: {} decisions ({} pages), kernel promoted {} ({} pages), models {:?} (pages {:?})",
            n.src_node,
            n.dst_node,
            n.decisions,
            n.decision_pages,
            n.kernel_promote,
            n.kernel_promote_pages,
            n.model_promote,
            n.model_promote_pages
        )?;
    }
    Ok(())
}

/// What each model would change for a process: the refusals it would
/// have promoted.
fn write_would_change(
    r: &ShadowReport,
    p: &numa_core::model::shadow::ProcessRow,
    out: &mut impl Write,
) -> std::io::Result<()> {
    let refused = p.decisions.saturating_sub(p.kernel_promote);
    let refused_pages = p.decision_pages.saturating_sub(p.kernel_promote_pages);
    let counts = p
        .model_promote_refused
        .iter()
        .zip(&p.model_promote_refused_pages);
    for (m, (n, pages)) in r.models.iter().zip(counts) {
        writeln!(
            out,
            "  {:>7} {} would have promoted {n} folios ({pages} pages) of the {refused} ({refused_pages} pages) the kernel refused",
            "", m.name
        )?;
    }
    Ok(())
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        s.chars().take(n - 1).chain(std::iter::once('~')).collect()
    }
}

/// The sweep's rows as a JSON array; with a scorecard, an object of the
/// rows (`sweep`) and the scorecard (`scorecard`).
pub fn write_sweep_json(
    r: &ShadowReport,
    param: &str,
    scorecard: Option<&Scorecard>,
    buf: &mut Vec<u8>,
) -> Result<()> {
    let rows: Vec<serde_json::Value> = r
        .models
        .iter()
        .map(|m| {
            serde_json::json!({
                "param": param, "value": m.params.get(param), "promote": m.promote, "reject": m.reject,
                "reject_pages": m.reject_pages,
                "agreement": m.agreement, "agreement_pct": m.agreement_pct,
                "agreement_pages_pct": m.agreement_pages_pct,
                "refault_after_model_only": m.refault_after_model_only,
                "projected": m.projected,
                "pingpong": m.pingpong,
            })
        })
        .collect();
    match scorecard {
        Some(card) => serde_json::to_writer_pretty(
            &mut *buf,
            &serde_json::json!({"sweep": rows, "scorecard": card}),
        )?,
        None => serde_json::to_writer_pretty(&mut *buf, &rows)?,
    }
    writeln!(buf)?;
    Ok(())
}

pub fn write_sweep_human(
    r: &ShadowReport,
    name: &str,
    param: &str,
    buf: &mut Vec<u8>,
) -> std::io::Result<()> {
    writeln!(
        buf,
        "sweep of {name} {param} over {} decisions ({} pages), kernel promoted {} ({} pages)",
        r.decisions, r.decision_pages, r.kernel.promote, r.kernel.promote_pages
    )?;
    writeln!(buf, "  {UNITS}; columns count folios unless named pages")?;
    writeln!(
        buf,
        "  {:>12} {:>10} {:>10} {:>10} {:>10} {:>10} {:>12} {:>10} {:>10}",
        param,
        "promote",
        "pages",
        "agree%",
        "agree%pg",
        "model_only",
        "kernel_only",
        "refault%",
        "refaulted"
    )?;
    for m in &r.models {
        let e = &m.refault_after_model_only;
        writeln!(
            buf,
            "  {:>12} {:>10} {:>10} {:>9.1}% {:>9.1}% {:>10} {:>12} {:>9.1}% {:>10}",
            m.params.get(param).map_or("?", String::as_str),
            m.promote,
            m.projected.promote_pages,
            m.agreement_pct,
            m.agreement_pages_pct,
            m.agreement.model_only,
            m.agreement.kernel_only,
            e.refaulted_pct,
            e.refaulted
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use numa_core::{
        decode::fixtures::{self, fault},
        model::policy::{self, KernelDefaults},
    };
    use numa_ebpf_common::{fault_flags as ff, Outcome};

    /// A promoted and migrated THP (512 pages) and a refused 4 KiB folio,
    /// through the shadow engine and the funnel, as the text shows them.
    fn thp_and_small() -> (ShadowReport, Watch) {
        let k = KernelDefaults::default();
        let d = policy::ModelDefaults::default();
        let mut shadow = Shadow::new(
            vec![policy::build("kernel-time", &d, &k).expect("model")],
            10,
        );
        let mut funnel = Watch::new(1);
        let mut thp = fault(100, 1, 100, Outcome::PromoteHot);
        thp.nr_pages = 512;
        thp.flags |= ff::MIGRATE_TRIED;
        thp.migrate_ok = 1;
        for f in [thp, fault(101, 2, 5000, Outcome::RejectLatency)] {
            shadow.event(&Event::Fault(f));
            funnel.event(&Event::Fault(f)).expect("funnel");
        }
        (shadow.report(), funnel)
    }

    /// Two promotions of the kernel at 100 ms latency, one demoted again:
    /// kernel-time (1 s threshold) would have made it too, two-touch
    /// (a first touch is not enough) would have avoided it.
    #[test]
    fn the_cost_column_splits_the_kernels_ping_pongs_by_model() {
        let k = KernelDefaults::default();
        let d = policy::ModelDefaults::default();
        let models = ["kernel-time", "two-touch"]
            .iter()
            .map(|s| policy::build(s, &d, &k).expect("model"))
            .collect();
        let mut shadow = Shadow::new(models, 10);
        for (i, index) in [(100, 7), (101, 8)] {
            let f = fixtures::migrated(fault(i, i, 100, Outcome::PromoteHot), 0xa1, index);
            shadow.event(&Event::Fault(f));
        }
        let d = fixtures::demotion(1_000_000_000_000 + 20_000_000_000, 0xa1, 7);
        shadow.event(&Event::Demote(d));
        let r = shadow.report();
        assert_eq!((r.lifecycle.promotions, r.lifecycle.pingpong), (2, 1));
        let cost: Vec<(u64, u64)> = r
            .models
            .iter()
            .map(|m| (m.pingpong.shared, m.pingpong.avoided))
            .collect();
        assert_eq!(cost, vec![(1, 0), (0, 1)]);
        let mut out = Vec::new();
        write_human(&r, &mut out).expect("text");
        let text = String::from_utf8(out).expect("UTF-8");
        assert!(
            text.contains("the kernel's promotions demoted again within 600 s: 1 of 2 (1 pages)"),
            "{text}"
        );
        let mut csv = Vec::new();
        write_csv(&r, &mut csv).expect("csv");
        let csv = String::from_utf8(csv).expect("UTF-8");
        assert!(csv
            .lines()
            .next()
            .is_some_and(|h| h.ends_with(",pingpong_shared,pingpong_avoided")));
        assert!(
            csv.lines().nth(2).is_some_and(|l| l.ends_with(",0,1")),
            "{csv}"
        );
    }

    #[test]
    fn the_text_gives_folios_and_pages() {
        let (r, funnel) = thp_and_small();
        let mut out = Vec::new();
        write_human(&r, &mut out).expect("text");
        let rows = funnel.report(Default::default());
        crate::stats::print_funnel(&rows, None, &mut out).expect("funnel text");
        let text = String::from_utf8(out).expect("UTF-8");
        for want in [
            "2 hint faults (513 pages), 2 tiering decisions (513 pages)",
            "kernel migrations: 1 succeeded, 0 failed (folios); 512 and 0 pages",
            "faulted 2 folios / 513 pages, promoted 1 folios / 512 pages",
            "refused: latency 1 folios / 1 pages",
            "migrations: ok 1 folios / 512 pages",
            "1 folios (1 pages)",
        ] {
            assert!(text.contains(want), "no `{want}` in\n{text}");
        }
        let folios = text
            .lines()
            .find(|l| l.contains("kernel (free space"))
            .expect("kernel row");
        let pages = text
            .lines()
            .find(|l| l.contains("  (free space"))
            .expect("pages row");
        fn cells(l: &str) -> Vec<&str> {
            l.split_whitespace().rev().skip(1).take(4).collect()
        }
        assert_eq!(cells(folios), ["0", "0", "1", "1"], "{folios}");
        assert_eq!(cells(pages), ["0", "0", "1", "512"], "{pages}");
    }

    #[test]
    fn the_csv_puts_pages_after_the_folio_columns() {
        let (r, _) = thp_and_small();
        let mut out = Vec::new();
        write_csv(&r, &mut out).expect("csv");
        let text = String::from_utf8(out).expect("UTF-8");
        let mut lines = text.lines().map(|l| l.split(',').collect::<Vec<_>>());
        let (head, row) = (lines.next().expect("head"), lines.next().expect("row"));
        let col = |name: &str| {
            let i = head.iter().position(|h| *h == name).expect(name);
            row[i]
        };
        assert_eq!((col("decisions"), col("decision_pages")), ("2", "513"));
        assert_eq!((col("both"), col("both_pages")), ("1", "512"));
        assert_eq!((col("neither"), col("neither_pages")), ("1", "1"));
    }

    #[test]
    fn an_interim_report_every_interval_of_snapshot_time() {
        let (k, d) = (KernelDefaults::default(), policy::ModelDefaults::default());
        let model = || vec![policy::build("kernel-time", &d, &k).expect("model")];
        let snap = |ms: u64| Snapshot {
            ts_ns: ms * 1_000_000,
            ..Snapshot::default()
        };
        let run = |every_ns: u64, json: bool| {
            let (mut shadow, mut out) = (Shadow::new(model(), 10), Vec::new());
            let mut interval = Interval::new(&mut shadow, every_ns, json, &mut out);
            for ms in [0, 500, 1000, 2500, 3000] {
                interval.snapshot(&snap(ms)).expect("snapshot");
            }
            String::from_utf8(out).expect("UTF-8")
        };
        // At 1 s (1 s after 0) and 2.5 s (1.5 s after 1 s), not at 3 s.
        let json = run(1_000_000_000, true);
        assert_eq!(json.lines().count(), 2, "{json}");
        for line in json.lines() {
            let v: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
            assert!(v["models"].is_array(), "{line}");
        }
        let text = run(1_000_000_000, false);
        assert_eq!(text.matches("numatrace shadow report:").count(), 2);
        assert!(run(0, false).is_empty(), "0: no interim report");
    }
}
