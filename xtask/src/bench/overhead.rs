//! `cargo xtask bench overhead`: the probes' cost, measured side by side in
//! one VM boot. Each round runs the same hint-fault-bound workload four
//! ways, order rotating: bare (`base`); under `numatrace stats --live
//! --empty-programs` (`empty`: programs that do nothing at the same hooks,
//! the cost of attaching at all); under `numatrace stats --live` at its
//! defaults (`traced`); and the same with `--bpf-stats` (`stats`: the kernel's
//! per-program run time, which itself costs two clock reads per program run,
//! so the slowdown is taken from `traced`). The report gives, over the
//! rounds (median, min, max):
//!
//! - the workload slowdown of `empty`, `traced` and `stats`: the base run's
//!   CPU time with its hint faults at the run's kernel time per fault, over
//!   the base run's CPU time (see [`same_work_ratio`]); the target is on
//!   `traced`;
//! - the fault-path cost: the workload's kernel time per hint fault (in
//!   instruction-count mode its CPU time less its accesses' own, an
//!   access costing what it costs in a calibration run with NUMA
//!   balancing off, see [`KernelTime`]);
//! - from `stats`: each program's run time per hint fault and the BPF share
//!   of the workload's CPU time;
//! - hint faults/s, ring drops, the guest's busy CPU (numatrace's own
//!   userspace included), and numatrace's own CPU per record it read;
//! - from one more run after the rounds, with `demotion_enabled` and a
//!   memory larger than DRAM (demotion's own phase): the demotion hooks'
//!   run time per demoted folio and the fault path's per hint fault.
//!
//! By default the guest runs in QEMU's instruction-count mode
//! ([`Clock::Instructions`]): one guest nanosecond per executed guest
//! instruction, so every time the guest measures (CPU times, BPF run time)
//! is an instruction count, independent of the host's load and stable to
//! about 1% between rounds. These are emulated x86 instructions, not native
//! nanoseconds. `--wall-clock` keeps TCG's real-time clock.
use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{ensure, Context, Result};
use serde_json::Value;

use super::{num, rotated, round_runs, Spread};
use crate::results::{read_json, read_report};
use numa_core::model::totals::Report;
use numa_core::plan::ProgramStat;

pub(crate) const ROUNDS: usize = 6;

/// What the guest's clock counts.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Clock {
    /// `-icount shift=0`: 1 guest ns = 1 guest instruction.
    Instructions,
    /// TCG's real-time clock, which follows the host's load.
    Wall,
}

impl Clock {
    /// The unit of a guest nanosecond, and of a thousand of them.
    fn units(self) -> (&'static str, &'static str) {
        match self {
            Clock::Instructions => ("instructions", "k instructions"),
            Clock::Wall => ("ns", "us"),
        }
    }
}

/// One vCPU. The test bed runs all vCPUs on one host thread (TCG
/// thread=single), switching between busy vCPUs every 100 ms; a guest with
/// two sees time pass on the workload's CPU while the host emulates
/// numatrace's reader on the other, and bills it to the workload. On one
/// vCPU the guest scheduler runs them in turn and bills each its own time.
pub(crate) const CPUS: u32 = 1;

/// One run: 128 MiB on the slow node, touched at random; every page takes
/// a hint fault once the scanner protects it (free DRAM: promoted). A run
/// lasts until 24000 hint faults (of 32768 pages) have been taken, not a
/// fixed time: whether the scanner's one burst of faults fell inside a
/// fixed window decided a run's speed more than the probes did.
const WORKLOAD: &str = "numatrace workload hot-chunks --slow-mb 128 --chunk-mb 128 --accesses 100000 --duration 2 --min-faults 24000 --max-duration 120";

/// The same accesses for the same time with NUMA balancing off (no
/// scanner, no hint fault), once per boot: what an access costs alone.
const CALIBRATION: &str = "numatrace workload hot-chunks --slow-mb 128 --chunk-mb 128 --accesses 100000 --duration 2 --seed 0 --summary calibration.json";

/// Demotion's phase: more memory than DRAM, placed on DRAM (what does not
/// fit is demoted as it is populated), visited a chunk at a time so that
/// promotions push pages down (the `demotion` VM test's shape).
const DEMOTION: &str = "numatrace workload hot-chunks --slow-node 0 --slow-mb 2400 --chunk-mb 64 --accesses 20000 --in-turn --duration 10";

/// The programs at demotion's hooks (numa-ebpf's `demote`).
const DEMOTE_PROGRAMS: [&str; 2] = ["fexit_demote", "fexit_demote_batch"];

/// The four ways a round runs the workload: name and the numatrace command
/// in front of it (none for the base run).
const RUNS: [(&str, &str); 4] = [
    ("base", ""),
    ("empty", "numatrace stats --live --empty-programs --json --"),
    ("traced", "numatrace stats --live --json --"),
    ("stats", "numatrace stats --live --bpf-stats --json --"),
];

pub(crate) fn script() -> String {
    let mut s = format!(
        "cd /results\necho 0 > /proc/sys/kernel/numa_balancing\n{CALIBRATION} || exit 1\necho 2 > /proc/sys/kernel/numa_balancing\n"
    );
    for i in 0..ROUNDS {
        // /proc/stat's first line around each run: the guest's busy CPU.
        for (name, tool) in rotated(&RUNS, i) {
            let run = format!("{name}_{i}");
            let out = if tool.is_empty() {
                String::new()
            } else {
                format!(" > tool_{run}.json")
            };
            s.push_str(&format!(
                "head -1 /proc/stat > cpu_{run}_0.txt\n{tool} {WORKLOAD} --seed {i} --summary {run}.json{out} || exit 1\nhead -1 /proc/stat > cpu_{run}_1.txt\n"
            ));
        }
    }
    let dem = "/sys/kernel/mm/numa/demotion_enabled";
    s.push_str(&format!(
        "was=$(cat {dem})\necho true > {dem}\nnumatrace stats --live --bpf-stats --json -- {DEMOTION} --summary demotion.json > tool_demotion.json || exit 1\necho $was > {dem}\n"
    ));
    s
}

/// How a run's kernel time is told from its user time.
#[derive(Clone, Copy)]
enum KernelTime {
    /// The system time the kernel bills. It splits the run's exact CPU
    /// time between user and system by where timer ticks land, which
    /// moves the split by 2-3% from run to run.
    Billed,
    /// The run's CPU time less its accesses at the calibration run's cost
    /// per access. In instruction-count mode an access is the same
    /// instructions every time, and the CPU time (the scheduler's, not
    /// ticks) is exact, so this is exact too.
    BeyondAccesses { ms_per_access: f64 },
}

impl KernelTime {
    fn of(clock: Clock, calibration: &Value) -> Result<KernelTime> {
        if clock == Clock::Wall {
            // Under TCG's real-time clock an access's cost follows the host.
            return Ok(KernelTime::Billed);
        }
        let accesses = num(calibration, "accesses")?;
        ensure!(accesses > 0.0, "the calibration run made no access");
        Ok(KernelTime::BeyondAccesses {
            ms_per_access: cpu_ms(calibration)? / accesses,
        })
    }

    /// The workload's kernel time, in ms.
    fn ms(self, w: &Value) -> Result<f64> {
        match self {
            KernelTime::Billed => num(w, "sys_ms"),
            KernelTime::BeyondAccesses { ms_per_access } => {
                Ok(cpu_ms(w)? - num(w, "accesses")? * ms_per_access)
            }
        }
    }

    /// The workload's kernel time per hint fault, in µs.
    fn us_per_fault(self, w: &Value) -> Result<f64> {
        Ok(self.ms(w)? * 1000.0 / num(w, "numa_hint_faults")?.max(1.0))
    }
}

fn cpu_ms(w: &Value) -> Result<f64> {
    Ok(num(w, "user_ms")? + num(w, "sys_ms")?)
}

/// The base run's CPU time with its kernel time per hint fault replaced by
/// `run`'s, over the base run's CPU time: the workload's slowdown for the
/// same work. The probes run only in the kernel, so only the kernel side is
/// taken from `run`; the user side is not comparable between runs (the
/// accesses made while waiting for the scanner differ).
fn same_work_ratio(base: &Value, run: &Value, kt: KernelTime) -> Result<f64> {
    let total = cpu_ms(base)?;
    let user = total - kt.ms(base)?;
    let faults = num(base, "numa_hint_faults")?;
    Ok((user + faults * kt.us_per_fault(run)? / 1000.0) / total.max(1e-9))
}

/// Busy CPU seconds of the guest between two `/proc/stat` "cpu" lines
/// (user nice system idle iowait irq softirq steal, in USER_HZ = 100).
fn busy_cpu_s(dir: &Path, run: &str) -> Result<f64> {
    let read = |n: u32| -> Result<f64> {
        let path = dir.join(format!("cpu_{run}_{n}.txt"));
        let text =
            std::fs::read_to_string(&path).with_context(|| format!("no {}", path.display()))?;
        let f: Vec<f64> = text
            .split_whitespace()
            .skip(1)
            .filter_map(|x| x.parse().ok())
            .collect();
        ensure!(
            f.len() >= 7,
            "{} is not a /proc/stat cpu line",
            path.display()
        );
        let idle = f[3] + f[4];
        Ok(f.iter().take(8).sum::<f64>() - idle)
    };
    Ok((read(1)? - read(0)?) / 100.0)
}

/// Each figure of the report, one value per round.
struct Figures {
    /// Per tool run (`RUNS[1..]`): same-work CPU time / base.
    same_work: Vec<Vec<f64>>,
    /// Per run: the workload's kernel time per hint fault (µs).
    kernel_us: Vec<Vec<f64>>,
    /// Per run: the guest's busy CPU seconds.
    busy: Vec<Vec<f64>>,
    faults_per_s: Vec<f64>,
    bpf_ns_per_fault: Vec<f64>,
    bpf_share: Vec<f64>,
    per_program: BTreeMap<String, ProgramFigures>,
    /// Per round: numatrace's userspace CPU per record it read (guest ns).
    reader_ns_per_record: Vec<f64>,
    drops: u64,
}

/// One BPF program over the `stats` runs.
#[derive(Default)]
struct ProgramFigures {
    /// Run time (guest ns) per hint fault.
    per_fault: Vec<f64>,
    runs_per_fault: Vec<f64>,
    per_run: Vec<f64>,
    xlated_bytes: u64,
    jited_bytes: u64,
}

impl ProgramFigures {
    fn add(&mut self, p: &ProgramStat, faults: f64) {
        let (ns, runs) = (p.run_time_ns as f64, p.run_count as f64);
        self.per_fault.push(ns / faults);
        self.runs_per_fault.push(runs / faults);
        self.per_run.push(if runs > 0.0 { ns / runs } else { 0.0 });
        self.xlated_bytes = u64::from(p.xlated_bytes);
        self.jited_bytes = u64::from(p.jited_bytes);
    }
}

pub(crate) fn report(dir: &Path, clock: Clock) -> Result<()> {
    let mut fig = Figures {
        same_work: vec![Vec::new(); RUNS.len() - 1],
        kernel_us: vec![Vec::new(); RUNS.len()],
        busy: vec![Vec::new(); RUNS.len()],
        faults_per_s: Vec::new(),
        bpf_ns_per_fault: Vec::new(),
        bpf_share: Vec::new(),
        per_program: BTreeMap::new(),
        reader_ns_per_record: Vec::new(),
        drops: 0,
    };
    let (ns, us) = clock.units();
    let kt = KernelTime::of(clock, &read_json(dir, "calibration.json")?)?;
    println!("round | same-work CPU / base: empty  traced  stats | kernel {us}/fault: base  empty traced  stats | traced faults/s | BPF {ns}/fault  % of CPU | guest busy CPU s: base empty traced stats");
    for i in 0..ROUNDS {
        let line = round(dir, i, kt, &mut fig)?;
        println!("{line}");
    }
    print_summary(&fig, clock);
    print_demotion(&read_report(dir, "tool_demotion.json")?, clock)
}

/// Demotion's phase: the demotion hooks' run time per demoted folio and
/// the other programs' per hint fault, in the same run.
fn print_demotion(r: &Report, clock: Clock) -> Result<()> {
    let (ns, _) = clock.units();
    let folios = r.demotions.folios;
    ensure!(
        folios > 0,
        "demotion's phase demoted nothing ({} hint faults): no cost to state",
        r.hint_faults
    );
    let (demote, fault): (Vec<&ProgramStat>, Vec<&ProgramStat>) = r
        .bpf_programs
        .iter()
        .partition(|p| DEMOTE_PROGRAMS.contains(&p.name.as_str()));
    ensure!(
        !demote.is_empty(),
        "demotion's phase ran none of {DEMOTE_PROGRAMS:?}: the demote hook was not attached"
    );
    let time = |ps: &[&ProgramStat]| ps.iter().map(|p| p.run_time_ns as f64).sum::<f64>();
    println!();
    println!(
        "demotion's phase (one run, `stats --live --bpf-stats`, {folios} demoted folios in {} reclaim batches, {} hint faults):",
        r.demotions.batches, r.hint_faults
    );
    for p in &demote {
        println!(
            "  {:<26} {:>10} runs, {:>8.0} {ns}/run",
            p.name, p.run_count, p.ns_per_run
        );
    }
    println!(
        "  demotion hooks per demoted folio: {:.0} {ns}; the other programs per hint fault: {:.0} {ns}",
        time(&demote) / folios as f64,
        time(&fault) / r.hint_faults.max(1) as f64
    );
    Ok(())
}

/// Adds round `i`'s figures to `fig`; returns its line of the table.
fn round(dir: &Path, i: usize, kt: KernelTime, fig: &mut Figures) -> Result<String> {
    let runs = round_runs(dir, &RUNS, i)?;
    let base = &runs[0];
    let mut line = format!("{i:>5} |");
    for (k, run) in runs[1..].iter().enumerate() {
        let r = same_work_ratio(base, run, kt)?;
        fig.same_work[k].push(r);
        line.push_str(&format!(" {r:>6.3}"));
    }
    line.push_str(" |");
    for (k, run) in runs.iter().enumerate() {
        let us = kt.us_per_fault(run)?;
        fig.kernel_us[k].push(us);
        line.push_str(&format!(" {us:>6.1}"));
    }
    let traced: Report = read_report(dir, &format!("tool_traced_{i}.json"))?;
    let stats: Report = read_report(dir, &format!("tool_stats_{i}.json"))?;
    fig.drops += traced.drops + stats.drops;
    let fps = traced.hint_faults as f64 / traced.duration_s;
    fig.faults_per_s.push(fps);
    let faults = stats.hint_faults.max(1) as f64;
    let mut bpf_ns = 0.0;
    for p in &stats.bpf_programs {
        bpf_ns += p.run_time_ns as f64;
        fig.per_program
            .entry(p.name.clone())
            .or_default()
            .add(p, faults);
    }
    let stats_run = &runs[3];
    let cpu_ns = (num(stats_run, "user_ms")? + num(stats_run, "sys_ms")?) * 1e6;
    let share = 100.0 * bpf_ns / cpu_ns.max(1.0);
    fig.bpf_ns_per_fault.push(bpf_ns / faults);
    fig.bpf_share.push(share);
    line.push_str(&format!(
        " | {fps:>15.0} | {:>12.0} {share:>8.1} |",
        bpf_ns / faults
    ));
    for (k, (name, _)) in RUNS.iter().enumerate() {
        let b = busy_cpu_s(dir, &format!("{name}_{i}"))?;
        fig.busy[k].push(b);
        line.push_str(&format!(" {b:>5.2}"));
    }
    let reader = reader_ns_per_record(&traced)?;
    fig.reader_ns_per_record.push(reader);
    Ok(line)
}

/// numatrace's own userspace per record in the traced run: its process
/// CPU time from attached to the end (reading and decoding records, the
/// totals, snapshots, timers), over the records it read, as `stats`
/// reports it. Starting, parsing BTF and verifying the programs come
/// before and are not in it.
fn reader_ns_per_record(traced: &Report) -> Result<f64> {
    traced
        .numatrace_cpu
        .as_ref()
        .map(|c| c.run_ns_per_record)
        .context("the traced run's report has no numatrace_cpu")
}

/// Each program's figures (`stats` runs): its run time per hint fault, its
/// runs per hint fault, its cost per run, and its sizes.
fn print_programs(fig: &Figures, clock: Clock) {
    let (ns, _) = clock.units();
    println!();
    println!(
        "BPF programs (`stats` runs; medians over the rounds, spread = (max - min) / median):"
    );
    println!(
        "  {:<26} {:>14} {:>7} {:>10} {:>12} {:>8} {:>8}",
        "program",
        format!("{ns}/fault"),
        "spread",
        "runs/fault",
        format!("{ns}/run"),
        "xlated B",
        "JIT B"
    );
    for (name, p) in &fig.per_program {
        let per_fault = Spread::of(&p.per_fault);
        println!(
            "  {name:<26} {:>14.0} {:>6.1}% {:>10.2} {:>12.0} {:>8} {:>8}",
            per_fault.median,
            per_fault.spread_pct(),
            Spread::of(&p.runs_per_fault).median,
            Spread::of(&p.per_run).median,
            p.xlated_bytes,
            p.jited_bytes
        );
    }
}

/// The figures over all rounds.
fn print_summary(fig: &Figures, clock: Clock) {
    let (ns, us) = clock.units();
    print_programs(fig, clock);
    println!();
    println!("over {ROUNDS} rounds:");
    let labels = [
        "empty programs at the same hooks (the floor)",
        "numatrace at its defaults (target <= 1.050)",
        "numatrace with --bpf-stats",
    ];
    println!("  workload slowdown, CPU time for the same work / base:");
    for (label, v) in labels.iter().zip(&fig.same_work) {
        println!("    {label:<46} {}", Spread::of(v));
    }
    let how = match clock {
        Clock::Instructions => {
            "CPU time beyond the accesses' own, from a calibration run with NUMA balancing off"
        }
        Clock::Wall => "the system time the kernel bills",
    };
    println!("  kernel time per hint fault ({us}; {how}):");
    for ((name, _), v) in RUNS.iter().zip(&fig.kernel_us) {
        let sp = Spread::of(v);
        println!("    {name:<46} {sp:.2}, spread {:.1}%", sp.spread_pct());
    }
    let base = Spread::of(&fig.kernel_us[0]).median;
    for ((name, _), v) in RUNS.iter().zip(&fig.kernel_us).skip(1) {
        let added = 100.0 * (Spread::of(v).median / base - 1.0);
        println!("    {name} adds {added:+.1}% to the bare hint-fault path");
    }
    println!(
        "  BPF run time per hint fault ({ns}, all programs):  {:.0}",
        Spread::of(&fig.bpf_ns_per_fault)
    );
    println!(
        "  BPF share of the workload's CPU time (%):        {:.1}",
        Spread::of(&fig.bpf_share)
    );
    println!(
        "  hint faults/s with numatrace attached:           {:.0}",
        Spread::of(&fig.faults_per_s)
    );
    println!("  guest busy CPU s (workload + numatrace's userspace):");
    for ((name, _), v) in RUNS.iter().zip(&fig.busy) {
        println!("    {name:<46} {:.2}", Spread::of(v));
    }
    let reader = Spread::of(&fig.reader_ns_per_record);
    println!(
        "  numatrace's userspace per record read (traced runs, its own CPU once attached, {ns}): {reader:.0}, so one guest CPU reads {:.0} records/s",
        1e9 / reader.median.max(1.0)
    );
    println!(
        "  ring buffer drops (traced and stats runs; target 0): {}",
        fig.drops
    );
    if clock == Clock::Instructions {
        println!(
            "(QEMU TCG in instruction-count mode, one vCPU: every guest time above is a count of"
        );
        println!(
            " emulated x86 instructions (1 guest ns = 1 instruction), not native nanoseconds."
        );
    } else {
        println!(
            "(QEMU TCG, one vCPU, real-time clock: the kernel and the JITed BPF are both emulated,"
        );
        println!(" so absolute times are not a real machine's and follow the host's load.");
    }
    println!(
        " This workload does nothing but take hint faults, so its slowdown is the worst case;"
    );
    println!(
        " `empty` is what any tool attached at these hooks pays before its programs do anything.)"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use numa_core::model::totals::{SelfCpu, Totals};
    use serde_json::json;

    #[test]
    fn same_work_ratio_takes_only_the_kernel_side_from_the_run() {
        let base = json!({"user_ms": 1000.0, "sys_ms": 1000.0, "numa_hint_faults": 20000.0});
        // 50 us per fault in the base run; 75 us in the run, whose user side
        // (any value) must not matter.
        let run = json!({"user_ms": 123.0, "sys_ms": 1500.0, "numa_hint_faults": 20000.0});
        let r = same_work_ratio(&base, &run, KernelTime::Billed).unwrap();
        assert!((r - 1.25).abs() < 1e-9, "{r}");
    }

    /// In instruction-count mode the kernel time is the CPU time beyond the
    /// accesses, however the kernel split it between user and system.
    #[test]
    fn kernel_time_is_the_cpu_time_beyond_the_accesses_at_the_calibrated_cost() {
        // 20 ns (instructions) an access.
        let calibration = json!({"user_ms": 1990.0, "sys_ms": 10.0, "accesses": 1e8});
        let kt = KernelTime::of(Clock::Instructions, &calibration).unwrap();
        // 1600 ms of accesses; the other 400 ms over 20,000 faults, however
        // the ticks split them.
        for (user, sys) in [(1600.0, 400.0), (1550.0, 450.0)] {
            let w = json!({"user_ms": user, "sys_ms": sys, "accesses": 8e7, "numa_hint_faults": 20000.0});
            let us = kt.us_per_fault(&w).unwrap();
            assert!((us - 20.0).abs() < 1e-9, "{us}");
        }
        let wall = KernelTime::of(Clock::Wall, &calibration).unwrap();
        let w = json!({"user_ms": 1550.0, "sys_ms": 450.0, "accesses": 8e7, "numa_hint_faults": 20000.0});
        assert!((wall.us_per_fault(&w).unwrap() - 22.5).abs() < 1e-9);
        let none = json!({"user_ms": 1.0, "sys_ms": 1.0, "accesses": 0.0});
        assert!(KernelTime::of(Clock::Instructions, &none).is_err());
    }

    /// A `stats --json` report of `faults` hint faults over 5 s, with the
    /// reader's CPU per record and one program's figures.
    fn tool_report(faults: u64, reader_ns: Option<f64>) -> Report {
        let mut r = Totals::new(1).report(0, 0);
        r.hint_faults = faults;
        r.duration_s = 5.0;
        r.numatrace_cpu = reader_ns.map(|ns| SelfCpu {
            attach_s: 1.0,
            run_s: 1.0,
            records: faults,
            run_ns_per_record: ns,
        });
        r.bpf_programs = vec![ProgramStat {
            name: "fentry_hint_fault".into(),
            run_count: faults,
            run_time_ns: 1000 * faults,
            ns_per_run: 1000.0,
            xlated_bytes: 800,
            jited_bytes: 500,
            runs_missed: 0,
        }];
        r
    }

    #[test]
    fn the_reader_is_numatraces_own_cpu_per_record() {
        assert_eq!(
            reader_ns_per_record(&tool_report(3, Some(1234.5))).unwrap(),
            1234.5
        );
        assert!(reader_ns_per_record(&tool_report(3, None)).is_err());
    }

    /// The report reads exactly the files the script makes: write what the
    /// script names (a run's summary, numatrace's output, /proc/stat lines)
    /// and report on them.
    #[test]
    fn report_reads_what_the_script_writes() {
        let dir = std::env::temp_dir().join(format!("overhead-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let script = script();
        let words: Vec<&str> = script.split_whitespace().collect();
        let mut runs = 0;
        for (i, w) in words.iter().enumerate() {
            let Some(next) = words.get(i + 1) else {
                continue;
            };
            if *w == "--summary" {
                runs += 1;
                let summary = json!({"user_ms": 900.0, "sys_ms": 1500.0,
                    "numa_hint_faults": 30000.0, "accesses": 1e6});
                std::fs::write(dir.join(next), summary.to_string()).unwrap();
            } else if *w == ">" && next.starts_with("tool_") {
                let mut r = tool_report(30000, Some(900.0));
                if *next == "tool_demotion.json" {
                    r.demotions.folios = 2000;
                    r.bpf_programs.push(ProgramStat {
                        name: DEMOTE_PROGRAMS[0].into(),
                        ..r.bpf_programs[0].clone()
                    });
                }
                let tool = serde_json::to_string(&r).unwrap();
                std::fs::write(dir.join(next), tool).unwrap();
            } else if *w == ">" && next.starts_with("cpu_") {
                let ticks = if next.ends_with("_0.txt") { 100 } else { 400 };
                let line = format!("cpu  {ticks} 0 {ticks} 1000 0 0 0 0 0 0\n");
                std::fs::write(dir.join(next), line).unwrap();
            }
        }
        // The calibration run, every round's runs and demotion's.
        assert_eq!(runs, 1 + ROUNDS * RUNS.len() + 1);
        report(&dir, Clock::Instructions).unwrap();
        report(&dir, Clock::Wall).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
