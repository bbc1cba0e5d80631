//! Parse-time checks of the numeric flags: a value must parse, be finite
//! and lie in a stated range, and the error states that range. clap adds
//! the flag's name to the message and exits with status 2, so a bad value
//! never reaches a `Duration`, a timer or the BPF loader. Also the command
//! line these checks are part of.
use std::{fmt::Display, str::FromStr};

use clap::{CommandFactory, FromArgMatches};
use numa_core::model::policy::{self, KernelDefaults, ModelDefaults};
use numa_probe::session::limits;

use super::Cli;

/// The longest run any flag may ask for: 365 days. Far beyond a useful
/// measurement, far below where `Duration` and the runtime's timers
/// overflow.
pub(crate) const MAX_RUN_S: f64 = 365.0 * 86_400.0;
/// The shortest run or interval: 1 ms.
pub(crate) const MIN_RUN_S: f64 = 0.001;
/// Replay speed bounds besides 0 (as fast as possible).
pub(crate) const SPEED: (f64, f64) = (0.001, 1e6);
/// The highest NUMA node id the kernel allows (MAX_NUMNODES is 1024).
pub(crate) const MAX_NODE: u32 = 1023;
/// The kernel's PID_MAX_LIMIT.
pub(crate) const MAX_PID: u32 = 4 << 20;
/// Rows a report or histogram lists at most.
pub(crate) const MAX_ROWS: usize = 10_000;
/// `export --per-process` cap: each process adds three series.
pub(crate) const MAX_PER_PROCESS: usize = 100;
/// Memory a workload may allocate per node: 1 TiB in MiB.
pub(crate) const MAX_WORKLOAD_MB: u64 = 1 << 20;

/// A value parser for a whole number in `lo..=hi` counting `unit`.
pub(crate) fn int<T>(
    lo: T,
    hi: T,
    unit: &'static str,
) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static
where
    T: FromStr + PartialOrd + Display + Copy + Send + Sync + 'static,
{
    move |s: &str| {
        let v: T = s
            .trim()
            .parse()
            .map_err(|_| format!("not a whole number: give {unit} from {lo} to {hi}"))?;
        if v < lo || v > hi {
            return Err(format!("out of range: give {unit} from {lo} to {hi}"));
        }
        Ok(v)
    }
}

/// A value parser for a finite number in `lo..=hi` of `unit`.
pub(crate) fn real(
    lo: f64,
    hi: f64,
    unit: &'static str,
) -> impl Fn(&str) -> Result<f64, String> + Clone + Send + Sync + 'static {
    move |s: &str| {
        let v: f64 = s
            .trim()
            .parse()
            .map_err(|_| format!("not a number: give {unit} from {lo} to {hi}"))?;
        if !v.is_finite() {
            return Err(format!(
                "not a finite number: give {unit} from {lo} to {hi}"
            ));
        }
        if !(lo..=hi).contains(&v) {
            return Err(format!("out of range: give {unit} from {lo} to {hi}"));
        }
        Ok(v)
    }
}

/// A fault-count threshold (`--threshold`): the range and the message of
/// the model spec's `threshold=`, which the models check with the same
/// function.
pub(crate) fn threshold(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| policy::threshold_message(format_args!("{s:?}")))?;
    policy::check_threshold(v)
}

/// Models one command runs at once (`--model` repeated, or `--sweep`'s
/// values).
pub(crate) const MAX_MODELS: usize = numa_core::model::shadow::MAX_POLICIES;

/// A model spec (`--model`): a known model with known options in range,
/// or `none`. Whether it agrees with the flat flags (`--counter global`
/// needs `:exact`) is checked when the models are built.
pub(crate) fn model_spec(s: &str) -> Result<String, String> {
    if s != "none" {
        policy::build(s, &ModelDefaults::default(), &KernelDefaults::default())
            .map_err(|e| format!("{e:#}"))?;
    }
    Ok(s.to_owned())
}

/// `--hot-accesses N,...`: the scorecard's hot rules, each a number of
/// accesses in one truth window.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HotRules(pub Vec<u32>);

/// `--truth`: a truth file, or `from-trace` (a file of that name: give
/// it as `./from-trace`).
pub(crate) fn truth_source(s: &str) -> Result<super::TruthSource, String> {
    match s {
        "" => Err("give a truth file or from-trace".into()),
        "from-trace" => Ok(super::TruthSource::FromTrace),
        path => Ok(super::TruthSource::File(std::path::PathBuf::from(path))),
    }
}

pub(crate) fn hot_rules(s: &str) -> Result<HotRules, String> {
    let one = int(1u32, 1_000_000_000, "accesses per window");
    let rules = s
        .split(',')
        .map(&one)
        .collect::<Result<Vec<u32>, String>>()?;
    let max = numa_core::model::scorecard::MAX_RULES;
    if rules.len() > max {
        return Err(format!(
            "{} rules: give 1 to {max} values from 1 to 1000000000, comma-separated (1,8)",
            rules.len()
        ));
    }
    Ok(HotRules(rules))
}

/// `--sweep param=v1,v2,...`: finite numbers, 1 to [`MAX_MODELS`] of them
/// (one model each).
pub(crate) fn sweep(s: &str) -> Result<String, String> {
    let form = "give param=v1,v2,... e.g. threshold=1e4,1e5,1e6";
    let Some((_, values)) = s.split_once('=') else {
        return Err(format!("no '=': {form}"));
    };
    let values: Vec<&str> = values.split(',').filter(|v| !v.is_empty()).collect();
    if values.is_empty() || values.len() > MAX_MODELS {
        return Err(format!(
            "{} values: give 1 to {MAX_MODELS} (one model each, run at once)",
            values.len()
        ));
    }
    if let Some(v) = values
        .iter()
        .find(|v| !v.trim().parse::<f64>().is_ok_and(f64::is_finite))
    {
        return Err(format!(
            "value {v:?} is not a finite number (1e4 and 10000 both work)"
        ));
    }
    Ok(s.to_owned())
}

/// The flags of `ProbeArgs` that only act on the probes of a live run,
/// by their ids, with the flag as the user types it.
const LIVE_ONLY: [(&str, &str); 10] = [
    ("pid", "--pid"),
    ("cgroup", "--cgroup"),
    ("sample", "--sample"),
    ("map_budget", "--map-budget"),
    ("ring_mb", "--ring-mb"),
    ("bpf_stats", "--bpf-stats"),
    ("empty_programs", "--empty-programs"),
    ("empty_program", "--empty-program"),
    ("command", "COMMAND"),
    ("duration", "--duration"),
];

/// Why subcommand `name` refuses the live-only flags given with a trace
/// file: a trace holds what the probes recorded, so a filter or a sample
/// rate given now would act on nothing, and applying one after the fact
/// would filter the events but not the counters and histograms the
/// snapshots carry. A paced replay (`top --replay`, `export --replay`)
/// stops after `--duration`, so there it stays.
fn live_only_with_trace(name: &str, sub: &clap::ArgMatches) -> Option<String> {
    let (trace_flag, paced) = match name {
        "stats" => ("FILE", false),
        "hist" => ("--from", false),
        "top" | "export" => ("--replay", true),
        _ => return None,
    };
    let given = |id: &str| {
        sub.try_contains_id(id).unwrap_or(false)
            && sub.value_source(id) == Some(clap::parser::ValueSource::CommandLine)
    };
    let with_trace = match name {
        "stats" => given("file"),
        "hist" => given("from"),
        _ => given("replay"),
    };
    if !with_trace {
        return None;
    }
    let flags: Vec<&str> = LIVE_ONLY
        .iter()
        .filter(|(id, _)| !(paced && *id == "duration") && given(id))
        .map(|(_, flag)| *flag)
        .collect();
    (!flags.is_empty()).then(|| {
        format!(
            "{} act{} on the probes of a live run, and {trace_flag} reads a trace as it \
             was recorded: drop {}, or record the trace with {}",
            flags.join(", "),
            if flags.len() == 1 { "s" } else { "" },
            if flags.len() == 1 { "it" } else { "them" },
            if flags.len() == 1 { "it" } else { "them" },
        )
    })
}

/// The models `cli`'s command runs, by its `--model` flags, when it takes
/// them.
fn models_given(cli: &Cli) -> Option<(&'static str, usize)> {
    use super::Command as C;
    Some(match &cli.command {
        C::Shadow(a) => ("shadow", a.models.sel.models.len()),
        C::Replay(a) => ("replay", a.models.sel.models.len()),
        C::Report(a) => ("report", a.models.sel.models.len()),
        C::Top(a) => ("top", a.sel.models.len()),
        C::Export(a) => ("export", a.models.len()),
        _ => return None,
    })
}

/// How long a run lasts, in seconds.
pub(crate) fn run_seconds(s: &str) -> Result<f64, String> {
    real(MIN_RUN_S, MAX_RUN_S, "seconds (up to 365 days)")(s)
}

/// Seconds a workload keeps running past its other limits (0: none).
pub(crate) fn linger_seconds(s: &str) -> Result<f64, String> {
    real(0.0, MAX_RUN_S, "seconds (up to 365 days)")(s)
}

/// How often something repeats while running, in seconds.
pub(crate) fn interval_seconds(s: &str) -> Result<f64, String> {
    real(0.01, MAX_RUN_S, "seconds")(s)
}

/// A replay speed: 0 (as fast as possible) or a factor in [`SPEED`].
pub(crate) fn speed(s: &str) -> Result<f64, String> {
    let range = format!(
        "give 0 (as fast as possible) or a factor from {} to {}",
        SPEED.0, SPEED.1
    );
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("not a number: {range}"))?;
    if v == 0.0 || (v.is_finite() && (SPEED.0..=SPEED.1).contains(&v)) {
        Ok(v)
    } else {
        Err(format!("out of range: {range}"))
    }
}

/// A NUMA node id.
pub(crate) fn node(s: &str) -> Result<u32, String> {
    int(0, MAX_NODE, "a NUMA node id")(s)
}

/// `--ring-mb`: the kernel's ring buffers hold at most 2 GiB.
pub(crate) fn ring_mb(s: &str) -> Result<u32, String> {
    let (lo, hi) = limits::RING_MB;
    int(lo, hi, "MiB")(s)
}

/// `--sample`: one fault record in N.
pub(crate) fn sample(s: &str) -> Result<u64, String> {
    let (lo, hi) = limits::SAMPLE_EVERY;
    int(lo, hi, "N (one record in N)")(s)
}

/// `--map-budget`: kernel memory for all maps, as a whole number with a
/// binary unit (`512M`, `2GiB`, `1 t`); a bare number counts MiB, the
/// unit of `--ring-mb`.
pub(crate) fn map_budget(s: &str) -> Result<u64, String> {
    const RANGE: &str = "from 1MiB to 1TiB";
    let s = s.trim();
    let digits = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (number, unit) = s.split_at(digits);
    let unit = unit.trim_start().to_ascii_lowercase();
    // Whole numbers and binary units only; the arithmetic is the one every
    // byte-size flag shares.
    let binary = matches!(
        unit.as_str(),
        "" | "k" | "kib" | "m" | "mib" | "g" | "gib" | "t" | "tib"
    );
    if number.is_empty() || !binary {
        return Err(format!(
            "not a size: give a whole number with K, M, G or T (or KiB, MiB, GiB, TiB; \
             a bare number is MiB) {RANGE}"
        ));
    }
    let unit = if unit.is_empty() { "m" } else { unit.as_str() };
    match numa_promote::bucket::parse_bytes_f64(&format!("{number}{unit}")) {
        Some(b) if (limits::MAP_BUDGET.0 as f64..=limits::MAP_BUDGET.1 as f64).contains(&b) => {
            Ok(b as u64)
        }
        _ => Err(format!("out of range: give a size {RANGE}")),
    }
}

/// A process id.
pub(crate) fn pid(s: &str) -> Result<u32, String> {
    int(1, MAX_PID, "a process id")(s)
}

/// A user-space virtual address, hex with `0x` or decimal, below 2^57
/// (the most any x86-64 or arm64 process has).
pub(crate) fn user_addr(s: &str) -> Result<u64, String> {
    const END: u64 = 1 << 57;
    let s = s.trim();
    let v = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(&hex.replace('_', ""), 16),
        None => s.parse(),
    }
    .map_err(|_| format!("not an address: give a user-space address from 0 to {END:#x}, hex as 0x7f12a4c00000 or decimal"))?;
    if v >= END {
        return Err(format!(
            "out of range: give a user-space address from 0 to {END:#x}"
        ));
    }
    Ok(v)
}

/// A byte rate as `--rate-limit` takes it (`256MiB/s`, `1GB/s`, 0).
pub(crate) fn rate(s: &str) -> Result<String, String> {
    numa_promote::bucket::parse_rate(s)
        .map(|_| s.to_owned())
        .ok_or_else(|| "give bytes per second like 256MiB/s or 1GB/s, or 0 for unlimited".into())
}

/// A free-memory floor as `--min-free` takes it (`5%`, `200MiB`).
pub(crate) fn min_free(s: &str) -> Result<String, String> {
    numa_promote::floor::MinFree::parse(s)
        .map(|_| s.to_owned())
        .ok_or_else(|| "give a share of the node from 0% to 100% or an amount like 200MiB".into())
}

/// A host name as a column value: 1 to 255 printable characters, no
/// whitespace.
pub(crate) fn host_name(s: &str) -> Result<String, String> {
    if s.is_empty() || s.chars().count() > 255 {
        return Err("give a host name of 1 to 255 characters".into());
    }
    if s.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err("a host name has no spaces or control characters".into());
    }
    Ok(s.to_owned())
}

/// Whether `a` takes a number (its parser yields a numeric type); a
/// counted flag (`-vv`) is a number but takes no value.
pub(crate) fn is_numeric(a: &clap::Arg) -> bool {
    use std::any::TypeId;
    if !a.get_action().takes_values() {
        return false;
    }
    let t = a.get_value_parser().type_id();
    [
        TypeId::of::<u8>(),
        TypeId::of::<u16>(),
        TypeId::of::<u32>(),
        TypeId::of::<u64>(),
        TypeId::of::<usize>(),
        TypeId::of::<i32>(),
        TypeId::of::<i64>(),
        TypeId::of::<f32>(),
        TypeId::of::<f64>(),
        TypeId::of::<HotRules>(),
    ]
    .into_iter()
    .any(|id| t == id)
}

/// The command line, where a numeric option's value may start with '-':
/// `--duration -1` or `--interval -inf` then reaches the range check and
/// its message instead of clap's "unexpected argument".
pub(crate) fn command() -> clap::Command {
    fn negatives(cmd: clap::Command) -> clap::Command {
        cmd.mut_args(|a| {
            if is_numeric(&a) && !a.is_positional() {
                a.allow_hyphen_values(true)
            } else {
                a
            }
        })
        .mut_subcommands(negatives)
    }
    negatives(Cli::command())
}

/// Traces one `report` page draws side by side at most: more columns
/// than this are too narrow to read.
pub(crate) const MAX_REPORT_TRACES: usize = 16;

/// Parses `argv`; the error exits with status 2 and states the problem.
pub(crate) fn try_parse_from<I, T>(argv: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let mut cmd = command();
    let matches = cmd.try_get_matches_from_mut(argv)?;
    let cli = Cli::from_arg_matches(&matches).map_err(|e| e.format(&mut cmd))?;
    if let Some((name, sub)) = matches.subcommand() {
        if let Some(msg) = live_only_with_trace(name, sub) {
            return Err(cmd.find_subcommand_mut(name).map_or_else(
                || clap::Error::raw(clap::error::ErrorKind::ArgumentConflict, &msg),
                |s| s.error(clap::error::ErrorKind::ArgumentConflict, &msg),
            ));
        }
    }
    if let Some((name, n)) = models_given(&cli).filter(|&(_, n)| n > MAX_MODELS) {
        let msg = format!("{n} --model flags: {name} runs at most {MAX_MODELS} models at once");
        return Err(too_many(&mut cmd, name, msg));
    }
    if let crate::cli::Command::Report(r) = &cli.command {
        if r.traces.len() > MAX_REPORT_TRACES {
            let msg = format!(
                "report takes 1 to {MAX_REPORT_TRACES} traces, got {}: split them over several pages",
                r.traces.len()
            );
            return Err(too_many(&mut cmd, "report", msg));
        }
    }
    Ok(cli)
}

/// A "too many values" error of subcommand `name`.
fn too_many(cmd: &mut clap::Command, name: &str, msg: String) -> clap::Error {
    match cmd.find_subcommand_mut(name) {
        Some(sub) => sub.error(clap::error::ErrorKind::TooManyValues, msg),
        None => clap::Error::raw(clap::error::ErrorKind::TooManyValues, msg),
    }
}

/// A program that has an empty twin (`--empty-program`).
pub(crate) fn empty_program(s: &str) -> Result<&'static str, String> {
    use numa_ebpf_common::programs::EMPTY_TWINS;
    EMPTY_TWINS
        .iter()
        .find(|(real, _)| *real == s)
        .map(|&(real, _)| real)
        .ok_or_else(|| {
            let names: Vec<&str> = EMPTY_TWINS.iter().map(|(real, _)| *real).collect();
            format!(
                "no program {s:?} with an empty twin; one of: {}",
                names.join(", ")
            )
        })
}
