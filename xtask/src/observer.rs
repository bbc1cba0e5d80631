//! Does the kernel behave under numatrace as it does without it? What
//! `cargo xtask bench observer` and the `observer` VM test share: the
//! guest's settings, its `run` function taking the kernel's own vmstat
//! deltas around a command, the workload, and a run's deviation from the
//! bare run beside it.
//!
//! The workload ([`workload!`]): DRAM filled, a 256 MiB slow-node region
//! visited in 64 MiB chunks in turn after 4 s of sleep each. The kernel
//! scans a task in 16 MiB steps on its CPU time and charges the scanner 32
//! times the runtime that accrues while it scans (`p->node_stamp += 32 *
//! diff` in `task_numa_work`). Runtime accrues lazily, at ticks and
//! context switches: a task alone on its CPU gets a whole tick (4 ms at
//! HZ 250) at once, so a scan a tick lands in is charged 128 ms more, two
//! and a half scan periods. A chunk visit takes about six scans; one that
//! loses them early leaves the next chunk unprotected before its visit,
//! which then takes no hint fault, so this workload sits on a cliff
//! between all 65,536 of its pages faulted and a few thousand.
//!
//! A bare run's scans start just after the tick that queued them and end
//! before the next. In the test bed's instruction-count mode the vCPUs
//! take turns on one guest clock: instructions numatrace's reader runs on
//! the other vCPU are time that passes on the workload's, which makes
//! ticks land in its scans, each charged as a whole tick of the
//! workload's runtime. On real CPUs the reader's time is its own. With
//! the reader on the workload's vCPU the kernel accounts it at the
//! context switches: scans are charged what they ran (docs/measurements.md,
//! "The cliff's mechanism"), so the `observer` test pins every run there.

/// Guest shell, a literal for the scripts that are constants: the
/// workload's settings (`hot_threshold_ms` 100; `$nb` the scheduler's
/// NUMA-balancing debugfs directory; `$pin` the prefix that runs a command
/// on vCPU 0) and `run NAME CMD...`, which runs CMD
/// and writes the vmstat deltas of [`COUNTERS`] around it to NAME.json
/// (CMD's output to NAME.out; a failed CMD fails the script), and the
/// shell's children's CPU time before and after it to NAME.times (the
/// shell's `times`: user and system, a line each).
macro_rules! setup {
    () => {
        r#"echo 2 > /proc/sys/kernel/numa_balancing
echo 1 > /sys/kernel/mm/numa/demotion_enabled
nb=/sys/kernel/debug/sched/numa_balancing
echo 16 > $nb/scan_size_mb
echo 100 > $nb/hot_threshold_ms
export TERM=dumb
# A run on vCPU 0, numatrace's reader with the workload (see the module docs).
pin='taskset -c 0'
# The node counters' per-CPU parts folded in first (stat_refresh).
counters() { cat /proc/sys/vm/stat_refresh > /dev/null; grep -E '^(numa_hint_faults|numa_pte_updates|pgpromote_success) ' /proc/vmstat; }
run() {
	name=$1; shift
	counters > /tmp/before
	times > /tmp/times
	"$@" > $name.out 2>&1 || { echo "$name failed:"; tail -20 $name.out; exit 1; }
	times >> /tmp/times
	counters > /tmp/after
	sed -n '2p;4p' /tmp/times > $name.times
	paste /tmp/before /tmp/after | awk 'BEGIN { printf "{" } { printf "%s\"%s\":%d", sep, $1, $4 - $2; sep = "," } END { print "}" }' > $name.json
}
"#
    };
}
pub(crate) use setup;

/// One process: 700 MiB of DRAM filled and left idle, 256 MiB on the slow
/// node touched once, then four 64 MiB chunks in turn, each after 4 s of
/// sleep, with 4 Mi random page reads and writes per chunk. A literal,
/// like [`setup!`].
macro_rules! workload {
    () => {
        "numatrace workload hot-chunks --dram-mb 700 --slow-mb 256 \
         --chunk-mb 64 --idle-ms 4000 --accesses 4194304 --visits 4 --in-turn \
         --max-duration 900 --summary /dev/null"
    };
}
pub(crate) use workload;

pub(crate) const SETUP: &str = setup!();
pub(crate) const WORKLOAD: &str = workload!();

/// The kernel counters each run reports, as vmstat names them.
pub(crate) const COUNTERS: [&str; 3] =
    ["numa_hint_faults", "numa_pte_updates", "pgpromote_success"];

/// `traced / bare - 1` in percent (0 when both are 0).
pub(crate) fn deviation_pct(traced: f64, bare: f64) -> f64 {
    if bare == 0.0 {
        if traced == 0.0 {
            0.0
        } else {
            f64::INFINITY
        }
    } else {
        100.0 * (traced / bare - 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deviation_is_relative_to_the_bare_run() {
        assert_eq!(deviation_pct(8192.0, 65536.0), -87.5);
        assert_eq!(deviation_pct(0.0, 0.0), 0.0);
        assert!(deviation_pct(1.0, 0.0).is_infinite());
    }

    #[test]
    fn the_script_reports_every_counter() {
        for c in COUNTERS {
            assert!(SETUP.contains(c), "{c}");
        }
    }
}
