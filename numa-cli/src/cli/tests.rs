//! Every numeric flag refuses bad values at parse time, naming the flag and
//! its range; and no numeric flag is left without such a check.
use clap::{error::ErrorKind, CommandFactory};

use super::{
    ranges::{is_numeric, try_parse_from},
    Cli,
};

/// One flag of one subcommand: the arguments that make the rest of the
/// command line valid, the flag, values it must refuse and the range its
/// error must state.
struct Case {
    before: &'static [&'static str],
    flag: &'static str,
    bad: &'static [&'static str],
    range: &'static str,
}

const fn case(
    before: &'static [&'static str],
    flag: &'static str,
    bad: &'static [&'static str],
    range: &'static str,
) -> Case {
    Case {
        before,
        flag,
        bad,
        range,
    }
}

const RUN_S: &[&str] = &["-1", "nan", "inf", "1e19", "0", "1e-10", "ten"];
const RUN_RANGE: &str = "from 0.001 to 31536000";
const INTERVAL_S: &[&str] = &["1e-10", "0", "-1", "nan", "inf", "-inf", "1e19"];
const INTERVAL_RANGE: &str = "from 0.01 to 31536000";
const SPEED: &[&str] = &["-1", "nan", "inf", "1e-300", "1e7", "fast"];
const SPEED_RANGE: &str = "or a factor from 0.001 to 1000000";
const RING_MB: &[&str] = &["0", "2049", "-1", "4294967296", "1.5"];
const RING_RANGE: &str = "from 1 to 2048";
const BUDGET: &[&str] = &["0", "1023K", "1025G", "2T", "-5", "1.5M", "lots"];
const BUDGET_RANGE: &str = "from 1MiB to 1TiB";
const NODE: &[&str] = &["1024", "-1", "x"];
const NODE_RANGE: &str = "from 0 to 1023";
const WORKLOAD_MB: &[&str] = &["1048577", "-1"];

/// The flags every attaching command shares (`ProbeArgs`).
macro_rules! probe_cases {
    ($($before:expr),+) => {[$(
        case($before, "--duration", RUN_S, RUN_RANGE),
        case($before, "--ring-mb", RING_MB, RING_RANGE),
        case($before, "--map-budget", BUDGET, BUDGET_RANGE),
        case($before, "--sample", &["0", "1000001", "-1"], "from 1 to 1000000"),
        case($before, "--pid", &["0", "-1", "4194305"], "from 1 to 4194304"),
    )+]};
}

/// The flat model options (`ModelFlags`).
macro_rules! model_cases {
    ($($before:expr),+) => {[$(
        case($before, "--threshold", &["0", "nan", "inf", "-1", "1e19", "5e9"], "from 1 to 4294967295"),
        case($before, "--window-ms", &["0", "-1", "86400001"], "from 1 to 86400000"),
    )+]};
}

fn cases() -> Vec<Case> {
    let mut v: Vec<Case> = probe_cases!(
        &["stats", "--live"],
        &["record", "-o", "t"],
        &["shadow"],
        &["export"],
        &["hist"],
        &["top"]
    )
    .into_iter()
    .collect();
    v.extend(model_cases!(
        &["shadow"],
        &["replay", "t"],
        &["report", "t"],
        &["top"],
        &["promote", "--all"]
    ));
    v.extend([
        case(&["shadow"], "--interval", INTERVAL_S, INTERVAL_RANGE),
        case(&["shadow"], "--top", &["-1", "10001"], "from 0 to 10000"),
        case(
            &["replay", "t"],
            "--top",
            &["-1", "10001"],
            "from 0 to 10000",
        ),
        case(
            &["report", "t"],
            "--top",
            &["-1", "10001"],
            "from 0 to 10000",
        ),
        case(&["top", "--replay", "t"], "--speed", SPEED, SPEED_RANGE),
        case(&["top"], "--interval", INTERVAL_S, INTERVAL_RANGE),
        case(&["export", "--replay", "t"], "--speed", SPEED, SPEED_RANGE),
        case(
            &["export", "--textfile", "m.prom"],
            "--interval",
            INTERVAL_S,
            INTERVAL_RANGE,
        ),
        case(
            &["export"],
            "--per-process",
            &["101", "-1"],
            "from 0 to 100",
        ),
        case(&["export"], "--per-cgroup", &["101", "-1"], "from 0 to 100"),
        case(&["hist"], "--interval", INTERVAL_S, INTERVAL_RANGE),
        case(&["hist"], "--top", &["0", "10001"], "from 1 to 10000"),
    ]);
    v.extend(workload_cases());
    v.extend(promote_cases());
    v
}

fn promote_cases() -> Vec<Case> {
    const P: &[&str] = &["promote", "--all"];
    vec![
        // The probe flags share the parsers above.
        case(P, "--duration", RUN_S, RUN_RANGE),
        case(P, "--ring-mb", RING_MB, RING_RANGE),
        case(P, "--map-budget", BUDGET, BUDGET_RANGE),
        case(
            &["promote"],
            "--pid",
            &["0", "-1", "4194305"],
            "from 1 to 4194304",
        ),
        case(
            P,
            "--batch-ms",
            &["0", "0.05", "1001", "-1", "nan", "inf"],
            "from 0.1 to 1000",
        ),
        case(P, "--max-retries", &["101", "-1", "many"], "from 0 to 100"),
        case(
            P,
            "--queue",
            &["0", "1048577", "10000000000", "1e10", "1.5", "-1"],
            "from 1 to 1048576",
        ),
        // Below one page per second a rate would round to nothing (never
        // to unlimited: that is 0 alone).
        case(
            P,
            "--rate-limit",
            &[
                "0.5", "4095", "1.1TiB/s", "1e10", "nan", "inf", "-1", "fast",
            ],
            "4KiB/s to 1TiB/s",
        ),
        case(
            P,
            "--min-free",
            &["101%", "-1%", "nan%", "inf%", "2PiB", "lots"],
            "from 0% to 100%",
        ),
    ]
}

fn workload_cases() -> Vec<Case> {
    const HC: &[&str] = &["workload", "hot-chunks"];
    const MP: &[&str] = &["workload", "move-pages", "--via", "mover"];
    const K: &[&str] = &["workload", "known", "--log", "l"];
    vec![
        case(K, "--chunk-mb", &["0", "1025", "x"], "from 1 to 1024"),
        case(K, "--steady-chunks", &["-1", "4097"], "from 0 to 4096"),
        case(K, "--burst-chunks", &["-1", "4097"], "from 0 to 4096"),
        case(K, "--revisit-ms", &["9", "3600001"], "from 10 to 3600000"),
        case(K, "--burst-ms", &["9", "3600001"], "from 10 to 3600000"),
        case(
            K,
            "--burst-every-ms",
            &["9", "3600001"],
            "from 10 to 3600000",
        ),
        case(K, "--rare-s", &["-1", "86401"], "from 0 to 86400"),
        case(K, "--cold-mb", WORKLOAD_MB, "from 0 to 1048576"),
        case(K, "--dram-mb", WORKLOAD_MB, "from 0 to 1048576"),
        case(
            K,
            "--accesses",
            &["0", "1000000001"],
            "from 1 to 1000000000",
        ),
        case(K, "--duration", RUN_S, RUN_RANGE),
        case(K, "--slow-node", NODE, NODE_RANGE),
        case(K, "--dram-node", NODE, NODE_RANGE),
        case(K, "--seed", &["-1", "x"], "from 0 to 18446744073709551615"),
        case(HC, "--slow-mb", WORKLOAD_MB, "from 0 to 1048576"),
        case(HC, "--dram-mb", WORKLOAD_MB, "from 0 to 1048576"),
        case(HC, "--chunk-mb", &["0", "1048577"], "from 1 to 1048576"),
        case(
            HC,
            "--accesses",
            &["0", "1000000001"],
            "from 1 to 1000000000",
        ),
        case(HC, "--idle-ms", &["-1", "3600001"], "from 0 to 3600000"),
        case(
            HC,
            "--phase-ms",
            &["-1", "3600001", "x"],
            "from 0 to 3600000",
        ),
        case(HC, "--compute-ms", &["-1", "3600001"], "from 0 to 3600000"),
        case(HC, "--phase-push", &["-1", "101", "x"], "from 0 to 100"),
        case(HC, "--phases", &["-1", "1001"], "from 0 to 1000"),
        case(
            HC,
            "--visits",
            &["-1", "1000000001"],
            "from 0 to 1000000000",
        ),
        case(HC, "--cold-mb", WORKLOAD_MB, "from 0 to 1048576"),
        case(HC, "--idle-threads", &["-1", "1025"], "from 0 to 1024"),
        case(HC, "--procs", &["0", "65", "-1", "x"], "from 1 to 64"),
        case(HC, "--threads", &["0", "65", "-1"], "from 1 to 64"),
        case(HC, "--shared-mb", WORKLOAD_MB, "from 0 to 1048576"),
        case(
            HC,
            "--late-populate-ms",
            &["-1", "600001"],
            "from 0 to 600000",
        ),
        case(HC, "--duration", RUN_S, RUN_RANGE),
        case(HC, "--max-duration", RUN_S, RUN_RANGE),
        case(
            HC,
            "--linger",
            &["-1", "nan", "inf", "1e19", "ten"],
            "from 0 to 31536000",
        ),
        case(
            HC,
            "--min-faults",
            &["-1", "1e6"],
            "from 0 to 18446744073709551615",
        ),
        case(HC, "--seed", &["-1", "x"], "from 0 to 18446744073709551615"),
        case(HC, "--slow-node", NODE, NODE_RANGE),
        case(HC, "--dram-node", NODE, NODE_RANGE),
        case(MP, "--mb", &["0", "1048577"], "from 1 to 1048576"),
        case(
            MP,
            "--batch-ms",
            &["0", "nan", "inf", "60001"],
            "from 0.1 to 60000",
        ),
        case(MP, "--slow-node", NODE, NODE_RANGE),
        case(MP, "--dram-node", NODE, NODE_RANGE),
        case(MP, "--rate-limit", &["fast", "1 GB per s"], "256MiB/s"),
        case(MP, "--min-free", &["101%", "lots"], "from 0% to 100%"),
        case(
            &["explain", "t.trace", "--addr", "0"],
            "--pid",
            &["0", "-1", "4194305"],
            "from 1 to 4194304",
        ),
        case(
            &["explain", "t.trace", "--pid", "1"],
            "--addr",
            &["0x200000000000000", "-1", "x", "0xg"],
            "from 0 to 0x200000000000000",
        ),
        case(
            &["report", "t.trace", "--addr", "0"],
            "--pid",
            &["0", "-1", "4194305"],
            "from 1 to 4194304",
        ),
        case(
            &["report", "t.trace", "--pid", "1"],
            "--addr",
            &["0x200000000000000", "-1", "x", "0xg"],
            "from 0 to 0x200000000000000",
        ),
        case(
            &["replay", "t.trace", "--truth", "t.truth"],
            "--hot-accesses",
            &["0", "-1", "1,2,3,4,5", "1,,2", "x"],
            "from 1 to 1000000000",
        ),
        case(
            &["replay", "t.trace", "--truth", "t.truth"],
            "--horizon-s",
            &["0.05", "-1", "86401", "inf", "x"],
            "from 0.1 to 86400",
        ),
        case(
            &["shadow", "--truth", "damon"],
            "--damon-sample-us",
            &["99", "1000001", "x", "-1"],
            "from 100 to 1000000",
        ),
        case(
            &["shadow", "--truth", "damon"],
            "--damon-aggr-ms",
            &["0", "60001", "1.5"],
            "from 1 to 60000",
        ),
        case(
            &["shadow", "--truth", "damon"],
            "--damon-min-regions",
            &["2", "100001", "x"],
            "from 3 to 100000",
        ),
        case(
            &["shadow", "--truth", "damon"],
            "--damon-max-regions",
            &["2", "100001", "-3"],
            "from 3 to 100000",
        ),
        case(
            &["record", "-o", "t.trace", "--truth", "damon"],
            "--damon-sample-us",
            &["99", "1000001", "x", "-1"],
            "from 100 to 1000000",
        ),
        case(
            &["record", "-o", "t.trace", "--truth", "damon"],
            "--damon-aggr-ms",
            &["0", "60001", "1.5"],
            "from 1 to 60000",
        ),
        case(
            &["record", "-o", "t.trace", "--truth", "damon"],
            "--damon-min-regions",
            &["2", "100001", "x"],
            "from 3 to 100000",
        ),
        case(
            &["record", "-o", "t.trace", "--truth", "damon"],
            "--damon-max-regions",
            &["2", "100001", "-3"],
            "from 3 to 100000",
        ),
        case(
            &["stats", "--live", "--truth", "damon"],
            "--damon-sample-us",
            &["99", "1000001", "x", "-1"],
            "from 100 to 1000000",
        ),
        case(
            &["stats", "--live", "--truth", "damon"],
            "--damon-aggr-ms",
            &["0", "60001", "1.5"],
            "from 1 to 60000",
        ),
        case(
            &["stats", "--live", "--truth", "damon"],
            "--damon-min-regions",
            &["2", "100001", "x"],
            "from 3 to 100000",
        ),
        case(
            &["stats", "--live", "--truth", "damon"],
            "--damon-max-regions",
            &["2", "100001", "-3"],
            "from 3 to 100000",
        ),
        case(
            &["shadow", "--truth", "damon"],
            "--hot-accesses",
            &["0", "-1", "1,2,3,4,5", "x"],
            "from 1 to 1000000000",
        ),
        case(
            &["shadow", "--truth", "damon"],
            "--horizon-s",
            &["0.05", "86401", "nan"],
            "from 0.1 to 86400",
        ),
        case(
            &["report", "t.trace", "--truth", "t.truth"],
            "--hot-accesses",
            &["0", "-1", "1,2,3,4,5", "x"],
            "from 1 to 1000000000",
        ),
        case(
            &["report", "t.trace", "--truth", "t.truth"],
            "--horizon-s",
            &["0.05", "-1", "86401", "nan"],
            "from 0.1 to 86400",
        ),
        case(
            &["workload", "ticker", "--log", "t"],
            "--every-ms",
            &["9", "3600001", "-1", "x"],
            "from 10 to 3600000",
        ),
    ]
}

#[test]
fn bad_numbers_are_refused_at_parse_time_with_the_range() {
    let mut failures = Vec::new();
    for c in cases() {
        for (bad, joined) in c.bad.iter().flat_map(|b| [(b, false), (b, true)]) {
            let mut argv = vec!["numatrace"];
            argv.extend(c.before);
            let arg = format!("{}={bad}", c.flag);
            if joined {
                argv.push(&arg);
            } else {
                argv.extend([c.flag, bad]);
            }
            let line = argv[1..].join(" ");
            match try_parse_from(&argv) {
                Ok(_) => failures.push(format!("{line}: accepted")),
                Err(e) => {
                    let text = e.render().to_string();
                    if e.kind() != ErrorKind::ValueValidation
                        || e.exit_code() != 2
                        || !text.contains(c.flag)
                        || !text.contains(c.range)
                    {
                        failures.push(format!("{line}: {:?} {text}", e.kind()));
                    }
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} bad values not refused with the flag and its range:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// (subcommand path, `--flag`) of every numeric flag.
fn numeric_flags(cmd: &clap::Command, path: &str, out: &mut Vec<(String, String)>) {
    for a in cmd.get_arguments() {
        if let (Some(long), true) = (a.get_long(), is_numeric(a)) {
            out.push((path.trim().to_owned(), format!("--{long}")));
        }
    }
    for sub in cmd.get_subcommands() {
        numeric_flags(sub, &format!("{path} {}", sub.get_name()), out);
    }
}

#[test]
fn every_numeric_flag_has_a_case() {
    let mut flags = Vec::new();
    numeric_flags(&Cli::command(), "", &mut flags);
    assert!(flags.len() > 30, "found only {flags:?}");
    let cases = cases();
    let missing: Vec<String> = flags
        .iter()
        .filter(|(path, flag)| {
            let sub = path.as_str();
            // Subcommand names come first on every case's command line.
            let words = sub.split(' ').count();
            let covered = cases.iter().any(|c| {
                c.flag == flag && c.before.get(..words).is_some_and(|w| w.join(" ") == sub)
            });
            !covered
        })
        .map(|(p, f)| format!("{p} {f}"))
        .collect();
    assert!(
        missing.is_empty(),
        "numeric flags without a case: {missing:?}"
    );
}

#[test]
fn defaults_and_ordinary_values_still_parse() {
    for argv in [
        &[
            "numatrace",
            "stats",
            "--live",
            "--duration",
            "0.5",
            "--ring-mb",
            "2048",
        ][..],
        &[
            "numatrace",
            "top",
            "--replay",
            "t",
            "--speed",
            "0",
            "--interval",
            "0.25",
        ],
        &[
            "numatrace",
            "export",
            "--textfile",
            "m.prom",
            "--interval",
            "15",
        ],
        &["numatrace", "hist", "--interval", "1", "--top", "5"],
        &[
            "numatrace",
            "workload",
            "hot-chunks",
            "--slow-mb",
            "0",
            "--duration",
            "1e3",
        ],
        &[
            "numatrace",
            "workload",
            "move-pages",
            "--via",
            "baseline",
            "--rate-limit",
            "1GB/s",
        ],
        &[
            "numatrace",
            "shadow",
            "--threshold",
            "2e5",
            "--pid",
            "1",
            "--",
            "sleep",
            "1",
        ],
        &["numatrace", "record", "-o", "t", "--sample", "1000000"],
        &["numatrace", "replay", "t", "--top", "0", "--window-ms", "1"],
        &[
            "numatrace",
            "report",
            "t",
            "--counter",
            "global",
            "--stamp",
            "latest",
        ],
        &[
            "numatrace",
            "promote",
            "--all",
            "--duration",
            "31536000",
            "--map-budget",
            "1M",
        ],
        &["numatrace", "doctor"],
        &["numatrace", "dump", "t"],
        &[
            "numatrace",
            "dump",
            "t",
            "--format",
            "parquet",
            "-o",
            "h.parquet",
            "--host",
            "web-3.example",
        ],
    ] {
        if let Err(e) = try_parse_from(argv) {
            panic!("{argv:?}: {}", e.render());
        }
    }
}

#[test]
fn the_command_line_passes_clap_s_own_checks() {
    // Clap checks a command's definition only when it is built in a debug
    // build; the negative-number rewrite must keep it valid.
    super::ranges::command().debug_assert();
}

#[test]
fn verbose_and_quiet_are_global_and_exclusive() {
    let cli = try_parse_from(["numatrace", "dump", "-vv", "t.trace"]).expect("parses");
    assert_eq!((cli.verbose, cli.quiet), (2, false));
    let cli = try_parse_from(["numatrace", "-q", "dump", "t.trace"]).expect("parses");
    assert!(cli.quiet);
    let e = try_parse_from(["numatrace", "-v", "-q", "dump", "t.trace"]).expect_err("refused");
    assert!(e.to_string().contains("cannot be used with"), "{e}");
}

#[test]
fn report_takes_one_to_sixteen_traces() {
    let argv = |n: usize| -> Vec<String> {
        let traces = (0..n).map(|i| format!("t{i}"));
        ["numatrace", "report"]
            .into_iter()
            .map(String::from)
            .chain(traces)
            .collect()
    };
    for n in [1, 2, super::ranges::MAX_REPORT_TRACES] {
        match try_parse_from(argv(n)) {
            Ok(Cli {
                command: super::Command::Report(r),
                ..
            }) => assert_eq!(r.traces.len(), n),
            other => panic!("{n} traces: {other:?}"),
        }
    }
    for n in [0, 17] {
        let err = try_parse_from(argv(n)).expect_err("refused").to_string();
        assert_eq!(err.contains("1 to 16 traces"), n == 17, "{n}: {err}");
    }
}

#[test]
fn host_names_are_printable_and_not_empty() {
    for (bad, why) in [
        ("", "1 to 255 characters"),
        ("a b", "no spaces or control characters"),
        ("a\tb", "no spaces or control characters"),
        ("a\u{1b}[31m", "no spaces or control characters"),
    ] {
        let e = try_parse_from(["numatrace", "dump", "t", "--host", bad])
            .expect_err(bad)
            .render()
            .to_string();
        assert!(e.contains(why), "{bad:?}: {e}");
    }
    let long = "h".repeat(256);
    assert!(try_parse_from(["numatrace", "dump", "t", "--host", &long]).is_err());
}

#[test]
fn map_budget_takes_binary_sizes_from_1mib_to_1tib() {
    use super::ranges::map_budget;
    const MIB: u64 = 1 << 20;
    for (s, want) in [
        ("64", 64 * MIB),
        ("1", MIB),
        ("1024K", MIB),
        ("1024kib", MIB),
        ("512M", 512 * MIB),
        ("512 MiB", 512 * MIB),
        (" 2g ", 2048 * MIB),
        ("2GiB", 2048 * MIB),
        ("1T", 1 << 40),
        ("1 tib", 1 << 40),
        ("1048576", 1 << 40),
    ] {
        assert_eq!(map_budget(s), Ok(want), "{s}");
    }
    for s in [
        "0",
        "1023K",
        "1025G",
        "2T",
        "1048577",
        "99999999999999999999",
        "0M",
    ] {
        let e = map_budget(s).unwrap_err();
        assert!(e.starts_with("out of range: "), "{s}: {e}");
        assert!(e.contains("from 1MiB to 1TiB"), "{s}: {e}");
    }
    for s in [
        "", "-1", "1.5G", "M", "12 B", "1KB", "1 2M", "+5", "0x10", "nan",
    ] {
        let e = map_budget(s).unwrap_err();
        assert!(e.starts_with("not a size: "), "{s}: {e}");
        assert!(e.contains("from 1MiB to 1TiB"), "{s}: {e}");
    }
}

#[test]
fn the_map_budget_default_is_the_loaders() {
    let args = try_parse_from(["numatrace", "record", "-o", "t"]).expect("valid");
    let super::Command::Record(r) = args.command else {
        panic!("not record");
    };
    assert_eq!(r.probe.map_budget, numa_probe::load::DEFAULT_MAP_BUDGET);
}

fn argv(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| (*w).to_owned()).collect()
}

#[test]
fn model_count_and_sweep_values_are_bounded_at_parse_time() {
    use super::ranges::MAX_MODELS;
    assert_eq!(MAX_MODELS, 62);
    let with_models = |cmd: &[&str], n: usize| {
        let mut a = argv(cmd);
        for _ in 0..n {
            a.extend(argv(&["--model", "kernel-time"]));
        }
        a
    };
    for cmd in [
        &["numatrace", "replay", "t"][..],
        &["numatrace", "report", "t"],
        &["numatrace", "shadow"],
        &["numatrace", "top"],
        &["numatrace", "export"],
    ] {
        assert!(try_parse_from(with_models(cmd, 62)).is_ok(), "{cmd:?}");
        let err = try_parse_from(with_models(cmd, 64))
            .expect_err("64 models")
            .to_string();
        assert!(err.contains("at most 62 models"), "{cmd:?}: {err}");
    }
    let sweep = |n: usize| {
        let values: Vec<String> = (1..=n).map(|i| i.to_string()).collect();
        argv(&["numatrace", "replay", "t", "--sweep"])
            .into_iter()
            .chain([format!("threshold={}", values.join(","))])
            .collect::<Vec<_>>()
    };
    assert!(try_parse_from(sweep(62)).is_ok());
    for n in [63, 64, 1000] {
        let err = try_parse_from(sweep(n)).expect_err("too many").to_string();
        assert!(err.contains("give 1 to 62"), "{n}: {err}");
    }
}

#[test]
fn model_specs_are_checked_at_parse_time_with_the_valid_keys() {
    for cmd in [
        &["numatrace", "replay", "t"][..],
        &["numatrace", "export"],
        &["numatrace", "top"],
    ] {
        let mut a = argv(cmd);
        a.extend(argv(&["--model", "fault-count:treshold=5"]));
        let err = try_parse_from(a).expect_err("a typo").to_string();
        assert!(err.contains("no option \"treshold\""), "{cmd:?}: {err}");
        assert!(err.contains("threshold, counter"), "{cmd:?}: {err}");
    }
    let ok = argv(&["numatrace", "replay", "t", "--model", "none"]);
    assert!(try_parse_from(ok).is_ok());
}

#[test]
fn live_only_flags_are_refused_with_a_trace() {
    for (words, named) in [
        (&["numatrace", "stats", "t", "--pid", "5"][..], "--pid"),
        (&["numatrace", "stats", "t", "--sample", "10"], "--sample"),
        (
            &["numatrace", "stats", "t", "--duration", "3"],
            "--duration",
        ),
        (&["numatrace", "hist", "--from", "t", "--pid", "5"], "--pid"),
        (
            &["numatrace", "hist", "--from", "t", "--duration", "3"],
            "--duration",
        ),
        (
            &["numatrace", "top", "--replay", "t", "--sample", "2"],
            "--sample",
        ),
        (
            &["numatrace", "export", "--replay", "t", "--pid", "5"],
            "--pid",
        ),
        (
            &["numatrace", "top", "--replay", "t", "--", "sleep", "1"],
            "COMMAND",
        ),
    ] {
        let err = try_parse_from(argv(words))
            .expect_err("refused")
            .to_string();
        assert!(err.contains(named), "{words:?}: {err}");
        assert!(err.contains("live run"), "{words:?}: {err}");
    }
    // What a trace honours, and the live runs, still parse.
    for words in [
        &["numatrace", "stats", "t"][..],
        &[
            "numatrace",
            "stats",
            "--live",
            "--pid",
            "5",
            "--duration",
            "3",
        ],
        &["numatrace", "hist", "--pid", "5", "--duration", "3"],
        &["numatrace", "top", "--replay", "t", "--duration", "3"],
        &["numatrace", "export", "--replay", "t", "--duration", "3"],
    ] {
        assert!(try_parse_from(argv(words)).is_ok(), "{words:?}");
    }
}

#[test]
fn truth_is_a_file_or_the_trace_s_own_records() {
    use super::{Command, TruthSource};
    let truth = |args: &[&str]| match try_parse_from(args).map(|c| c.command) {
        Ok(Command::Replay(r)) => r.truth,
        other => panic!("{args:?}: {other:?}"),
    };
    assert_eq!(
        truth(&["numatrace", "replay", "t", "--truth", "from-trace"]),
        Some(TruthSource::FromTrace)
    );
    assert_eq!(
        truth(&["numatrace", "replay", "t", "--truth", "./from-trace"]),
        Some(TruthSource::File("./from-trace".into()))
    );
    assert!(try_parse_from(["numatrace", "replay", "t", "--truth", ""]).is_err());
}
