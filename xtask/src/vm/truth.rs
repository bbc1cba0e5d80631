//! `cargo xtask vm --truth FILE`: the guest's every user-space load and
//! store, per guest-physical page and window, from the QEMU plugin
//! (`xtask/truth-plugin`) and the guest's ticker (`numatrace workload
//! ticker`), joined into a truth file (`numa_core::truth`).
use std::fs;
use std::path::{Path, PathBuf};

use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use numa_core::truth::{self, Assembled, Tick, TruthReader, MARKER_ADDR, STATS_SUFFIX};
use numa_core::workload::Summary;

use crate::cmd;
use crate::host::Setup;
use crate::kernels::Kernel;
use crate::vm::{boot, shell_quote, Guest, Mode, Topology};

/// Where the ticker's log lands in the guest's /results.
const TICKS: &str = "truth-ticks.txt";

/// The plugin, built now (release: it runs on every guest access).
pub(crate) fn build_plugin(setup: &mut Setup) -> Result<PathBuf> {
    setup.toolchain()?;
    let mut cargo = cmd::cargo();
    cargo.args(["build", "--release", "-p", "numa-truth-plugin"]);
    cmd::run(&mut cargo)?;
    let path = cmd::target_dir().join("release/libnuma_truth_plugin.so");
    if !path.is_file() {
        bail!("the plugin build left no {}", path.display());
    }
    Ok(path)
}

/// The raw file the plugin writes next to the truth file.
pub(crate) fn raw_path(file: &Path) -> PathBuf {
    with_suffix(file, ".raw")
}

/// `path` with `suffix` appended to its file name.
fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(suffix);
    PathBuf::from(p)
}

/// QEMU's `-plugin` argument: absolute paths (QEMU runs elsewhere), commas
/// doubled as QEMU's option syntax wants.
pub(crate) fn plugin_arg(plugin: &Path, raw: &Path) -> Result<String> {
    let q = |p: &Path| -> Result<String> {
        Ok(std::path::absolute(p)?
            .display()
            .to_string()
            .replace(',', ",,"))
    };
    Ok(format!(
        "{},out={},marker={MARKER_ADDR:#x}",
        q(plugin)?,
        q(raw)?
    ))
}

/// The guest script run between the ticker's first and last ticks. The
/// second of sleep lets the ticker map its page and tick once before the
/// command starts: nothing before the first tick is counted.
pub(crate) fn wrap(script: &str, window_ms: u64) -> String {
    format!(
        "numatrace workload ticker --every-ms {window_ms} --log /results/{TICKS} &\n\
         truth_ticker=$!\n\
         sleep 1\n\
         sh -c {}\n\
         truth_status=$?\n\
         kill -TERM $truth_ticker\n\
         wait $truth_ticker || {{ echo 'numatrace-vm: the truth ticker failed' >&2; exit 125; }}\n\
         exit $truth_status\n",
        shell_quote(script)
    )
}

/// Joins the raw file and the ticker's log (in the guest's results) into
/// `file`, and removes the raw file.
pub(crate) fn assemble(file: &Path, results: &Path) -> Result<Assembled> {
    let raw_path = raw_path(file);
    let stats_path = with_suffix(&raw_path, STATS_SUFFIX);
    let stats = fs::read_to_string(&stats_path)
        .context("the plugin left no statistics: did QEMU exit cleanly?")?;
    if let Some(err) = stats
        .lines()
        .find_map(|l| l.strip_prefix("error "))
        .filter(|e| *e != "none")
    {
        bail!("the truth plugin failed: {err}");
    }
    let log = fs::read_to_string(results.join(TICKS)).with_context(|| {
        format!("no {TICKS} in the guest's results: the ticker did not stop cleanly")
    })?;
    let ticks = log
        .lines()
        .enumerate()
        .map(|(i, l)| Tick::parse(l).with_context(|| format!("{TICKS} line {}", i + 1)))
        .collect::<Result<Vec<_>>>()?;
    let raw = fs::File::open(&raw_path).with_context(|| raw_path.display().to_string())?;
    let out = fs::File::create(file).with_context(|| file.display().to_string())?;
    let done = truth::assemble(raw, &ticks, std::io::BufWriter::new(out))?;
    fs::remove_file(&raw_path)?;
    fs::remove_file(&stats_path)?;
    Ok(done)
}

/// The guest script of [`self_test`]: a workload on the slow node with
/// NUMA balancing off (no page moves), and where node 1's memory is; then
/// a recorded one with tiering on, whose promoted pages `explain --truth`
/// follows.
const SELF_TEST: &str = "echo 0 > /proc/sys/kernel/numa_balancing
cat /sys/devices/system/memory/block_size_bytes > /results/block_size
ls -d /sys/devices/system/node/node1/memory[0-9]* | sed 's/.*memory//' > /results/node1-blocks
numatrace workload hot-chunks --slow-mb 64 --chunk-mb 64 --accesses 100000 --idle-ms 0 --duration 3 --summary /results/w.json || exit 1
sleep 1
cut -d' ' -f1 /proc/uptime > /results/known-done
echo 2 > /proc/sys/kernel/numa_balancing
numatrace record -o /results/t.trace -- numatrace workload hot-chunks --slow-mb 16 --chunk-mb 4 --accesses 4000 --idle-ms 100 --duration 4 --min-faults 2000 --linger 5 --max-duration 90 --summary /results/t.json";

/// A guest script run under the plugin in a VM test: its scratch
/// directory's name under the kernel's, its truth windows and its time.
pub(crate) struct PluginRun<'a> {
    pub name: &'a str,
    pub script: &'a str,
    pub window_ms: u64,
    pub timeout: Duration,
}

impl PluginRun<'_> {
    /// Boots `kernel` on the script under the plugin, fails unless the
    /// script exited 0, and assembles its truth file: (the guest's
    /// results, the truth file, what the assembly found).
    pub(crate) fn boot(
        &self,
        kernel: &Kernel,
        numatrace: &Path,
        setup: &mut Setup,
    ) -> Result<(PathBuf, PathBuf, Assembled)> {
        let dir = crate::vm::state_dir(kernel.series).join(self.name);
        let out = dir.join("results");
        let file = dir.join(format!("{}.truth", self.name));
        let plugin = plugin_arg(&build_plugin(setup)?, &raw_path(&file))?;
        let guest = Guest {
            kernel,
            topology: Topology::default(),
            numatrace,
            files: &[],
            mode: Mode::Command(wrap(self.script, self.window_ms)),
            timeout: self.timeout,
            out: &out,
            icount: false,
            root_disk: None,
            plugin: Some(&plugin),
            show_console: true,
        };
        let outcome = boot(&guest)?;
        if let Some(why) = outcome.failure() {
            bail!("{why}\n{}", outcome.tail(30).join("\n"));
        }
        ensure!(
            outcome.exit_status == Some(0),
            "the guest script exited with {:?}:\n{}",
            outcome.exit_status,
            outcome.tail(30).join("\n")
        );
        let done = assemble(&file, &out)?;
        Ok((out, file, done))
    }
}

/// Promoted pages whose timelines [`explained`] checks.
const EXPLAINED: usize = 16;

/// Boots `kernel` with the plugin on a workload whose accesses are known
/// and checks the truth file against them: the workload's every access is
/// a load and a store of one of its pages on node 1, so node 1's loads and
/// its stores each come to the workload's count, on its pages, give or
/// take the few other pages on node 1.
pub(crate) fn self_test(kernel: &Kernel, numatrace: &Path, setup: &mut Setup) -> Result<String> {
    let run = PluginRun {
        name: "truth",
        script: SELF_TEST,
        window_ms: 500,
        // Two workloads, one attach: tens of seconds each under TCG and
        // the plugin.
        timeout: Duration::from_secs(420),
    };
    let (out, file, done) = run.boot(kernel, numatrace, setup)?;
    let slow = node_pfns(&out)?;
    let w: Summary = crate::results::read_report(&out, "w.json")?;
    // The known workload's windows: those over a second after it ended,
    // before the recorded run starts numatrace (whose own loads from the
    // root tmpfs on node 1 would count). /proc/uptime is CLOCK_BOOTTIME,
    // which is CLOCK_MONOTONIC in a guest that never suspends.
    let known_done: f64 = crate::results::text(&out, "known-done")?
        .trim()
        .parse()
        .context("known-done: not /proc/uptime's seconds")?;
    let known_done = (known_done * 1e9) as u64;
    let (mut loads, mut stores, mut pages) = (0u64, 0u64, std::collections::BTreeSet::new());
    let mut r = TruthReader::new(fs::File::open(&file)?)?;
    while let Some(c) = r.next_count()? {
        if slow.contains(&c.pfn) && r.windows[c.window as usize].end_ns <= known_done {
            loads += u64::from(c.loads);
            stores += u64::from(c.stores);
            pages.insert(c.pfn);
        }
    }
    ensure!(
        done.windows >= 4,
        "{} windows of 500 ms in a 3 s run",
        done.windows
    );
    // Other processes' pages on node 1 (file pages of the root tmpfs, the
    // binary's data among them) add a few accesses on a few pages.
    let excess = |n: u64| {
        n.checked_sub(w.accesses)
            .filter(|x| *x <= w.accesses / 10_000)
    };
    ensure!(
        excess(loads).is_some() && excess(stores).is_some(),
        "node 1: {loads} loads and {stores} stores counted; the workload made {} accesses, \
         each one of each (at most 0.01% more allowed for other processes' pages)",
        w.accesses
    );
    ensure!(
        (w.slow_pages..=w.slow_pages + 64).contains(&pages.len()),
        "node 1: {} pages accessed; the workload has {} (at most 64 more allowed)",
        pages.len(),
        w.slow_pages
    );
    let trace = out.join("t.trace");
    let promoted = Promoted::of(numatrace, &trace, &slow)?;
    let explained = explained(numatrace, &file, &trace, &slow, &promoted)?;
    let recorded: Summary = crate::results::read_report(&out, "t.json")?;
    let scored = scored(numatrace, &file, &trace, &promoted, recorded.slow_pages)?;
    Ok(format!(
        "{} windows, node 1: {loads} loads and {stores} stores on {} pages; the workload: {} accesses on {} pages; {explained}; {scored}",
        done.windows,
        pages.len(),
        w.accesses,
        w.slow_pages
    ))
}

/// `numatrace explain --truth` on promoted pages of the recorded run:
/// each page's true accesses are at the node-1 frame its hint fault named
/// before the promotion, and at the frame the promotion allocated from
/// the fault on (the faulting access itself is retried there).
fn explained(
    numatrace: &Path,
    truth: &Path,
    trace: &Path,
    slow: &std::ops::Range<u32>,
    promoted: &Promoted,
) -> Result<String> {
    let run = |args: &[&std::ffi::OsStr]| run(numatrace, args);
    let promoted = &promoted.base_pages;
    ensure!(
        promoted.len() >= EXPLAINED,
        "{} promotions recorded with their new frame; the check needs {EXPLAINED}",
        promoted.len()
    );
    let stride = promoted.len() / EXPLAINED;
    for (pid, addr) in promoted.iter().step_by(stride).take(EXPLAINED) {
        let json = run(&[
            "explain".as_ref(),
            trace.as_os_str(),
            "--pid".as_ref(),
            pid.as_ref(),
            "--addr".as_ref(),
            addr.as_ref(),
            "--truth".as_ref(),
            truth.as_os_str(),
            "--json".as_ref(),
        ])?;
        let t: serde_json::Value = serde_json::from_slice(&json)?;
        check_timeline(&t, slow).with_context(|| format!("pid {pid} page {addr}: {t}"))?;
    }
    Ok(format!(
        "{EXPLAINED} of {} promoted pages explained with their true accesses on both sides of the promotion",
        promoted.len()
    ))
}

/// `numatrace replay --json` of `trace` with `truth`, the scorecard's
/// (horizon in seconds, hot rules) and `models` (none: replay's default
/// ones): its report, the scorecard in it.
pub(crate) fn replay(
    numatrace: &Path,
    trace: &Path,
    truth: &Path,
    (horizon_s, hot_rules): (&str, &str),
    models: &[&str],
) -> Result<serde_json::Value> {
    let mut args: Vec<&std::ffi::OsStr> = vec![
        "replay".as_ref(),
        trace.as_os_str(),
        "--truth".as_ref(),
        truth.as_os_str(),
        "--horizon-s".as_ref(),
        horizon_s.as_ref(),
        "--hot-accesses".as_ref(),
        hot_rules.as_ref(),
        "--json".as_ref(),
    ];
    for m in models {
        args.extend([std::ffi::OsStr::new("--model"), std::ffi::OsStr::new(m)]);
    }
    Ok(serde_json::from_slice(&run(numatrace, &args)?)?)
}

/// The fault records of `trace`, from its `dump`.
pub(crate) fn faults(numatrace: &Path, trace: &Path) -> Result<Vec<serde_json::Value>> {
    let dump = run(numatrace, &["dump".as_ref(), trace.as_os_str()])?;
    let mut faults = Vec::new();
    for line in dump.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let r: serde_json::Value = serde_json::from_slice(line)?;
        if r["type"] == "fault" {
            faults.push(r);
        }
    }
    Ok(faults)
}

/// `numatrace` with `args`; its stdout.
pub(crate) fn run(numatrace: &Path, args: &[&std::ffi::OsStr]) -> Result<Vec<u8>> {
    let out = std::process::Command::new(numatrace).args(args).output()?;
    ensure!(out.status.success(), "numatrace {args:?}: {out:?}");
    Ok(out.stdout)
}

/// The kernel's promotions in a trace, from its `dump`.
struct Promoted {
    /// Base pages promoted with their new frame recorded: (pid, address).
    base_pages: Vec<(String, String)>,
    /// Every node-1 frame a promotion moved a page from.
    frames: std::collections::BTreeSet<u64>,
}

impl Promoted {
    fn of(numatrace: &Path, trace: &Path, slow: &std::ops::Range<u32>) -> Result<Promoted> {
        let mut p = Promoted {
            base_pages: Vec::new(),
            frames: std::collections::BTreeSet::new(),
        };
        for r in faults(numatrace, trace)? {
            let u = |k: &str| r[k].as_u64().unwrap_or(0);
            if u("dst_pfn") == 0 {
                continue;
            }
            // Base pages: a large folio's frame is its head's, not the page's.
            if u("nr_pages") == 1 {
                p.base_pages.push((
                    r["pid"].to_string(),
                    r["addr"].as_str().unwrap_or("").to_owned(),
                ));
            }
            let src = u("src_pfn");
            if u("migrate_ok") != 0 && u32::try_from(src).is_ok_and(|f| slow.contains(&f)) {
                p.frames.extend(src..src + u("nr_pages").max(1));
            }
        }
        Ok(p)
    }
}

/// The horizon and hot rules [`scored`] asks for: the recorded workload
/// runs for seconds, and the truth ends soon after it.
const HORIZON_S: &str = "2";
const HOT_RULES: &str = "1,8";

/// `numatrace replay --truth` on the recorded run, and what the workload
/// implies for its scorecard: it reads and writes all of its pages on
/// node 1, chunk after chunk (its 16 MiB about once a second under TCG),
/// 5 s on after its 2,000th hint fault, so nearly every page is hot on the
/// slow tier (90% at least), and a page the kernel promoted is hot again
/// within the horizon (80% of the judged promotions at least: the faults
/// come in a burst of a second or two); the kernel's promotions are
/// those the trace records, each after its page was first hot; a rule
/// asking more accesses finds no more hot pages.
fn scored(
    numatrace: &Path,
    truth: &Path,
    trace: &Path,
    promoted: &Promoted,
    workload_pages: usize,
) -> Result<String> {
    let v = replay(numatrace, trace, truth, (HORIZON_S, HOT_RULES), &[])?;
    let card = &v["scorecard"];
    let u = |v: &serde_json::Value, k: &str| v[k].as_u64().unwrap_or(0);
    let kernel = &card["shares"][0];
    ensure!(
        kernel["policy"] == "kernel" && u(kernel, "promoted_pages") == promoted.frames.len() as u64,
        "the scorecard's kernel promoted {} pages, the trace {}: {card}",
        kernel["promoted_pages"],
        promoted.frames.len()
    );
    let (any, busy) = (&card["rules"][0], &card["rules"][1]);
    let hot = u(any, "hot_pages");
    ensure!(
        hot * 10 >= workload_pages as u64 * 9 && u(busy, "hot_pages") <= hot,
        "hot pages on the slow tier: {hot} (>= 1 access), {} (>= 8); the workload has {workload_pages}",
        busy["hot_pages"]
    );
    let k = &any["policies"][0];
    let (judged, precise) = (u(k, "judged"), u(k, "precise"));
    ensure!(
        judged >= 100 && precise * 10 >= judged * 8,
        "the kernel's promotions: {precise} of {judged} judged were hot again within {HORIZON_S} s \
         (the check needs 100 judged and 80% of them hot): {card}"
    );
    ensure!(
        k["to_promotion_p50_ms"].as_f64().is_some_and(|ms| ms > 0.0),
        "no time from first hot to the kernel's promotion: {card}"
    );
    Ok(format!(
        "scorecard: kernel {} pages promoted, {precise} of {judged} hot again within {HORIZON_S} s, \
         {hot} hot pages; slow-tier share {} measured",
        promoted.frames.len(),
        kernel["slow_access_share"]
    ))
}

/// A promoted page's timeline: accesses at its slow frame up to its
/// promotion, at its new frame from then on.
fn check_timeline(t: &serde_json::Value, slow: &std::ops::Range<u32>) -> Result<()> {
    let entries = t["entries"].as_array().context("entries")?;
    let u = |e: &serde_json::Value, k: &str| e[k].as_u64().unwrap_or(0);
    let promotion = entries
        .iter()
        .find(|e| e["kind"] == "hint_fault" && e["migrated"] == true && u(e, "dst_pfn") != 0)
        .context("no promotion in the timeline")?;
    let (at, src, dst) = (
        u(promotion, "ts_ns"),
        u(promotion, "src_pfn"),
        u(promotion, "dst_pfn"),
    );
    ensure!(
        u32::try_from(src).is_ok_and(|p| slow.contains(&p))
            && !u32::try_from(dst).is_ok_and(|p| slow.contains(&p)),
        "promoted from pfn {src:#x} to {dst:#x}: not from node 1 to another"
    );
    let accesses = |pfn: u64| {
        entries
            .iter()
            .filter(move |e| e["kind"] == "accesses" && u(e, "pfn") == pfn)
    };
    ensure!(
        accesses(src).any(|e| u(e, "ts_ns") <= at),
        "no true access at the slow frame {src:#x} before the promotion"
    );
    ensure!(
        accesses(dst).any(|e| u(e, "end_ns") >= at),
        "no true access at the new frame {dst:#x} from the promotion on"
    );
    Ok(())
}

/// Node 1's page frames, from the memory blocks the guest listed.
pub(crate) fn node_pfns(results: &Path) -> Result<std::ops::Range<u32>> {
    let block = crate::results::text(results, "block_size")?;
    let block = u64::from_str_radix(block.trim(), 16).context("block_size_bytes")?;
    let ids = crate::results::text(results, "node1-blocks")?
        .split_whitespace()
        .map(|b| b.parse::<u64>().context("a memory block number"))
        .collect::<Result<Vec<_>>>()?;
    let (Some(&lo), Some(&hi)) = (ids.iter().min(), ids.iter().max()) else {
        bail!("node 1 has no memory blocks");
    };
    ensure!(
        hi - lo + 1 == ids.len() as u64,
        "node 1's memory blocks are not contiguous: {ids:?}"
    );
    let pfn = |b: u64| u32::try_from((b * block) >> 12).context("node 1 beyond 2^44 bytes");
    Ok(pfn(lo)?..pfn(hi + 1)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wrapped_script_runs_the_command_between_ticker_start_and_stop() {
        let s = wrap("echo 'a b'; exit 3", 250);
        assert!(s.starts_with(
            "numatrace workload ticker --every-ms 250 --log /results/truth-ticks.txt &\n"
        ));
        assert!(s.contains("sh -c 'echo '\\''a b'\\''; exit 3'\n"));
        assert!(s.ends_with("exit $truth_status\n"));
    }

    #[test]
    fn the_plugin_argument_names_the_raw_file_and_the_marker() {
        let arg = plugin_arg(Path::new("/p/lib.so"), Path::new("/t/a,b.raw")).expect("absolute");
        assert_eq!(arg, "/p/lib.so,out=/t/a,,b.raw,marker=0x7e5700000000");
    }
}
