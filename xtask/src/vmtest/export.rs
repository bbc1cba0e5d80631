//! VM test of `numatrace export` with live probes: the guest runs
//! the exporter (HTTP on the guest's loopback and a textfile) around the
//! hot-chunks workload and scrapes `/metrics` with busybox wget while it
//! runs. The host checks the scrapes and the final textfile: the classic
//! text format, counters that never decrease, decisions that match the
//! hint-fault counter, consistent histograms, per-node vmstat and
//! per-process series, the promoter's metrics from a stand-in state file,
//! and the `/` page with the attach plan. Then
//! `numatrace hist --json --sample 4` runs live around another workload:
//! the probes count the three faults in four whose records they do not
//! send, the reader the fourth, and the histograms must hold them all.
use std::{collections::BTreeMap, path::Path};

use anyhow::{ensure, Context, Result};

use crate::kernels::Series;
use crate::results::{read_report, text};
use numa_core::histjson::JsonInterval;
use numa_core::workload::Summary;

/// The guest script (in `$RESULTS`). The loopback is down in the test bed's
/// init; the exporter binds 127.0.0.1 (its default is loopback-only).
pub(super) const SCRIPT: &str = include_str!("export.sh");

/// `name{labels}` -> value, from the classic text format.
type Samples = BTreeMap<String, f64>;

fn parse(text: &str) -> Result<Samples> {
    let mut out = Samples::new();
    for line in text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let (series, value) = line
            .rsplit_once(' ')
            .with_context(|| format!("not a sample line: {line:?}"))?;
        let v: f64 = value
            .parse()
            .with_context(|| format!("not a value in {line:?}"))?;
        out.insert(series.to_owned(), v);
    }
    Ok(out)
}

/// Where a series' labels start.
const LABELS_OPEN: char = '{';

/// Sum of every series of `metric` whose labels contain all of `with`.
fn sum(s: &Samples, metric: &str, with: &[&str]) -> f64 {
    s.iter()
        .filter(|(k, _)| {
            k.split(LABELS_OPEN).next() == Some(metric) && with.iter().all(|w| k.contains(w))
        })
        .map(|(_, v)| v)
        .sum()
}

/// A parsed exposition and the file it came from.
type State = (String, Samples);

pub(super) fn check(dir: &Path, _console: &str, series: Series) -> Result<()> {
    let err = text(dir, "export.err").unwrap_or_default();
    ensure!(
        text(dir, "export.rc")?.trim() == "0",
        "numatrace export failed:\n{err}"
    );
    let (states, textfile) = expositions(dir, &err)?;
    check_monotonic(&states)?;
    let (_, last) = states.last().context("no final state")?;
    check_final_counts(last, &textfile)?;
    check_labels(last, series)?;
    check_hist(dir)?;
    check_promoter(&states, last)?;
    check_index_page(dir)
}

/// The scrapes taken after the first snapshot, then the final textfile
/// (also returned as text).
fn expositions(dir: &Path, err: &str) -> Result<(Vec<State>, String)> {
    let mut states = Vec::new();
    for n in 0..4 {
        let Ok(scrape) = text(dir, &format!("scrape{n}.txt")) else {
            continue;
        };
        if scrape.contains("numatrace_hint_faults_total ") {
            ensure!(
                scrape.contains("# TYPE numatrace_hint_faults_total counter")
                    && !scrape.contains("# EOF"),
                "scrape{n}.txt is not the classic text format wget asked for"
            );
            states.push((format!("scrape{n}.txt"), parse(&scrape)?));
        }
    }
    ensure!(
        states.len() >= 2,
        "fewer than two scrapes with kernel metrics:\n{err}"
    );
    let textfile = text(dir, "numatrace.prom")?;
    states.push(("numatrace.prom".into(), parse(&textfile)?));
    Ok((states, textfile))
}

/// Counters never decrease from one exposition to the next.
fn check_monotonic(states: &[State]) -> Result<()> {
    for w in states.windows(2) {
        let ((a_name, a), (b_name, b)) = (&w[0], &w[1]);
        for (metric, with) in [
            ("numatrace_hint_faults_total", &[][..]),
            ("numatrace_promotion_decisions_total", &[]),
            ("numatrace_migrations_total", &[]),
            ("numatrace_scan_to_fault_latency_seconds_count", &[]),
            ("numatrace_exporter_snapshots_total", &[]),
        ] {
            let (x, y) = (sum(a, metric, with), sum(b, metric, with));
            ensure!(
                x <= y,
                "{metric} decreased from {x} ({a_name}) to {y} ({b_name})"
            );
        }
    }
    Ok(())
}

/// The final state: hint faults, decisions that match them, no drops, and
/// latency histograms whose +Inf bucket is their count.
fn check_final_counts(last: &Samples, textfile: &str) -> Result<()> {
    let faults = sum(last, "numatrace_hint_faults_total", &[]);
    let decisions = sum(last, "numatrace_promotion_decisions_total", &[]);
    let drops = sum(last, "numatrace_ring_drops_total", &[]);
    ensure!(faults > 0.0, "no hint faults exported:\n{textfile}");
    ensure!(drops == 0.0, "{drops} ring drops in a small run");
    // The kernel counter and the event-derived decisions describe the same
    // window; the final state is taken after the ring is drained.
    ensure!(
        decisions <= faults && decisions >= 0.95 * faults,
        "{decisions} decisions from events vs {faults} hint faults counted in the kernel"
    );
    for (k, count) in last
        .iter()
        .filter(|(k, _)| k.starts_with("numatrace_scan_to_fault_latency_seconds_count{"))
    {
        let labels = k.trim_start_matches("numatrace_scan_to_fault_latency_seconds_count{");
        let labels = labels.trim_end_matches('}');
        let inf = last
            .iter()
            .find(|(b, _)| {
                b.starts_with("numatrace_scan_to_fault_latency_seconds_bucket{")
                    && b.contains(labels)
                    && b.contains("le=\"+Inf\"")
            })
            .map(|(_, v)| v)
            .with_context(|| format!("no +Inf bucket for {labels}"))?;
        ensure!(
            inf == count,
            "{labels}: +Inf bucket {inf} != _count {count}"
        );
    }
    ensure!(
        sum(last, "numatrace_scan_to_fault_latency_seconds_count", &[]) <= faults,
        "more latency samples than hint faults"
    );
    Ok(())
}

/// numatrace_info's attach mode and kernel, per-node vmstat, per-process series.
fn check_labels(last: &Samples, series: Series) -> Result<()> {
    let info = last
        .keys()
        .find(|k| k.starts_with("numatrace_info{"))
        .context("no numatrace_info")?;
    ensure!(
        ["fentry", "kprobe", "mixed"]
            .iter()
            .any(|m| info.contains(&format!("attach_mode=\"{m}\""))),
        "attach mode: {info}"
    );
    ensure!(
        info.contains(&format!("kernel=\"{}.", series.name())),
        "kernel label of {series}: {info}"
    );
    ensure!(
        last.keys().any(|k| k
            .starts_with("numatrace_node_vmstat_total{node=\"0\",counter=\"pgpromote_success\"}")),
        "no per-node vmstat in the live export"
    );
    ensure!(
        sum(
            last,
            "numatrace_process_hint_faults_total",
            &["comm=\"hot-chunks\""]
        ) > 0.0,
        "no per-process series for hot-chunks"
    );
    Ok(())
}

/// `numatrace hist --sample 4` live: JSON lines per 2 s interval from the
/// in-kernel histograms, which count the faults sampled out (in the
/// probes) and the faults sent (in the reader): at least half of the
/// workload's hint faults, where the reader's part alone would be a
/// quarter (the recording test checks the reader's part, unsampled,
/// against the events).
fn check_hist(dir: &Path) -> Result<()> {
    ensure!(
        text(dir, "hist.rc")?.trim() == "0",
        "numatrace hist failed:\n{}",
        text(dir, "hist.err").unwrap_or_default()
    );
    let mut intervals = 0;
    let mut samples = 0;
    for line in text(dir, "hist.json")?.lines() {
        let v: JsonInterval =
            serde_json::from_str(line).with_context(|| format!("hist.json line {line:?}"))?;
        ensure!(
            v.kind == "hist" && v.by == "outcome" && v.source == "kernel",
            "{line}"
        );
        intervals += 1;
        samples += v.data.latency_ns.values().map(|h| h.count).sum::<u64>();
    }
    ensure!(
        intervals >= 3,
        "{intervals} hist intervals in a 10 s run at 2 s"
    );
    let faults = read_report::<Summary>(dir, "hist-workload.json")?.numa_hint_faults;
    ensure!(
        faults >= 1000,
        "the hist workload took {faults} hint faults; the check needs 1000"
    );
    println!("hist --sample 4: {samples} latency samples for {faults} hint faults");
    ensure!(
        2 * samples >= faults,
        "hist --sample 4 counted {samples} latencies for {faults} hint faults: the faults whose records were sampled out (or read) are missing"
    );
    Ok(())
}

/// The promoter's state file, read per scrape: up, and moved pages that
/// grow from scrape to scrape.
fn check_promoter(states: &[State], last: &Samples) -> Result<()> {
    let promoter: Vec<f64> = states
        .iter()
        .filter(|(_, st)| st.get("numatrace_promoter_up") == Some(&1.0))
        .map(|(_, st)| sum(st, "numatrace_promoter_moved_pages_total", &[]))
        .collect();
    ensure!(
        promoter.len() >= 2,
        "numatrace_promoter_up was 1 in {} of {} expositions while a promoter state file was live",
        promoter.len(),
        states.len()
    );
    ensure!(
        promoter.windows(2).all(|w| w[0] < w[1]) && promoter[0] > 0.0,
        "numatrace_promoter_moved_pages_total did not follow the state file: {promoter:?}"
    );
    ensure!(
        sum(
            last,
            "numatrace_promoter_failures_total",
            &["status=\"ebusy\""]
        ) == 3.0
            && sum(last, "numatrace_promoter_queue_depth", &[]) == 42.0,
        "promoter failures or queue depth not exported"
    );
    Ok(())
}

/// The `/` page links the metrics and shows the attach plan.
fn check_index_page(dir: &Path) -> Result<()> {
    let page = text(dir, "index.html")?;
    ensure!(
        page.contains("<a href=\"/metrics\">") && page.contains("Attach plan"),
        "the / page lacks the link or the plan"
    );
    ensure!(
        page.contains("numa_migrate_check") || page.contains("numa_migrate_prep"),
        "the / page does not name the hint-fault hook"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_sums_classic_text() {
        let s = parse(
            "# TYPE a_total counter\na_total{x=\"1\",y=\"p\"} 2\na_total{x=\"2\",y=\"q\"} 3\nb 1e3\n",
        )
        .expect("parse");
        assert_eq!(sum(&s, "a_total", &[]), 5.0);
        assert_eq!(sum(&s, "a_total", &["y=\"q\""]), 3.0);
        assert_eq!(sum(&s, "b", &[]), 1000.0);
    }
}
