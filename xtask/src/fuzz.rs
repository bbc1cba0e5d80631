//! `cargo xtask fuzz`: every cargo-fuzz target in numa-cli/fuzz for a fixed
//! time each. Before each run the target's known crashes
//! (numa-cli/fuzz/regressions/<target>/) are replayed, so a fixed crash
//! stays fixed; the corpus starts from the committed seeds plus records cut
//! from the recorded test trace, so the trace reader and the ring decoder
//! begin from real data rather than from nothing.
//!
//! With `--seed`: a fresh corpus, libFuzzer's random seed fixed and a run
//! count per target ([`TEST_RUNS`]), so the test suite explores mostly the
//! same inputs everywhere (libFuzzer's feedback still differs a little
//! between runs, so a rare input may be reached on one machine only; its
//! crash input is saved either way). Without it, every run explores
//! anew from the corpus earlier runs grew.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context, Result};

use crate::{cmd, host::Setup};

/// The targets, in numa-cli/fuzz/fuzz_targets/.
pub(crate) const TARGETS: &[&str] = &[
    "trace_reader",
    "ring_decode",
    "text_parsers",
    "state_judge",
    "model_spec",
];

/// Longest input libFuzzer makes: a trace header plus a few dozen records.
const MAX_LEN: usize = 16 << 10;
/// Memory one target may take (libFuzzer's `-rss_limit_mb`, also its
/// single-allocation limit): an input of [`MAX_LEN`] bytes that needs more
/// has found a structure the input decides the size of, and is a crash.
const RSS_LIMIT_MB: u32 = 1024;
/// Seconds one input may take (`-timeout`): an input of [`MAX_LEN`] bytes
/// runs in milliseconds, so a slower one is a time the input decides, and
/// is reported as a crash with its input.
const INPUT_TIMEOUT_S: u32 = 10;
/// The recorded trace the seeds are cut from.
const TRACE: &str = "numa-cli/tests/testdata/hot-chunks-6.12.trace";

/// Inputs per target in a reproducible run: about 8 s each here (a smoke
/// run in the suite's time; `cargo xtask fuzz --time S` fuzzes longer).
pub(crate) const TEST_RUNS: &[(&str, u64)] = &[
    ("trace_reader", 12_500),
    ("ring_decode", 500_000),
    ("text_parsers", 12_500),
    ("state_judge", 100_000),
    ("model_spec", 100_000),
];

#[derive(clap::Args, Debug)]
pub(crate) struct FuzzArgs {
    /// Seconds of fuzzing per target (1 to 86400); with --seed, an upper
    /// bound on the fixed run count.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=86400))]
    pub time: u64,
    /// libFuzzer's seed (1 to 4294967295), with a fresh corpus and
    /// a fixed number of inputs per target.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub seed: Option<u32>,
    /// Only these targets (default: all).
    #[arg(long, value_delimiter = ',', value_parser = clap::builder::PossibleValuesParser::new(TARGETS))]
    pub only: Vec<String>,
}

fn fuzz_dir() -> PathBuf {
    cmd::workspace_root().join("numa-cli/fuzz")
}

/// Builds every target, then replays regressions and fuzzes each one for
/// `time` seconds; fails on the first crash, naming the input file.
pub(crate) fn run(args: &FuzzArgs, setup: &mut Setup) -> Result<()> {
    setup.cargo_fuzz()?;
    let targets: Vec<&str> = if args.only.is_empty() {
        TARGETS.to_vec()
    } else {
        args.only.iter().map(String::as_str).collect()
    };
    cmd::run(
        cargo_fuzz()
            .arg("build")
            .args(["--fuzz-dir"])
            .arg(fuzz_dir()),
    )
    .context("building the fuzz targets")?;
    for target in targets {
        let corpus = corpus_dir(target, args.seed.is_some())?;
        seed(target, &corpus)?;
        replay_regressions(target)?;
        fuzz(target, &corpus, &budget(target, args))?;
    }
    Ok(())
}

/// The corpus of `target`: a fresh one for a reproducible run.
fn corpus_dir(target: &str, fresh: bool) -> Result<PathBuf> {
    let kind = if fresh { "fresh-corpus" } else { "corpus" };
    let dir = cmd::target_dir().join("fuzz").join(kind).join(target);
    if fresh && dir.exists() {
        fs::remove_dir_all(&dir).with_context(|| format!("clearing {}", dir.display()))?;
    }
    fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// libFuzzer's bounds for one target.
fn budget(target: &str, args: &FuzzArgs) -> Vec<String> {
    let mut b = vec![format!("-max_total_time={}", args.time)];
    b.extend(limits());
    if let Some(seed) = args.seed {
        let runs = TEST_RUNS
            .iter()
            .find(|(t, _)| *t == target)
            .map_or(100_000, |(_, n)| *n);
        b.push(format!("-seed={seed}"));
        b.push(format!("-runs={runs}"));
    }
    b
}

/// The memory and time one input may take, for every libFuzzer run
/// (fuzzing and replaying known crashes alike).
fn limits() -> [String; 2] {
    [
        format!("-rss_limit_mb={RSS_LIMIT_MB}"),
        format!("-timeout={INPUT_TIMEOUT_S}"),
    ]
}

/// `cargo +nightly fuzz`, run in the workspace root.
fn cargo_fuzz() -> Command {
    let mut c = Command::new("cargo");
    c.current_dir(cmd::workspace_root())
        .args(["+nightly", "fuzz"]);
    c
}

fn artifacts(target: &str) -> Result<PathBuf> {
    let dir = cmd::target_dir().join("fuzz/artifacts").join(target);
    fs::create_dir_all(&dir)?;
    Ok(dir)
}

fn replay_regressions(target: &str) -> Result<()> {
    let dir = fuzz_dir().join("regressions").join(target);
    let Ok(entries) = fs::read_dir(&dir) else {
        return Ok(());
    };
    let files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    if files.is_empty() {
        return Ok(());
    }
    println!(
        "fuzz {target}: replaying {} known crash input(s)",
        files.len()
    );
    cmd::run(
        cargo_fuzz()
            .args(["run", "--fuzz-dir"])
            .arg(fuzz_dir())
            .arg(target)
            .args(&files)
            .arg("--")
            .args(limits())
            .arg(format!(
                "-artifact_prefix={}/",
                artifacts(target)?.display()
            )),
    )
    .with_context(|| {
        format!(
            "a fixed crash of {target} is back (inputs in {})",
            dir.display()
        )
    })
}

fn fuzz(target: &str, corpus: &Path, budget: &[String]) -> Result<()> {
    let seeds = fuzz_dir().join("seeds").join(target);
    let artifacts = artifacts(target)?;
    let mut c = cargo_fuzz();
    c.args(["run", "--fuzz-dir"])
        .arg(fuzz_dir())
        .arg(target)
        .arg(corpus);
    if seeds.is_dir() {
        c.arg(&seeds);
    }
    c.arg("--").args(budget).args([
        format!("-max_len={MAX_LEN}"),
        format!("-artifact_prefix={}/", artifacts.display()),
        "-print_final_stats=1".to_owned(),
    ]);
    println!("fuzz {target}: {}", budget.join(" "));
    if cmd::run(&mut c).is_err() {
        bail!(
            "fuzz target {target} crashed; the input is in {} (copy it to \
             numa-cli/fuzz/regressions/{target}/ with the fix and a unit test)",
            artifacts.display()
        );
    }
    Ok(())
}

/// Writes the trace-derived seeds of `target` into its corpus.
fn seed(target: &str, corpus: &Path) -> Result<()> {
    let seeds = match target {
        "trace_reader" => trace_prefixes()?,
        "ring_decode" => trace_records()?,
        _ => return Ok(()),
    };
    for (i, s) in seeds.iter().enumerate() {
        fs::write(corpus.join(format!("from-trace-{i}")), s)?;
    }
    Ok(())
}

/// The recorded trace: its header bytes and its records (tag, payload).
struct Trace {
    header: Vec<u8>,
    records: Vec<(u8, Vec<u8>)>,
}

fn read_trace() -> Result<Trace> {
    let path = cmd::workspace_root().join(TRACE);
    let data = fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    let word = |at: usize| -> Option<usize> {
        let b = data.get(at..at + 4)?;
        Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
    };
    let Some(header_end) = word(12).map(|len| 16 + len) else {
        bail!("{} is not a numatrace trace", path.display());
    };
    let mut records = Vec::new();
    let mut pos = header_end;
    while let Some(len) = word(pos + 1) {
        let Some(payload) = data.get(pos + 5..pos + 5 + len) else {
            break;
        };
        records.push((data[pos], payload.to_vec()));
        pos += 5 + len;
    }
    Ok(Trace {
        header: data[..header_end.min(data.len())].to_vec(),
        records,
    })
}

/// The header followed by runs of records of each kind, then a footer.
fn trace_prefixes() -> Result<Vec<Vec<u8>>> {
    let t = read_trace()?;
    let mut out = Vec::new();
    for tag in 1..=4u8 {
        let mut bytes = t.header.clone();
        for (_, payload) in t.records.iter().filter(|(k, _)| *k == tag).take(24) {
            bytes.push(tag);
            bytes.extend_from_slice(&(payload.len() as u32).to_le_bytes());
            bytes.extend_from_slice(payload);
        }
        if let Some((tag, footer)) = t.records.iter().find(|(k, _)| *k == 5) {
            bytes.push(*tag);
            bytes.extend_from_slice(&(footer.len() as u32).to_le_bytes());
            bytes.extend_from_slice(footer);
        }
        out.push(bytes);
    }
    Ok(out)
}

/// A few records of each event kind, as the ring hands them out.
fn trace_records() -> Result<Vec<Vec<u8>>> {
    let t = read_trace()?;
    let mut out = Vec::new();
    for tag in 1..=3u8 {
        out.extend(
            t.records
                .iter()
                .filter(|(k, _)| *k == tag)
                .take(4)
                .map(|(_, p)| p.clone()),
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_run_bounds_memory_and_time_per_input() {
        for seed in [None, Some(7)] {
            let args = FuzzArgs {
                time: 20,
                seed,
                only: vec![],
            };
            let b = budget("trace_reader", &args);
            assert!(
                b.contains(&format!("-rss_limit_mb={RSS_LIMIT_MB}")),
                "{b:?}"
            );
            assert!(b.contains(&format!("-timeout={INPUT_TIMEOUT_S}")), "{b:?}");
        }
    }
}
