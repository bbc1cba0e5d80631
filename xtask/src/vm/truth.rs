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
/// NUMA balancing off (no page moves), and where node 1's memory is.
const SELF_TEST: &str = "echo 0 > /proc/sys/kernel/numa_balancing
cat /sys/devices/system/memory/block_size_bytes > /results/block_size
ls -d /sys/devices/system/node/node1/memory[0-9]* | sed 's/.*memory//' > /results/node1-blocks
numatrace workload hot-chunks --slow-mb 64 --chunk-mb 64 --accesses 100000 --idle-ms 0 --duration 3 --summary /results/w.json";

/// Boots `kernel` with the plugin on a workload whose accesses are known
/// and checks the truth file against them: the workload's every access is
/// a load and a store of one of its pages on node 1, so node 1's loads and
/// its stores each come to the workload's count, on its pages, give or
/// take the few other pages on node 1.
pub(crate) fn self_test(kernel: &Kernel, numatrace: &Path, setup: &mut Setup) -> Result<String> {
    let dir = crate::vm::state_dir(kernel.series).join("truth");
    let out = dir.join("results");
    let file = dir.join("self-test.truth");
    let plugin = plugin_arg(&build_plugin(setup)?, &raw_path(&file))?;
    let guest = Guest {
        kernel,
        topology: Topology::default(),
        numatrace,
        files: &[],
        mode: Mode::Command(wrap(SELF_TEST, 500)),
        timeout: Duration::from_secs(300),
        out: &out,
        icount: false,
        root_disk: None,
        plugin: Some(&plugin),
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
    let slow = node_pfns(&out)?;
    let w: Summary = crate::results::read_report(&out, "w.json")?;
    let (mut loads, mut stores, mut pages) = (0u64, 0u64, std::collections::BTreeSet::new());
    let mut r = TruthReader::new(fs::File::open(&file)?)?;
    while let Some(c) = r.next_count()? {
        if slow.contains(&c.pfn) {
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
    Ok(format!(
        "{} windows, node 1: {loads} loads and {stores} stores on {} pages; the workload: {} accesses on {} pages",
        done.windows,
        pages.len(),
        w.accesses,
        w.slow_pages
    ))
}

/// Node 1's page frames, from the memory blocks the guest listed.
fn node_pfns(results: &Path) -> Result<std::ops::Range<u32>> {
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
