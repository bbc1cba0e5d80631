//! Per-cgroup figures against the kernel's own per-memcg counters: three
//! sibling cgroups under one parent (a busy workload, a nearly idle one,
//! one starting a process a second) run under `stats --live --by cgroup`.
//! Each child's hint faults and promoted pages equal its `memory.stat`
//! deltas (kernels from 6.11 count NUMA balancing per memcg), and the
//! parent's deltas (memory.stat is hierarchical) the sum of its children's
//! rows. On 6.1, whose memory.stat has none of these counters, the rows
//! are held against vmstat only, and the test prints what it could not
//! compare. The recording, read back, names the cgroups by path in
//! `stats`' text, `hist --by cgroup`'s histograms and `export
//! --per-cgroup`'s series (the busiest, and the rest summed).
use std::{collections::BTreeMap, path::Path};

use anyhow::{bail, ensure, Context, Result};
use numa_core::{
    histjson::JsonInterval,
    model::{cgroups::CgroupRow, totals::Report},
};

use crate::kernels::Series;
use crate::results::{equal_but_missed, faults_match_vmstat, read_report, text};

pub(super) const SCRIPT: &str = include_str!("cgroups.sh");

const CHILDREN: [&str; 3] = ["/ntc/hot", "/ntc/cold", "/ntc/churn"];
const PARENT: &str = "/ntc";
/// Hint faults the busy cgroup must take for the comparison to mean
/// anything.
const MIN_FAULTS: u64 = 1000;
/// A missed probe run hides at most one fault: up to a huge page's pages.
const PAGES_PER_MISSED_RUN: u64 = 512;

/// memory.stat of each cgroup, by path below the cgroup2 mount.
type MemStat = BTreeMap<String, BTreeMap<String, u64>>;

/// The memory.stat counters compared, and numatrace's figure for each.
type Counter = (&'static str, fn(&CgroupRow) -> u64);
const COUNTERS: [Counter; 2] = [
    ("numa_hint_faults", |r| r.counts.hint_faults),
    ("pgpromote_success", |r| r.counts.promoted),
];

pub(super) fn check(dir: &Path, _console: &str, series: Series) -> Result<()> {
    let s: Report = read_report(dir, "stats.json")?;
    faults_match_vmstat(&s)?;
    // A cgroup without a hint fault has no row: its figures are zeros.
    let rows: Vec<CgroupRow> = CHILDREN.iter().map(|c| row(&s, c)).collect();
    let (busy, cold) = (rows[0].counts.hint_faults, rows[1].counts.hint_faults);
    let named = |p: &str| s.by_cgroup.iter().any(|r| r.path.as_deref() == Some(p));
    ensure!(
        named(CHILDREN[0]) && named(CHILDREN[2]),
        "stats --by cgroup does not name both the busy and the churning cgroup: {:?}",
        s.by_cgroup
    );
    ensure!(
        busy >= MIN_FAULTS && cold < busy,
        "the busy cgroup took {busy} hint faults, the cold one {cold}: \
         the workloads did not land as shaped (at least {MIN_FAULTS}, and more than the cold one's)"
    );
    let sum: u64 = s.by_cgroup.iter().map(|r| r.counts.hint_faults).sum();
    ensure!(
        sum == s.pages.hint_faults,
        "the cgroups' hint faults sum to {sum}, the run's to {}",
        s.pages.hint_faults
    );
    let before = memstat(&text(dir, "memstat-before.txt")?)?;
    let after = memstat(&text(dir, "memstat-after.txt")?)?;
    let missed = s.runs_missed.saturating_mul(PAGES_PER_MISSED_RUN);
    for (key, ours) in COUNTERS {
        if !after.values().any(|m| m.contains_key(key)) {
            ensure!(
                series == Series::V6_1,
                "memory.stat has no {key} on a kernel that counts it per memcg"
            );
            println!("    {key}: not in this kernel's memory.stat, not compared");
            continue;
        }
        let mut children = 0;
        for (path, r) in CHILDREN.iter().zip(&rows) {
            let kernel = delta(&before, &after, path, key)?;
            println!(
                "    {path} {key}: numatrace {}, memory.stat {kernel}",
                ours(r)
            );
            equal_but_missed(&format!("{path} {key}"), ours(r), kernel, missed)?;
            children += ours(r);
        }
        let kernel = delta(&before, &after, PARENT, key)?;
        println!("    {PARENT} {key}: numatrace (children) {children}, memory.stat {kernel}");
        equal_but_missed(&format!("{PARENT} {key}"), children, kernel, missed)?;
    }
    let txt = text(dir, "stats.txt")?;
    ensure!(
        txt.contains("by cgroup") && txt.contains(CHILDREN[0]) && txt.contains(CHILDREN[2]),
        "the recording's text does not name the cgroups by path:\n{txt}"
    );
    check_funnels(&s, &rows, &txt)?;
    check_hist(dir, &rows)?;
    check_export(dir, &s)
}

/// Each cgroup's funnel: the scan records carry the scanning task's
/// cgroup, so every pass of the run is in one cgroup's funnel; the busy
/// and churning cgroups' pages were protected, and each child's
/// migrations of slow-tier pages are its promoted pages; the verdicts are
/// in the recording's text (up to their figures: the text's end is the
/// recording's, a moment after the live report's).
fn check_funnels(s: &Report, rows: &[CgroupRow], txt: &str) -> Result<()> {
    let passes: u64 = s
        .by_cgroup
        .iter()
        .filter_map(|r| r.funnel.as_ref())
        .map(|f| f.stages.scan_passes)
        .sum();
    ensure!(
        passes == s.scan_ranges,
        "the cgroups' funnels hold {passes} scan passes, the run {}",
        s.scan_ranges
    );
    for (path, r) in CHILDREN.iter().zip(rows) {
        let f = r.funnel.as_ref();
        let stages = f.map(|f| (f.stages.scan_passes, f.stages.ptes_protected));
        let verdict = f.map_or("-", |f| f.verdict.as_str());
        println!("    {path} funnel: (passes, PTEs) {stages:?}: {verdict}");
        if *path == CHILDREN[1] {
            continue;
        }
        let Some(f) = f else {
            bail!("{path} has no funnel");
        };
        ensure!(
            f.stages.scan_passes > 0 && f.stages.ptes_protected > 0,
            "no scan pass protected a page of {path}"
        );
        ensure!(
            f.stages.migrate_ok_pages == r.counts.promoted,
            "{path}'s funnel migrated {} pages, its row promoted {}",
            f.stages.migrate_ok_pages,
            r.counts.promoted
        );
        let words = f.verdict.split(|c: char| c.is_ascii_digit()).next();
        ensure!(
            words.is_some_and(|w| txt.contains(&format!("      {w}"))),
            "the text does not give {path}'s verdict {:?}:\n{txt}",
            f.verdict
        );
    }
    Ok(())
}

/// `export --per-cgroup 2` of the recording: the two busiest cgroups by
/// path with their rows' hint faults, and the rest summed as `other`.
fn check_export(dir: &Path, s: &Report) -> Result<()> {
    let prom = text(dir, "cgroups.prom")?;
    let series = |cgroup: &str| -> Option<u64> {
        let head = format!("numatrace_cgroup_hint_faults_pages_total{{cgroup=\"{cgroup}\"}} ");
        prom.lines()
            .find_map(|l| l.strip_prefix(&head))
            .and_then(|v| v.trim().parse().ok())
    };
    // Export has a series for cgroups with hint faults (stats also lists
    // those only scanned).
    let faulted: Vec<&CgroupRow> = s
        .by_cgroup
        .iter()
        .filter(|r| r.counts.hint_faults > 0)
        .collect();
    let (top, rest) = faulted.split_at(faulted.len().min(2));
    for r in top {
        let path = r.path.as_deref().unwrap_or_default();
        let verdict = format!("numatrace_cgroup_verdict{{cgroup=\"{path}\",verdict=");
        ensure!(
            prom.contains(&verdict),
            "export gives no verdict for {path}:\n{prom}"
        );
        ensure!(
            series(path) == Some(r.counts.hint_faults),
            "export's hint faults of {path}: {:?}, stats': {}",
            series(path),
            r.counts.hint_faults
        );
    }
    let other: u64 = rest.iter().map(|r| r.counts.hint_faults).sum();
    ensure!(
        rest.is_empty() || series("other") == Some(other),
        "export's other cgroups: {:?}, stats' rows past the top two: {other}",
        series("other")
    );
    println!("    export --per-cgroup 2: top two and other ({other}) equal stats' rows");
    Ok(())
}

/// `hist --by cgroup` of the recording: one latency histogram per busy
/// cgroup, by path, with no more samples than the cgroup's hint faults
/// (only faults with a scan stamp are in it).
fn check_hist(dir: &Path, rows: &[CgroupRow]) -> Result<()> {
    let json = text(dir, "hist.json")?;
    let line = json.lines().next().context("hist --json printed nothing")?;
    let h: JsonInterval = serde_json::from_str(line).context("hist --json")?;
    for (path, r) in CHILDREN.iter().zip(rows) {
        let n = h.data.latency_ns.get(*path).map_or(0, |h| h.count);
        println!(
            "    hist --by cgroup {path}: {n} samples of {} hint faults",
            r.counts.hint_faults
        );
        ensure!(
            n <= r.counts.hint_faults,
            "hist --by cgroup has {n} samples for {path}, more than its {} hint faults",
            r.counts.hint_faults
        );
    }
    let hot = h.data.latency_ns.get(CHILDREN[0]).map_or(0, |h| h.count);
    ensure!(
        hot > 0,
        "hist --by cgroup has no samples for {}: {:?}",
        CHILDREN[0],
        h.data.latency_ns.keys().collect::<Vec<_>>()
    );
    Ok(())
}

/// The workload cgroup `path`'s row, zeros when it has none.
fn row(s: &Report, path: &str) -> CgroupRow {
    s.by_cgroup
        .iter()
        .find(|r| r.path.as_deref() == Some(path))
        .cloned()
        .unwrap_or_else(|| CgroupRow {
            id: 0,
            path: Some(path.to_owned()),
            counts: Default::default(),
            funnel: None,
        })
}

/// The change of `key` in cgroup `path`'s memory.stat between two dumps.
fn delta(before: &MemStat, after: &MemStat, path: &str, key: &str) -> Result<u64> {
    let get = |m: &MemStat| m.get(path).and_then(|s| s.get(key)).copied();
    match (get(before), get(after)) {
        (Some(b), Some(a)) => Ok(a.saturating_sub(b)),
        _ => bail!("memory.stat of {path} has no {key}"),
    }
}

/// The guest's dump: `== ntc/hot` before each cgroup's memory.stat.
fn memstat(dump: &str) -> Result<MemStat> {
    let mut out = MemStat::new();
    let mut cur: Option<String> = None;
    for line in dump.lines() {
        if let Some(name) = line.strip_prefix("== ") {
            let path = format!("/{name}");
            out.entry(path.clone()).or_default();
            cur = Some(path);
            continue;
        }
        let (Some(c), Some((k, v))) = (&cur, line.split_once(' ')) else {
            continue;
        };
        let v = v
            .trim()
            .parse()
            .with_context(|| format!("memory.stat line {line:?}"))?;
        out.entry(c.clone()).or_default().insert(k.to_owned(), v);
    }
    ensure!(!out.is_empty(), "no memory.stat in the dump");
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memstat_dumps_parse_by_cgroup() {
        let m = memstat("== ntc\nanon 4096\nnuma_hint_faults 7\n== ntc/hot\nnuma_hint_faults 5\n")
            .expect("parses");
        assert_eq!(m["/ntc"]["numa_hint_faults"], 7);
        assert_eq!(m["/ntc/hot"]["numa_hint_faults"], 5);
        let after = memstat("== ntc\nnuma_hint_faults 10\n== ntc/hot\nnuma_hint_faults 9\n")
            .expect("parses");
        let d = |path| delta(&m, &after, path, "numa_hint_faults");
        assert_eq!(d("/ntc/hot").expect("there"), 4);
        assert!(d("/ntc/cold").is_err());
        assert!(memstat("== ntc\nnuma_hint_faults x\n").is_err());
    }
}
