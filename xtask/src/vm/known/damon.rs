//! DAMON's sample against the plugin's every access, on the truth
//! scenario: of the slow tier's pages the plugin saw accessed in a truth
//! window, the share DAMON found accessed there (a page in a region with a
//! sample that found it accessed, in an aggregation whose middle falls in
//! that window), and of DAMON's, the share the plugin saw. Windows without
//! an aggregation, and those before the workload's placement ended, are
//! left out.
use std::{collections::HashSet, fs, ops::Range, path::Path};

use anyhow::{Context, Result};
use numa_core::{
    damon::{Collector, Summary},
    sink::Sink,
    trace::{Item, Reader},
    truth::{TruthReader, Window},
};

/// Page-windows hot on the slow tier: the plugin's, DAMON's and both.
#[derive(Debug, Default)]
pub(super) struct Agreement {
    pub truth_hot: u64,
    pub damon_hot: u64,
    pub both: u64,
    pub summary: Option<Summary>,
}

impl Agreement {
    /// DAMON's records in `trace` against the plugin's `truth`, over the
    /// frames `slow`, from `from_ns` on.
    pub(super) fn of(trace: &Path, truth: &Path, slow: &Range<u32>, from_ns: u64) -> Result<Self> {
        let damon = collect(trace)?;
        let mut t = TruthReader::new(fs::File::open(truth)?)?;
        let windows = t.windows.clone();
        let mut covered = vec![false; windows.len()];
        for w in damon.windows() {
            if let Some(i) = window_of(&windows, (w.start_ns + w.end_ns) / 2) {
                covered[i] = windows[i].start_ns >= from_ns;
            }
        }
        let mut hot = HashSet::new();
        for r in damon.regions().iter().filter(|r| r.nr_accesses > 0) {
            let w = damon.windows()[r.window as usize];
            let Some(i) = window_of(&windows, (w.start_ns + w.end_ns) / 2) else {
                continue;
            };
            if !covered[i] {
                continue;
            }
            let (lo, hi) = (
                r.start_pfn.max(u64::from(slow.start)),
                r.end_pfn.min(u64::from(slow.end)),
            );
            hot.extend((lo..hi).map(|pfn| key(i, pfn)));
        }
        let mut a = Agreement {
            damon_hot: hot.len() as u64,
            summary: damon.summary(),
            ..Agreement::default()
        };
        while let Some(c) = t.next_count()? {
            let i = c.window as usize;
            if !slow.contains(&c.pfn) || !covered[i] || c.accesses() == 0 {
                continue;
            }
            a.truth_hot += 1;
            a.both += u64::from(hot.contains(&key(i, u64::from(c.pfn))));
        }
        Ok(a)
    }

    /// Of the plugin's hot page-windows, the share DAMON found.
    pub(super) fn recall(&self) -> f64 {
        self.both as f64 / self.truth_hot.max(1) as f64
    }

    /// Of DAMON's hot page-windows, the share the plugin saw accessed.
    pub(super) fn precision(&self) -> f64 {
        self.both as f64 / self.damon_hot.max(1) as f64
    }

    pub(super) fn said(&self) -> String {
        format!(
            "DAMON against the plugin on the slow tier: {} page-windows hot by the plugin, {} by \
             DAMON, {} by both: DAMON's recall {:.1}%, precision {:.1}%; {}",
            self.truth_hot,
            self.damon_hot,
            self.both,
            100.0 * self.recall(),
            100.0 * self.precision(),
            self.summary
                .as_ref()
                .map_or_else(|| "no kdamond".into(), Summary::describe)
        )
    }
}

/// After the recording: whether its end left a kdamond (a line of
/// `damon-exits`, as [`EXITS`] writes them).
pub(super) const RECORD_END: &str = r#"
kd=/sys/kernel/mm/damon/admin/kdamonds
echo "record 0 $(cat $kd/nr_kdamonds) 0" > /results/damon-exits
"#;

/// numatrace's kdamond on each other way out, on one kernel (each costs
/// an attach, 20 to 30 s under the plugin): SIGTERM as soon as the
/// kdamond runs (while the probes attach: the last-resort handler's
/// path); SIGHUP 3 s later (SIGINT is ignored by a script's background
/// jobs); the test panic (its unwinding drops the probes); SIGKILL, which
/// no process survives to clean up after, so the next run finds the
/// kdamond and refuses, saying how to stop it; and DAMON_STAT running
/// again, which numatrace names. Each line of `damon-exits`: the case,
/// numatrace's exit status, `nr_kdamonds` after it, and the seconds the
/// run took (a signal that went unseen would let it run its 60 s).
pub(super) const EXITS: &str = r#"
running() { [ "$(cat $kd/0/state 2>/dev/null)" = on ]; }
dcase() {
	start=$(date +%s)
	NUMATRACE_TEST_PANIC_AFTER_S=$3 numatrace stats --live --truth damon --duration 60 > /results/damon-$1.out 2>&1 &
	pid=$!
	i=0; while ! running && [ $i -lt 150 ]; do sleep 0.1; i=$((i+1)); done
	[ -n "$4" ] && sleep "$4"
	[ -n "$2" ] && kill -"$2" $pid
	wait $pid; rc=$?
	echo "$1 $rc $(cat $kd/nr_kdamonds) $(( $(date +%s) - start ))" >> /results/damon-exits
}
dcase TERM-attaching TERM "" ""
dcase HUP HUP "" 3
dcase panic "" 2 ""
dcase KILL KILL "" ""
numatrace stats --live --truth damon --duration 1 > /results/damon-refused.out 2>&1
echo "refused $? $(cat $kd/nr_kdamonds) 0" >> /results/damon-exits
echo off > $kd/0/state; echo 0 > $kd/nr_kdamonds
if [ -e "$damon_stat" ]; then
	echo Y > "$damon_stat"
	numatrace stats --live --truth damon --duration 1 > /results/damon-busy.out 2>&1
	echo "busy $? $(cat $kd/nr_kdamonds) 0" >> /results/damon-exits
fi
"#;

/// Before the recording: 7.x runs DAMON_STAT's kdamond by default, which
/// DAMON runs exclusively (no other kdamond starts beside it): the test
/// bed stops it for the scenario and, after it, checks numatrace's
/// refusal while it runs.
pub(super) const STOP_DAMON_STAT: &str = r#"damon_stat=/sys/module/damon_stat/parameters/enabled
[ -e "$damon_stat" ] && echo N > "$damon_stat""#;

/// The recording's end left no kdamond; with `exits` (the kernel that ran
/// [`EXITS`], 7.x, whose DAMON_STAT runs by default) every other way out
/// but SIGKILL left none, well before the run's 60 s, after SIGKILL the
/// next run refused with the way to stop it, and with DAMON_STAT running
/// numatrace refused and named it.
pub(super) fn expect_exits(results: &Path, exits: bool) -> Result<()> {
    let text = crate::results::text(results, "damon-exits")?;
    let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split(' ').collect()).collect();
    anyhow::ensure!(
        rows.first()
            .is_some_and(|r| r[..] == ["record", "0", "0", "0"]),
        "the recording's end should leave no kdamond: {text}"
    );
    if !exits {
        return Ok(());
    }
    let want: [(&str, &[&str], &str); 6] = [
        ("TERM-attaching", &["0", "143"], "0"),
        // Under the plugin the probes take 20 to 30 s to attach: a signal
        // 3 s in finds the last-resort handler (exit 129), one later the
        // run's own (0); either must stop the kdamond.
        ("HUP", &["0", "129"], "0"),
        ("panic", &["101"], "0"),
        ("KILL", &["137"], "1"),
        ("refused", &["1"], "1"),
        ("busy", &["1"], "0"),
    ];
    for (case, codes, kdamonds) in want {
        let row = rows.iter().find(|r| r.first() == Some(&case));
        let quick = |r: &[&str]| r[3].parse::<u32>().is_ok_and(|s| s < 50);
        anyhow::ensure!(
            row.is_some_and(|r| r.len() == 4
                && codes.contains(&r[1])
                && r[2] == kdamonds
                && quick(r)),
            "kdamond after {case}: {row:?}, want exit status {codes:?}, nr_kdamonds {kdamonds} \
             and less than 50 s; all: {text}"
        );
    }
    let refused = crate::results::text(results, "damon-refused.out")?;
    anyhow::ensure!(
        refused.contains("never reconfigures") && refused.contains("nr_kdamonds"),
        "after SIGKILL the next run should refuse and say how to stop the kdamond: {refused}"
    );
    let busy = crate::results::text(results, "damon-busy.out")?;
    anyhow::ensure!(
        busy.contains("DAMON_STAT runs") && busy.contains("echo N >"),
        "with DAMON_STAT running numatrace should refuse and name it: {busy}"
    );
    Ok(())
}

/// DAMON's agreement with the plugin, at least: stated from the first
/// three runs on 6.12 (recall 43.1%, 39.1%, 32.1%; precision 40.0%, 46.5%,
/// 31.1%; with about 333 regions of 9.2 MiB). A steady visit touches a
/// random 63% of its chunk's pages once or twice, so a region's sampled
/// page is often one the visit missed: DAMON's recall of page-windows with
/// one or two accesses is low by design; and a 9 MiB region around a 4 MiB
/// chunk counts its cold neighbours hot.
const MIN_RECALL: f64 = 0.2;
const MIN_PRECISION: f64 = 0.2;

/// The agreement's bounds, and the scorecard on DAMON's sample ranking
/// the policies by recall under its first rule as the plugin's does under
/// one access a window.
pub(super) fn expect(
    a: &Agreement,
    plugin: &serde_json::Value,
    damon: &serde_json::Value,
) -> Result<()> {
    anyhow::ensure!(
        a.truth_hot >= 10_000 && a.recall() >= MIN_RECALL && a.precision() >= MIN_PRECISION,
        "DAMON's hot pages against the plugin's: recall {:.1}% (at least {:.0}%), precision {:.1}% \
         (at least {:.0}%) over {} hot page-windows (at least 10,000)",
        100.0 * a.recall(),
        100.0 * MIN_RECALL,
        100.0 * a.precision(),
        100.0 * MIN_PRECISION,
        a.truth_hot
    );
    let (p, d) = (recall_order(plugin), recall_order(damon));
    // Ties (fault-count's and the kernel's recall both 100%) order by name.
    anyhow::ensure!(
        p.len() == 3 && p == d,
        "the policies by recall: {p:?} on the plugin's truth, {d:?} on DAMON's"
    );
    Ok(())
}

/// The kernel, fault-count and two-touch, by recall under a scorecard's
/// first rule, highest first.
fn recall_order(card: &serde_json::Value) -> Vec<String> {
    let empty = Vec::new();
    let mut v: Vec<(String, f64)> = card["rules"][0]["policies"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .filter_map(|p| {
            let name = p["policy"].as_str()?;
            // The default fault-count (stamp=first), not its stamp=latest twin.
            let short = match name {
                "kernel" | "two-touch" => name,
                n if n.starts_with("fault-count") && n.contains("stamp=first") => "fault-count",
                _ => return None,
            };
            Some((short.to_owned(), p["recall"].as_f64()?))
        })
        .collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v.into_iter().map(|(n, _)| n).collect()
}

fn key(window: usize, pfn: u64) -> u64 {
    (window as u64) << 32 | pfn
}

/// The truth window holding `ns`.
fn window_of(windows: &[Window], ns: u64) -> Option<usize> {
    let i = windows.partition_point(|w| w.end_ns <= ns);
    (i < windows.len() && windows[i].start_ns <= ns).then_some(i)
}

/// The trace's DAMON records and snapshots.
fn collect(trace: &Path) -> Result<Collector> {
    let reader = Reader::open(trace)?;
    let info = reader
        .header
        .damon
        .clone()
        .context("the scenario's trace has no kdamond: was it recorded with --truth damon?")?;
    let mut c = Collector::new(info.spec);
    for item in reader {
        match item? {
            Item::Event(e) => c.event(&e)?,
            Item::Snapshot(s) => c.snapshot(&s)?,
            Item::Footer(_) => {}
        }
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_time_falls_in_the_window_that_holds_it() {
        let w = |start_ns, end_ns| Window {
            start_ns,
            end_ns,
            clock_err_ns: 0,
        };
        let ws = [w(10, 20), w(20, 30), w(40, 50)];
        assert_eq!(window_of(&ws, 10), Some(0));
        assert_eq!(window_of(&ws, 20), Some(1));
        assert_eq!(window_of(&ws, 35), None);
        assert_eq!(window_of(&ws, 5), None);
        assert_eq!(window_of(&ws, 50), None);
    }

    #[test]
    fn policies_rank_by_recall_under_the_first_rule() {
        let card = serde_json::json!({"rules": [{"policies": [
            {"policy": "kernel", "recall": 0.5},
            {"policy": "kernel-time", "recall": 0.9},
            {"policy": "fault-count counter=mm,stamp=first,threshold=1", "recall": 0.7},
            {"policy": "fault-count counter=mm,stamp=latest,threshold=1", "recall": 0.1},
            {"policy": "two-touch", "recall": 0.2},
        ]}]});
        assert_eq!(recall_order(&card), ["fault-count", "kernel", "two-touch"]);
    }
}
