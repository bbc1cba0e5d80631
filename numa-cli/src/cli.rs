//! Command-line interface: clap data, and its translation into the
//! libraries' options (the only place flags meet library types).
use std::{path::PathBuf, time::Duration};

use clap::{Args, Parser, Subcommand, ValueEnum};
use numa_core::model::policy::{self, KernelDefaults, ModelDefaults, Policy};
use numa_probe::load::Probes;
use numa_source::{LiveOptions, Source};

pub(crate) mod ranges;
pub(crate) use ranges::try_parse_from;
#[cfg(test)]
mod tests;

#[derive(Debug, Parser)]
#[command(
    name = "numatrace",
    version,
    about = "Shows, and second-guesses, how Linux NUMA balancing promotes hot pages from slow memory"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// More messages on stderr (or the journal): -v debug, -vv trace.
    /// RUST_LOG (e.g. `warn,numa_probe=debug`) replaces -v and -q when set.
    #[arg(short, long, action = clap::ArgAction::Count, global = true, conflicts_with = "quiet")]
    pub verbose: u8,
    /// Only errors; warnings and progress messages are not shown.
    #[arg(short, long, global = true)]
    pub quiet: bool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Check prerequisites, print the attach plan, try each probe mechanism.
    Doctor {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
        /// Instead of the checks, list the BPF programs, maps and links
        /// loaded in the kernel now (as bpftool does), numatrace's marked:
        /// after numatrace exits none of its own may remain.
        #[arg(long)]
        loaded: bool,
    },
    /// Totals: hint faults, decisions by reason, migrations, histograms.
    Stats(StatsArgs),
    /// Record a self-describing trace of every hint fault, scan and skip.
    Record(RecordArgs),
    /// Run alternative promotion policies in shadow beside the kernel (live).
    Shadow(ShadowArgs),
    /// Run the shadow policies on a recorded trace; sweep a parameter.
    Replay(ReplayArgs),
    /// Write a self-contained HTML report of a trace (charts, agreement,
    /// sweep), or of several side by side (one column per host or run):
    /// to -o FILE (replaced; `-` is standard output), else to report.html
    /// in the current directory if no file has that name. HTML only:
    /// `replay --json`/`--csv` gives the figures as data.
    Report(ReportArgs),
    /// Print every record of a trace as one JSON line, or write its hint
    /// faults as a Parquet file for SQL engines (DuckDB, Spark, Trino).
    Dump(DumpArgs),
    /// Serve counters and in-kernel histograms to Prometheus (or write a
    /// node_exporter textfile).
    Export(ExportArgs),
    /// Latency and fault-count histograms: bcc-style text, JSON lines, CSV.
    Hist(HistArgs),
    /// One page's life in a trace, in time order: the scan passes over it,
    /// its hint faults (latency since its scan, fault-count delta, the
    /// kernel's decision and every model's), migrations and demotions.
    Explain(ExplainArgs),
    /// Live TUI: rates, processes, latency histograms, shadow models.
    ///
    /// Keys: q quit, arrows/j/k select, Enter detail, Esc back, s/S sort,
    /// / filter, p pause, +/- refresh, m model, ? help. With --duration or
    /// COMMAND, top exits when the run ends; without, it runs until q (a
    /// replay stays on the trace's final numbers).
    Top(TopArgs),
    /// Promote the pages a model finds hot and the kernel refused, with
    /// move_pages(2): rate limited, above a free-memory floor, scoped.
    Promote(PromoteArgs),
    /// Synthetic workloads for trying numatrace (the test bed uses them).
    #[command(subcommand)]
    Workload(Workload),
    /// Print a shell completion script (bash: save it as
    /// /usr/share/bash-completion/completions/numatrace; zsh: as _numatrace
    /// on $fpath; fish: in ~/.config/fish/completions/numatrace.fish).
    Completions { shell: clap_complete::Shell },
    /// Write a man page per command (numatrace.1, numatrace-top.1, ...)
    /// into DIR, from the same definitions as --help.
    #[command(hide = true)]
    Manpages { dir: PathBuf },
}

impl ProbeArgs {
    /// What the probe session needs of these flags.
    pub(crate) fn options(&self) -> numa_probe::session::ProbeOptions {
        numa_probe::session::ProbeOptions {
            pid: self.pid,
            cgroup: self.cgroup.clone(),
            sample: self.sample,
            map_budget: self.map_budget,
            ring_mb: self.ring_mb,
            bpf_stats: self.bpf_stats,
            empty_programs: self.empty_programs,
            empty_only: self.empty_program.clone(),
            damon: None,
        }
    }

    /// How long a live run lasts: --duration, else until a stop signal or
    /// COMMAND exits.
    pub(crate) fn until(&self) -> Option<Duration> {
        // The parser keeps --duration in range; the clamp keeps a value
        // built some other way from panicking.
        self.duration.and_then(|s| {
            Duration::try_from_secs_f64(s.clamp(ranges::MIN_RUN_S, ranges::MAX_RUN_S)).ok()
        })
    }

    /// How long a command that reports at the end runs: --duration, else
    /// until COMMAND exits, else 10 s.
    pub(crate) fn report_until(&self) -> Option<Duration> {
        match self.until() {
            None if self.command.is_empty() => Some(Duration::from_secs(10)),
            until => until,
        }
    }

    /// The live source these flags ask for, on attached `probes`.
    pub(crate) fn live(&self, probes: Probes, snapshot_every: Duration) -> Source {
        Source::Live(
            Box::new(probes),
            LiveOptions {
                command: self.command.clone(),
                snapshot_every,
                stop_when: None,
            },
        )
    }
}

/// Options of every command that attaches the probes.
#[derive(Debug, Args, Clone)]
pub(crate) struct ProbeArgs {
    /// Only record events of this process (tgid). Counters stay system-wide.
    #[arg(long, value_parser = ranges::pid)]
    pub pid: Option<u32>,
    /// Only record events of processes in this cgroup (v2 directory) or in
    /// any cgroup below it.
    #[arg(long)]
    pub cgroup: Option<PathBuf>,
    /// Emit one fault record in N, 1 to 1000000 (counters and histograms
    /// stay exact).
    #[arg(long, default_value_t = 1, value_parser = ranges::sample)]
    pub sample: u64,
    /// Kernel memory all of numatrace's maps may take, 1MiB to 1TiB
    /// (K, M, G, T binary suffixes; a bare number is MiB). When the slow
    /// nodes' per-folio state does not fit, one folio in 2^k is followed
    /// (by PFN hash) and estimates are scaled back: reports state the rate.
    #[arg(long, default_value = "256M", value_parser = ranges::map_budget)]
    pub map_budget: u64,
    /// Ring buffer size in MiB, 1 to 2048 (rounded up to a power of two).
    #[arg(long, default_value_t = 16, value_parser = ranges::ring_mb)]
    pub ring_mb: u32,
    /// Stop after this many seconds, 0.001 to 31536000 (default: when
    /// COMMAND exits, else 10 s).
    #[arg(long, value_parser = ranges::run_seconds)]
    pub duration: Option<f64>,
    /// Measure the BPF programs' own run time (kernel BPF stats).
    #[arg(long)]
    pub bpf_stats: bool,
    /// Attach programs that do nothing at the same hooks and record
    /// nothing: run a workload under it and under the real programs to
    /// see what attaching alone costs on this machine (fentry/fexit only).
    #[arg(long)]
    pub empty_programs: bool,
    /// Attach this one program's empty twin, the others as they are
    /// (repeatable; fentry/fexit/tracepoint programs, as `doctor --json`
    /// names them): which program's work changes what the kernel does.
    #[arg(long, value_name = "PROGRAM", value_parser = ranges::empty_program,
          conflicts_with = "empty_programs")]
    pub empty_program: Vec<&'static str>,
    /// Run this command while attached and stop when it exits.
    #[arg(last = true)]
    pub command: Vec<String>,
}

#[derive(Debug, Args)]
pub(crate) struct StatsArgs {
    /// A trace recorded with `numatrace record`.
    #[arg(conflicts_with = "live", required_unless_present = "live")]
    pub file: Option<PathBuf>,
    /// Attach the probes to the running kernel instead of reading a trace.
    #[arg(long)]
    pub live: bool,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
    /// Also write the evaluated events to this trace file (with --live).
    #[arg(long, requires = "live")]
    pub record: Option<PathBuf>,
    /// Replace the --record file if it exists (never overwritten otherwise).
    #[arg(long, requires = "record")]
    pub overwrite: bool,
    /// Also break the page counts down: `cgroup`, one row per cgroup v2
    /// (its path on this host when the report is made), to hold against
    /// each cgroup's memory.stat.
    #[arg(long, value_enum)]
    pub by: Option<StatsBy>,
    #[command(flatten)]
    pub live_truth: LiveTruthArgs,
    #[command(flatten)]
    pub probe: ProbeArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum StatsBy {
    /// The faulting task's cgroup.
    Cgroup,
}

/// Flat model options: defaults for every model whose spec does not set
/// them.
#[derive(Debug, Args, Clone, Default)]
pub(crate) struct ModelFlags {
    /// fault-count threshold (hint faults between scan and fault), 1 to
    /// 4294967295 (the patched kernel's unsigned int); RFC: 1e6.
    #[arg(long, value_parser = ranges::threshold)]
    pub threshold: Option<f64>,
    /// fault-count counter: mm (the RFC's per-process) or global (only with
    /// fault-count:exact).
    #[arg(long, value_parser = ["mm", "global"])]
    pub counter: Option<String>,
    /// fault-count stamp: first (the kernel's) or latest (the RFC's patch 2/2).
    #[arg(long, value_parser = ["first", "latest"])]
    pub stamp: Option<String>,
    /// two-touch observation window in ms, 1 to 86400000 (default: 2 x
    /// hot_threshold_ms).
    #[arg(long, value_parser = ranges::int(1u64, 86_400_000, "milliseconds"))]
    pub window_ms: Option<u64>,
}

impl ModelFlags {
    /// These options as the models' defaults.
    pub(crate) fn defaults(&self, rate_limit: Option<bool>) -> ModelDefaults {
        ModelDefaults {
            threshold: self.threshold,
            counter: self.counter.clone(),
            stamp: self.stamp.clone(),
            window_ms: self.window_ms,
            rate_limit,
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct DumpArgs {
    /// Trace file from `numatrace record`.
    pub trace: PathBuf,
    /// json: every record (header, faults, scans, skips, snapshots) as one
    /// JSON line. parquet: one row per hint fault that `stats` counts, its
    /// columns typed, with the host, the kernel release and the shadow
    /// models' verdicts (model_kernel_time, model_fault_count,
    /// model_two_touch: the default models of `replay`) as columns; needs
    /// --output.
    #[arg(long, value_enum, default_value_t = DumpFormat::Json)]
    pub format: DumpFormat,
    /// Write to FILE (created beside it and renamed into place, mode 0600:
    /// it holds kernel addresses) instead of standard output; `-` is
    /// standard output. Only a regular file is replaced: the null device
    /// or a FIFO with a reader is written in place, anything else refused.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// The host's name in parquet's `host` column [default: the host the
    /// trace recorded, else the trace's file name without its extension].
    #[arg(long, value_name = "NAME", value_parser = ranges::host_name)]
    pub host: Option<String>,
    /// parquet: one row per demotion record instead (each folio reclaim
    /// demoted, and each reclaim batch's end with its pages), with the
    /// ping-pong it ends (the promotion's time on the top tier and
    /// promoting pid).
    #[arg(long)]
    pub demotions: bool,
}

/// `numatrace explain`.
#[derive(Debug, Args)]
pub(crate) struct ExplainArgs {
    /// Trace file from `numatrace record`.
    pub trace: PathBuf,
    /// The process whose page to follow.
    #[arg(long, value_parser = ranges::pid)]
    pub pid: u32,
    /// A virtual address in the page (hex with 0x, or decimal); a large
    /// folio's records count for every page it covers.
    #[arg(long, value_parser = ranges::user_addr)]
    pub addr: u64,
    /// The timeline as JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// A truth file of the same run (`cargo xtask vm --truth FILE`): adds
    /// the page's true loads and stores per window.
    #[arg(long, value_name = "FILE")]
    pub truth: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum DumpFormat {
    Json,
    Parquet,
}

/// Which shadow policies to run, with flat defaults for their options;
/// shared by every command that runs models (`shadow`, `replay`, `report`,
/// `top`, `export`).
#[derive(Debug, Args, Clone, Default)]
pub(crate) struct ModelSel {
    /// Policy to evaluate, repeatable: kernel-time, fault-count (the RFC's
    /// patched kernel), fault-count:exact (idealised deltas), two-touch,
    /// optionally with options: `fault-count:threshold=2e5,stamp=latest`.
    /// Default: all three with their defaults. At most 62.
    #[arg(long = "model", value_parser = ranges::model_spec)]
    pub models: Vec<String>,
    #[command(flatten)]
    pub options: ModelFlags,
    /// Apply the kernel's promotion rate limit to fault-count:exact too
    /// (fault-count, the patched kernel, has it already).
    #[arg(long)]
    pub rate_limit: bool,
}

impl ModelSel {
    /// The flat options as the models' defaults.
    pub(crate) fn defaults(&self) -> ModelDefaults {
        self.options.defaults(self.rate_limit.then_some(true))
    }

    /// The models asked for: none named, the default three; `none` alone,
    /// no model at all.
    pub(crate) fn policies(&self, k: &KernelDefaults) -> anyhow::Result<Vec<Box<dyn Policy>>> {
        if self.models.iter().any(|m| m == "none") {
            if self.models.len() > 1 {
                anyhow::bail!("--model none runs no shadow model: give it alone");
            }
            return Ok(Vec::new());
        }
        policy::build_all(&self.models, &self.defaults(), k)
    }
}

/// Shadow policy selection plus report output, for `shadow` and `replay`.
#[derive(Debug, Args, Clone)]
pub(crate) struct ModelArgs {
    #[command(flatten)]
    pub sel: ModelSel,
    /// Processes listed in the report (0 to 10000).
    #[arg(long, default_value_t = 10,
          value_parser = ranges::int(0, ranges::MAX_ROWS, "processes"))]
    pub top: usize,
    /// Machine-readable output.
    #[arg(long, conflicts_with = "csv")]
    pub json: bool,
    /// One CSV row per model.
    #[arg(long)]
    pub csv: bool,
    /// Write the report here instead of stdout (`-`: stdout; only a
    /// regular file is replaced).
    #[arg(short = 'o', long = "output")]
    pub output: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct ShadowArgs {
    #[command(flatten)]
    pub models: ModelArgs,
    /// Also print a report every this many seconds (0.01 or more).
    #[arg(long, value_parser = ranges::interval_seconds)]
    pub interval: Option<f64>,
    /// Also record the evaluated events to this trace file.
    #[arg(long)]
    pub record: Option<PathBuf>,
    /// Replace the --record file if it exists (never overwritten otherwise).
    #[arg(long, requires = "record")]
    pub overwrite: bool,
    #[command(flatten)]
    pub live_truth: LiveTruthArgs,
    #[command(flatten)]
    pub score: ScoreArgs,
    #[command(flatten)]
    pub probe: ProbeArgs,
}

#[derive(Debug, Args)]
pub(crate) struct ReplayArgs {
    /// Trace file from `numatrace record` or `numatrace shadow --record`.
    pub trace: PathBuf,
    #[command(flatten)]
    pub models: ModelArgs,
    /// Sweep a fault-count parameter over 1 to 62 values:
    /// `threshold=1e4,1e5,1e6`.
    #[arg(long, value_parser = ranges::sweep)]
    pub sweep: Option<String>,
    /// Score the kernel and every model against the truth: a truth file
    /// (the test bed's accesses, from `cargo xtask vm --truth FILE`), or
    /// `from-trace`, the DAMON records of a run with `--truth damon`:
    /// precision, recall, burst promotions, time to promotion and the slow
    /// tier's share of the accesses, per hot rule.
    #[arg(long, value_name = "FILE|from-trace", conflicts_with = "csv",
          value_parser = ranges::truth_source)]
    pub truth: Option<TruthSource>,
    #[command(flatten)]
    pub score: ScoreArgs,
}

/// Where a scorecard's truth comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TruthSource {
    /// A truth file (the test bed's QEMU plugin).
    File(PathBuf),
    /// The trace's own DAMON records.
    FromTrace,
}

impl TruthSource {
    /// The truth file, when one is named.
    pub(crate) fn file(&self) -> Option<&std::path::Path> {
        match self {
            TruthSource::File(p) => Some(p),
            TruthSource::FromTrace => None,
        }
    }
}

/// A truth sampled on the running host while the probes are attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum LiveTruth {
    /// A kdamond of numatrace's own with physical-address operations over
    /// every memory node (the slow tier's, and DRAM's, where promoted pages
    /// go); its regions go into the trace. Needs DAMON (not in Debian's
    /// 6.1) and no other kdamond set up through DAMON's sysfs.
    Damon,
}

/// `--truth damon` on the commands that attach the probes.
#[derive(Debug, Args, Clone)]
pub(crate) struct LiveTruthArgs {
    /// Sample which memory is accessed while attached (`damon`): the
    /// scorecard's truth on a real host; its cost (the kdamond's CPU) and
    /// resolution are in the report.
    #[arg(long, value_enum)]
    pub truth: Option<LiveTruth>,
    /// DAMON's sample interval in microseconds, 100 to 1000000: how often
    /// each region's sampled page is checked.
    #[arg(long, default_value_t = 5_000, requires = "truth",
          value_parser = ranges::int(100u64, 1_000_000, "microseconds"))]
    pub damon_sample_us: u64,
    /// DAMON's aggregation interval in milliseconds, 1 to 60000: a window
    /// of the truth (at least one sample interval).
    #[arg(long, default_value_t = 100, requires = "truth",
          value_parser = ranges::int(1u64, 60_000, "milliseconds"))]
    pub damon_aggr_ms: u64,
    /// Fewest regions DAMON keeps, 3 to 100000: more regions, finer
    /// resolution, more kdamond CPU (each region is sampled).
    #[arg(long, default_value_t = 10, requires = "truth",
          value_parser = ranges::int(3u32, 100_000, "regions"))]
    pub damon_min_regions: u32,
    /// Most regions DAMON keeps, 3 to 100000 (at least --damon-min-regions).
    #[arg(long, default_value_t = 1000, requires = "truth",
          value_parser = ranges::int(3u32, 100_000, "regions"))]
    pub damon_max_regions: u32,
}

impl LiveTruthArgs {
    /// The probe session's options: `probe`'s, with the kdamond asked for
    /// (its regions are the nodes' spans, found when it starts).
    pub(crate) fn options(
        &self,
        probe: &ProbeArgs,
    ) -> anyhow::Result<numa_probe::session::ProbeOptions> {
        let damon = match self.truth {
            Some(LiveTruth::Damon) => Some(self.damon_spec()?),
            None => None,
        };
        Ok(numa_probe::session::ProbeOptions {
            damon,
            ..probe.options()
        })
    }

    fn damon_spec(&self) -> anyhow::Result<numa_core::damon::Spec> {
        let aggr_us = self.damon_aggr_ms * 1000;
        if aggr_us < self.damon_sample_us {
            anyhow::bail!(
                "--damon-aggr-ms {} is shorter than --damon-sample-us {}: an aggregation \
                 holds one sample or more; lengthen the aggregation or shorten the sample",
                self.damon_aggr_ms,
                self.damon_sample_us
            );
        }
        if self.damon_max_regions < self.damon_min_regions {
            anyhow::bail!(
                "--damon-max-regions {} is below --damon-min-regions {}: give a maximum at \
                 least the minimum",
                self.damon_max_regions,
                self.damon_min_regions
            );
        }
        Ok(numa_core::damon::Spec {
            sample_us: self.damon_sample_us,
            aggr_us,
            min_regions: self.damon_min_regions,
            max_regions: self.damon_max_regions,
            ..numa_core::damon::Spec::over(Vec::new())
        })
    }
}

/// The scorecard's rules, for the commands that take `--truth`.
#[derive(Debug, Args, Clone)]
pub(crate) struct ScoreArgs {
    /// The scorecard's hot rules: accesses in one truth window that make a
    /// page hot there, 1 to 4 comma-separated values (1 to 1000000000).
    #[arg(long, default_value = "1,8", requires = "truth", value_parser = ranges::hot_rules)]
    pub hot_accesses: ranges::HotRules,
    /// The scorecard's horizon: a promotion is right when the page is hot
    /// within this many seconds after it, and a hot page is found when
    /// promoted within this many seconds of its first hot window (0.1 to
    /// 86400).
    #[arg(long, default_value_t = 10.0, requires = "truth",
          value_parser = ranges::real(0.1, 86_400.0, "seconds"))]
    pub horizon_s: f64,
}

impl ScoreArgs {
    pub(crate) fn rules(&self) -> numa_core::model::scorecard::Rules {
        numa_core::model::scorecard::Rules {
            hot_accesses: self.hot_accesses.0.clone(),
            horizon_ns: (self.horizon_s * 1e9) as u64,
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct TopArgs {
    /// Drive the UI from a recorded trace instead of the live probes (no
    /// BPF, no root needed).
    #[arg(long, value_name = "TRACE")]
    pub replay: Option<PathBuf>,
    /// Replay speed: 2 plays twice as fast as recorded, 0 as fast as
    /// possible (0.001 to 1000000, or 0). A gap of more than 2 s between
    /// records (a suspended host, a damaged timestamp) is shortened to 2 s.
    #[arg(long, default_value_t = 1.0, requires = "replay", value_parser = ranges::speed)]
    pub speed: f64,
    /// Start the trace again when it ends (demos, benchmarks).
    #[arg(long = "loop", requires = "replay")]
    pub repeat: bool,
    /// Print one snapshot and exit, no terminal needed: live, after
    /// --duration (default 2 s) or when COMMAND exits; with --replay, of the
    /// whole trace.
    #[arg(long)]
    pub once: bool,
    /// With --once: the snapshot as JSON (default: the screen as text).
    #[arg(long, requires = "once")]
    pub json: bool,
    /// Refresh interval in seconds, 0.01 or more (`+`/`-` change it).
    #[arg(long, default_value_t = 1.0, value_parser = ranges::interval_seconds)]
    pub interval: f64,
    /// `cgroup`: start with one row per cgroup v2, by path (`c` switches
    /// between cgroups and processes).
    #[arg(long, value_enum)]
    pub by: Option<StatsBy>,
    /// Shadow policies (as in `shadow`; `--model none`: no models, cheapest).
    #[command(flatten)]
    pub sel: ModelSel,
    #[command(flatten)]
    pub probe: ProbeArgs,
}

#[derive(Debug, Args)]
pub(crate) struct ReportArgs {
    /// Trace files from `numatrace record` or `numatrace shadow --record`,
    /// 1 to 16: several are drawn side by side, one column each.
    #[arg(required = true, value_name = "TRACE")]
    pub traces: Vec<PathBuf>,
    /// Models and the output file (`-o`; without it report.html in the
    /// current directory, never replaced).
    #[command(flatten)]
    pub models: ModelArgs,
    /// With one trace and --addr: add this process's page's timeline, as
    /// `numatrace explain` gives it.
    #[arg(long, value_parser = ranges::pid, requires = "addr")]
    pub pid: Option<u32>,
    /// The page's virtual address (with --pid).
    #[arg(long, value_parser = ranges::user_addr, requires = "pid")]
    pub addr: Option<u64>,
    /// The truth of the same run (one trace), a file or `from-trace` as
    /// `replay --truth` takes it: adds the scorecard, and with --pid and
    /// --addr (a file only) the page's true accesses, as `explain --truth`.
    #[arg(long, value_name = "FILE|from-trace", value_parser = ranges::truth_source)]
    pub truth: Option<TruthSource>,
    #[command(flatten)]
    pub score: ScoreArgs,
}

#[derive(Debug, Args)]
pub(crate) struct RecordArgs {
    /// Trace file to write (owner-only: it holds kernel addresses).
    #[arg(short, long)]
    pub output: PathBuf,
    /// Replace the trace file if it exists (never overwritten otherwise).
    #[arg(long)]
    pub overwrite: bool,
    #[command(flatten)]
    pub live_truth: LiveTruthArgs,
    #[command(flatten)]
    pub probe: ProbeArgs,
}

/// `numatrace export`; probe options apply to live runs, where
/// `--duration` defaults to running until a signal.
#[derive(Debug, Args)]
pub(crate) struct ExportArgs {
    /// Serve /metrics on this address (default 127.0.0.1:9464, unless only
    /// --textfile is given); 0.0.0.0:PORT serves the network.
    #[arg(long, value_name = "ADDRESS:PORT")]
    pub listen: Option<String>,
    /// Shadow policy whose counters to export, repeatable, as `shadow
    /// --model` (default: kernel-time, fault-count, two-touch; `none`: no
    /// model metrics). The spec is the `model` label. At most 62.
    #[arg(long = "model", value_parser = ranges::model_spec)]
    pub models: Vec<String>,
    /// Export per-process counters for the TOPN processes with the most
    /// hint faults (at most 100, as each adds three series; 0: none). A
    /// process without a hint fault for 10 minutes is taken to have
    /// exited: its series end.
    #[arg(long, value_name = "TOPN", default_value_t = 0,
          value_parser = ranges::int(0, ranges::MAX_PER_PROCESS, "processes"))]
    pub per_process: usize,
    /// Export per-cgroup counters (by cgroup v2 path) for the TOPN cgroups
    /// with the most hint faults, the rest summed as cgroup="other" (at
    /// most 100, as each adds four series; 0: none).
    #[arg(long, value_name = "TOPN", default_value_t = 0,
          value_parser = ranges::int(0, ranges::MAX_PER_PROCESS, "cgroups"))]
    pub per_cgroup: usize,
    /// Serve a recorded trace, paced as recorded, instead of attaching.
    #[arg(long, value_name = "TRACE")]
    pub replay: Option<PathBuf>,
    /// Replay speed: 1 as recorded, 2 twice as fast, 0 as fast as possible
    /// (0.001 to 1000000, or 0). A gap of more than 2 s between records (a
    /// suspended host, a damaged timestamp) is shortened to 2 s.
    #[arg(long, default_value_t = 1.0, requires = "replay", value_parser = ranges::speed)]
    pub speed: f64,
    /// Also write the metrics to this file for node_exporter's textfile
    /// collector (atomically replaced; name it *.prom).
    #[arg(long, value_name = "PATH")]
    pub textfile: Option<PathBuf>,
    /// Seconds between textfile writes (0.01 or more).
    #[arg(long, default_value_t = 15.0, requires = "textfile",
          value_parser = ranges::interval_seconds)]
    pub interval: f64,
    #[command(flatten)]
    pub probe: ProbeArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum HistBy {
    /// One histogram per kernel decision reason (in-kernel, exact).
    Outcome,
    /// One histogram per process (from fault events).
    Process,
    /// One histogram per source -> destination node pair (from fault events).
    Node,
    /// One histogram per cgroup v2 of the faulting task, by path (from
    /// fault events).
    Cgroup,
}

#[derive(Debug, Args)]
pub(crate) struct HistArgs {
    /// Read a recording instead of attaching the probes.
    #[arg(long, value_name = "TRACE")]
    pub from: Option<PathBuf>,
    /// Print the histograms of every interval of this many seconds (0.01 or
    /// more; trace time with --from) instead of once for the whole run.
    #[arg(long, value_parser = ranges::interval_seconds)]
    pub interval: Option<f64>,
    /// Split the histograms (default: all hint faults together).
    #[arg(long, value_enum)]
    pub by: Option<HistBy>,
    /// Groups shown with --by process|node|cgroup, the most faults first (1 to
    /// 10000).
    #[arg(long, default_value_t = 10,
          value_parser = ranges::int(1, ranges::MAX_ROWS, "groups"))]
    pub top: usize,
    /// One JSON object per interval (bpftrace-like).
    #[arg(long, conflicts_with = "csv")]
    pub json: bool,
    /// One CSV row per non-empty bucket.
    #[arg(long)]
    pub csv: bool,
    #[command(flatten)]
    pub probe: ProbeArgs,
}

impl HistArgs {
    /// `--by` as the histogram sink takes it.
    pub(crate) fn by(&self) -> Option<numa_render::hist::By> {
        self.by.map(|b| match b {
            HistBy::Outcome => numa_render::hist::By::Outcome,
            HistBy::Process => numa_render::hist::By::Process,
            HistBy::Node => numa_render::hist::By::Node,
            HistBy::Cgroup => numa_render::hist::By::Cgroup,
        })
    }
}

#[derive(Debug, Subcommand)]
pub(crate) enum Workload {
    /// The pghot RFC's microbenchmark: memory on DRAM and on the slow node, random
    /// 4K accesses to one chunk at a time, idle gaps between chunks.
    HotChunks(HotChunksArgs),
    /// Move a slow-node buffer to DRAM with move_pages(2), either in one
    /// call (the baseline) or through `promote`'s mover: its throughput.
    MovePages(MovePagesArgs),
    /// The test bed's clock for its QEMU plugin: reads CLOCK_MONOTONIC,
    /// stores to a marker page the plugin watches, reads the clock again,
    /// every --every-ms until SIGTERM or SIGINT (then one last tick), and
    /// logs "tick before_ns after_ns" per tick.
    Ticker(TickerArgs),
    /// A workload whose hot pages are known by construction, to judge
    /// policies against the test bed's truth: chunks on the slow node
    /// revisited steadily, chunks hot in one burst and never again, a
    /// page touched rarely, and a mapping never touched after placement.
    /// Logs each visit and the physical frame of every page as placed
    /// (reading frames from /proc/self/pagemap needs CAP_SYS_ADMIN).
    Known(KnownArgs),
}

/// `numatrace workload known`.
#[derive(Debug, Args, Clone)]
pub(crate) struct KnownArgs {
    /// Chunk size in MiB, 1 to 1024.
    #[arg(long, default_value_t = 4, value_parser = ranges::int(1u64, 1024, "MiB"))]
    pub chunk_mb: u64,
    /// Chunks visited again and again, each every --revisit-ms (0 to 4096).
    #[arg(long, default_value_t = 4, value_parser = ranges::int(0u64, 4096, "chunks"))]
    pub steady_chunks: u64,
    /// Milliseconds between two visits of a steady chunk (10 to 3600000).
    #[arg(long, default_value_t = 2000,
          value_parser = ranges::int(10u64, 3_600_000, "milliseconds"))]
    pub revisit_ms: u64,
    /// Chunks each visited back to back for --burst-ms once, then never
    /// again; one burst starts every --burst-every-ms (0 to 4096).
    #[arg(long, default_value_t = 4, value_parser = ranges::int(0u64, 4096, "chunks"))]
    pub burst_chunks: u64,
    /// Length of a burst in milliseconds (10 to 3600000).
    #[arg(long, default_value_t = 3000,
          value_parser = ranges::int(10u64, 3_600_000, "milliseconds"))]
    pub burst_ms: u64,
    /// Milliseconds from one burst's start to the next's (10 to 3600000,
    /// at least --burst-ms: one burst at a time).
    #[arg(long, default_value_t = 6000,
          value_parser = ranges::int(10u64, 3_600_000, "milliseconds"))]
    pub burst_every_ms: u64,
    /// Seconds between two touches of the rare page, a page of its own
    /// after the chunks (0 to 86400; 0: no rare page).
    #[arg(long, default_value_t = 60, value_parser = ranges::int(0u64, 86_400, "seconds"))]
    pub rare_s: u64,
    /// MiB of a mapping placed on the slow node beside the chunks' and
    /// never touched again (0 to 1048576).
    #[arg(long, default_value_t = 16,
          value_parser = ranges::int(0, ranges::MAX_WORKLOAD_MB, "MiB"))]
    pub cold_mb: u64,
    /// MiB filled on the DRAM node and left idle (0 to 1048576), so that
    /// the kernel promotes on its hot threshold, not on free space.
    #[arg(long, default_value_t = 0,
          value_parser = ranges::int(0, ranges::MAX_WORKLOAD_MB, "MiB"))]
    pub dram_mb: u64,
    /// Random page accesses (a load and a store each) per chunk visit, 1
    /// to 1e9.
    #[arg(long, default_value_t = 2000,
          value_parser = ranges::int(1u64, 1_000_000_000, "accesses"))]
    pub accesses: u64,
    /// Length of the access phase in seconds.
    #[arg(long, default_value_t = 30.0, value_parser = ranges::run_seconds)]
    pub duration: f64,
    /// Slow node (default: the first CPU-less node).
    #[arg(long, value_parser = ranges::node)]
    pub slow_node: Option<u32>,
    /// DRAM node (default: the node of CPU 0).
    #[arg(long, value_parser = ranges::node)]
    pub dram_node: Option<u32>,
    /// Random seed.
    #[arg(long, default_value_t = 1, value_parser = ranges::int(0, u64::MAX, "a seed"))]
    pub seed: u64,
    /// Where the log goes (JSON, written when the run ends): the
    /// mappings, every page's frame as placed, and every visit with its
    /// start and end on CLOCK_MONOTONIC (the trace's clock).
    #[arg(long)]
    pub log: PathBuf,
}

/// `numatrace workload ticker`.
#[derive(Debug, Args, Clone)]
pub(crate) struct TickerArgs {
    /// Milliseconds between ticks (10 to 3600000).
    #[arg(long, default_value_t = 1000,
          value_parser = ranges::int(10u64, 3_600_000, "milliseconds"))]
    pub every_ms: u64,
    /// Where the log goes (written when the ticker stops).
    #[arg(long)]
    pub log: PathBuf,
}

#[derive(Debug, Args, Clone)]
pub(crate) struct HotChunksArgs {
    /// MiB allocated on the slow (CPU-less) node and accessed in chunks,
    /// up to 1048576 (0: only fill DRAM with --dram-mb and hold it for
    /// --duration).
    #[arg(long, default_value_t = 256,
          value_parser = ranges::int(0, ranges::MAX_WORKLOAD_MB, "MiB"))]
    pub slow_mb: u64,
    /// MiB allocated on the DRAM node and left idle, up to 1048576 (fills
    /// DRAM so promotion must pass the kernel's hot threshold instead of
    /// the free-space shortcut).
    #[arg(long, default_value_t = 0,
          value_parser = ranges::int(0, ranges::MAX_WORKLOAD_MB, "MiB"))]
    pub dram_mb: u64,
    /// Chunk size in MiB.
    #[arg(long, default_value_t = 16,
          value_parser = ranges::int(1, ranges::MAX_WORKLOAD_MB, "MiB"))]
    pub chunk_mb: u64,
    /// Random page accesses per chunk visit (1 to 1e9).
    #[arg(long, default_value_t = 20000,
          value_parser = ranges::int(1u64, 1_000_000_000, "accesses"))]
    pub accesses: u64,
    /// Idle time between chunk visits, in milliseconds (up to an hour).
    #[arg(long, default_value_t = 0,
          value_parser = ranges::int(0u64, 3_600_000, "milliseconds"))]
    pub idle_ms: u64,
    /// Computing after each chunk visit, before --idle-ms: a fixed amount
    /// of work, measured at start to take this many milliseconds (up to an
    /// hour). The NUMA scanner runs on the task's CPU time, so a task that
    /// computes between accesses is scanned on schedule, one that sleeps
    /// hardly at all.
    #[arg(long, default_value_t = 0,
          value_parser = ranges::int(0u64, 3_600_000, "milliseconds"))]
    pub compute_ms: u64,
    /// Total run time in seconds.
    #[arg(long, default_value_t = 10.0, value_parser = ranges::run_seconds)]
    pub duration: f64,
    /// Keep running past --duration until the system has taken this many
    /// hint faults since the access phase began (vmstat numa_hint_faults),
    /// at most --max-duration: the NUMA scanner runs on the task's CPU
    /// time, so on a loaded host (or under emulation) a fixed wall-clock
    /// window may end before the scanner reaches the region.
    #[arg(long, default_value_t = 0,
          value_parser = ranges::int(0, u64::MAX, "hint faults"))]
    pub min_faults: u64,
    /// Upper bound in seconds when --min-faults extends the run.
    #[arg(long, default_value_t = 300.0, value_parser = ranges::run_seconds)]
    pub max_duration: f64,
    /// Keep running this many seconds after --duration and --min-faults
    /// are both met, at most to --max-duration (0 to 365 days): time for
    /// what follows the promotions the faults started.
    #[arg(long, default_value_t = 0.0, value_parser = ranges::linger_seconds)]
    pub linger: f64,
    /// Stop after this many chunk visits instead of at --duration (at most
    /// --max-duration; 0 to 1e9, 0: run by time): the same work in every
    /// run, so that runs compare by their elapsed and CPU time.
    #[arg(long, default_value_t = 0,
          value_parser = ranges::int(0u64, 1_000_000_000, "visits"))]
    pub visits: u64,
    /// Visit the chunks in address order, sleeping --idle-ms before each
    /// visit instead of after it (random chunks otherwise): each chunk is
    /// reached after an idle gap long enough for the kernel to forget
    /// which threads touched the mapping.
    #[arg(long)]
    pub in_turn: bool,
    /// Split the chunks into two halves, A (the first) and B, and visit
    /// only A for this many milliseconds, then only B, then A again, and
    /// so on (0 to 3600000; 0: every chunk all the time): with DRAM full,
    /// the hot set B pushes A down a tier and A's return brings it up
    /// again. Needs at least two chunks.
    #[arg(long, default_value_t = 0,
          value_parser = ranges::int(0u64, 3_600_000, "milliseconds"))]
    pub phase_ms: u64,
    /// With --phase-ms, a phase lasts past it until the half not being
    /// visited has lost this percentage of the pages it held on the DRAM
    /// node when the phase began (1 to 100; one page in 16 queried, twice a
    /// second): on a slow machine a fixed phase may end before the hot set
    /// has pushed the other down. 0: phases of --phase-ms.
    #[arg(long, default_value_t = 0,
          value_parser = ranges::int(0u64, 100, "percent"))]
    pub phase_push: u64,
    /// With --phase-ms, stop at the end of this many phases (1 to 1000)
    /// instead of at --duration, at most at --max-duration.
    #[arg(long, default_value_t = 0,
          value_parser = ranges::int(0u64, 1000, "phases"))]
    pub phases: u64,
    /// MiB of a second mapping placed on the slow node like the first and
    /// never touched again, up to 1048576: a VMA the scanner finds cold
    /// (an inaccessible page between the two keeps them apart as VMAs).
    #[arg(long, default_value_t = 0,
          value_parser = ranges::int(0, ranges::MAX_WORKLOAD_MB, "MiB"))]
    pub cold_mb: u64,
    /// Populate the slow mapping in two steps: its first chunk, then this
    /// many milliseconds of computing elsewhere (0 to 600000) while the
    /// scanner passes over it, then the rest, placed through the thread's
    /// policy so the VMA keeps its scan history; the access phase then
    /// touches only the chunks populated late. The kernel scans a VMA
    /// unconditionally only in its first two scan sequences, so pages
    /// that arrive later wait for a hint fault of the scanning thread in
    /// the VMA (none comes: nothing there is protected) or a forced scan.
    /// The summary then leaves out the page-placement counts: querying
    /// every page's node is CPU time, on which the scanner runs.
    #[arg(long, default_value_t = 0,
          value_parser = ranges::int(0u64, 600_000, "milliseconds"))]
    pub late_populate_ms: u64,
    /// Extra threads that only sleep, 0 to 1024: the kernel force-scans a
    /// VMA its threads have not faulted on lately only once every
    /// (threads) scan sequences, so they keep such a VMA unscanned longer.
    #[arg(long, default_value_t = 0,
          value_parser = ranges::int(0u64, 1024, "threads"))]
    pub idle_threads: u64,
    /// Processes running the access phase, 1 to 64: once the mappings are
    /// set up, the workload forks N-1 children that run the same access
    /// phase, each with its own random seed. Each child has its own
    /// --slow-mb (and --cold-mb) mapping at the parent's addresses, placed
    /// on the slow node anew right after the fork (pages it shared
    /// copy-on-write with the parent would be copied to its local node on
    /// its first write), so N processes hold N times that memory;
    /// --shared-mb is the one mapping they all share. Only the parent
    /// writes the summary, once every child has ended, and it fails if any
    /// child failed.
    #[arg(long, default_value_t = 1,
          value_parser = ranges::int(1u64, 64, "processes"))]
    pub procs: u64,
    /// Threads running the access phase of each process, 1 to 64: each
    /// chunk visit's --accesses are split between them (each does
    /// --accesses / N, so a visit is the same work whatever N), each thread
    /// with its own random seed. The choice of chunk, --compute-ms and
    /// --idle-ms stay with the first thread, which waits for the others to
    /// finish the visit.
    #[arg(long, default_value_t = 1,
          value_parser = ranges::int(1u64, 64, "threads"))]
    pub threads: u64,
    /// MiB of a shared anonymous mapping (MAP_SHARED) placed on the slow
    /// node before --procs forks, up to 1048576, so every process maps the
    /// same pages. Accesses then alternate between the --slow-mb mapping
    /// and this one: in the chunk of the same number when it has that many
    /// whole --chunk-mb chunks, anywhere in it otherwise. Once populated it
    /// gets the policy MPOL_BIND to the slow and DRAM nodes with
    /// MPOL_F_NUMA_BALANCING: the kernel's NUMA scanner skips shared
    /// anonymous memory under the default policy, which would then take no
    /// hint fault at all.
    #[arg(long, default_value_t = 0,
          value_parser = ranges::int(0, ranges::MAX_WORKLOAD_MB, "MiB"))]
    pub shared_mb: u64,
    /// Slow node (default: the first CPU-less node).
    #[arg(long, value_parser = ranges::node)]
    pub slow_node: Option<u32>,
    /// DRAM node (default: the node of CPU 0).
    #[arg(long, value_parser = ranges::node)]
    pub dram_node: Option<u32>,
    /// Ask for transparent huge pages with MADV_HUGEPAGE (default: 4K pages
    /// via MADV_NOHUGEPAGE), which the kernel grants as
    /// /sys/kernel/mm/transparent_hugepage/enabled allows (always or
    /// madvise), and for the --shared-mb mapping as its shmem_enabled does
    /// (advise, always or within_size; never under never or deny).
    #[arg(long)]
    pub thp: bool,
    /// Random seed.
    #[arg(long, default_value_t = 1, value_parser = ranges::int(0, u64::MAX, "a seed"))]
    pub seed: u64,
    /// Write the JSON summary here instead of stdout.
    #[arg(long)]
    pub summary: Option<PathBuf>,
}

/// `numatrace promote`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("scope").required(true).args(["pids", "cgroup", "all"])))]
pub(crate) struct PromoteArgs {
    /// Policy that decides what is hot, with options as in `shadow --model`
    /// (e.g. `fault-count:threshold=2e5`).
    #[arg(long, default_value = "fault-count")]
    pub model: String,
    #[command(flatten)]
    pub options: ModelFlags,
    /// Promote pages of this process (repeatable).
    #[arg(long = "pid", value_name = "PID", value_parser = ranges::pid)]
    pub pids: Vec<u32>,
    /// Promote pages of every process in this cgroup v2 directory or below
    /// it, including processes started later.
    #[arg(long)]
    pub cgroup: Option<PathBuf>,
    /// Promote pages of any process.
    #[arg(long)]
    pub all: bool,
    /// Bytes moved per second at most: 4KiB/s to 1TiB/s (like 256MiB/s,
    /// 1GB/s), or 0 for unlimited.
    #[arg(long, default_value = "256MiB/s", value_parser = numa_promote::bucket::parse_rate_limit)]
    pub rate_limit: u64,
    /// Keep at least this much free on the target node: a share of its
    /// memory (0% to 100%, like 5%) or an amount (up to 1PiB, like 200MiB).
    /// Never crossed, even by one batch.
    #[arg(long, default_value = "5%", allow_hyphen_values = true,
          value_parser = numa_promote::floor::MinFree::from_flag)]
    pub min_free: numa_promote::floor::MinFree,
    /// Target time per move_pages call in ms, 0.1 to 1000 (batches adapt
    /// to it).
    #[arg(long, default_value_t = 20.0, value_parser = ranges::real(0.1, 1000.0, "milliseconds"))]
    pub batch_ms: f64,
    /// Retries of a page whose move failed (EBUSY, ENOMEM, ...), 0 to 100.
    #[arg(long, default_value_t = 3, value_parser = ranges::int(0u32, 100, "retries"))]
    pub max_retries: u32,
    /// Requests waiting at most, 1 to 1048576: on the channel from the
    /// event pipeline to the mover, and pages in the mover's queue; beyond
    /// either, requests are dropped and counted.
    #[arg(long, default_value_t = 65536, value_parser = ranges::int(1usize, 1 << 20, "requests"))]
    pub queue: usize,
    /// Move nothing: print what would be moved and the rate that would
    /// need. Needs no CAP_SYS_NICE, but still loads the BPF probes to see
    /// the hint faults, which needs root (CAP_BPF and CAP_PERFMON).
    #[arg(long)]
    pub dry_run: bool,
    /// Stop after this many seconds, 0.001 to 31536000 (default: on
    /// Ctrl-C / SIGTERM, or once every --pid process has exited).
    #[arg(long, value_parser = ranges::run_seconds)]
    pub duration: Option<f64>,
    /// Machine-readable final report.
    #[arg(long)]
    pub json: bool,
    /// Write the final report here instead of stdout.
    #[arg(short = 'o', long = "output")]
    pub output: Option<PathBuf>,
    /// Kernel memory all of numatrace's maps may take, 1MiB to 1TiB
    /// (K, M, G, T binary suffixes; a bare number is MiB). When the slow
    /// nodes' per-folio state does not fit, one folio in 2^k is followed
    /// (by PFN hash) and estimates are scaled back: reports state the rate.
    #[arg(long, default_value = "256M", value_parser = ranges::map_budget)]
    pub map_budget: u64,
    /// Ring buffer size in MiB, 1 to 2048.
    #[arg(long, default_value_t = 16, value_parser = ranges::ring_mb)]
    pub ring_mb: u32,
}

/// `numatrace workload move-pages`: the promoter's throughput benchmark.
#[derive(Debug, Args, Clone)]
pub(crate) struct MovePagesArgs {
    /// MiB placed on the slow node, then moved to the DRAM node.
    #[arg(long, default_value_t = 256,
          value_parser = ranges::int(1, ranges::MAX_WORKLOAD_MB, "MiB"))]
    pub mb: u64,
    /// `baseline`: one move_pages call for every page; `mover`: promote's
    /// mover (batches, rate limit, free floor, per-page accounting).
    #[arg(long, value_enum)]
    pub via: MoveVia,
    /// Mover: rate limit (as `promote --rate-limit`; default unlimited).
    #[arg(long, default_value = "0", value_parser = ranges::rate)]
    pub rate_limit: String,
    /// Mover: target ms per call (0.1 to 60000).
    #[arg(long, default_value_t = 20.0,
          value_parser = ranges::real(0.1, 60_000.0, "milliseconds"))]
    pub batch_ms: f64,
    /// Mover: free floor on the DRAM node.
    #[arg(long, default_value = "1%", value_parser = ranges::min_free)]
    pub min_free: String,
    /// Slow node (default: the first CPU-less node).
    #[arg(long, value_parser = ranges::node)]
    pub slow_node: Option<u32>,
    /// DRAM node (default: the node of CPU 0).
    #[arg(long, value_parser = ranges::node)]
    pub dram_node: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum MoveVia {
    Baseline,
    Mover,
}
