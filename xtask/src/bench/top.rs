//! `cargo xtask bench top`: the cost of `numatrace top` on a replayed
//! stream of 200k events/s. The recorded hot-chunks trace is replayed in a
//! loop at the speed that delivers that rate, with the UI drawing at a 1 s
//! refresh in a 200x50 tmux pane; the process's CPU time and RSS are read
//! from /proc every few seconds. Prints the CPU share of one core (target
//! < 5%) and the RSS over the run (target: flat), then the same CPU figure
//! without shadow models to show where the time goes.
use std::{
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{bail, ensure, Context, Result};
use numa_core::frame::Frame;

use crate::{binary, cmd, host::Setup};

pub(crate) const TARGET_EVENTS_PER_S: f64 = 200_000.0;

struct Sample {
    t: f64,
    cpu_s: f64,
    rss_kb: u64,
    load: Option<f64>,
}

pub(crate) struct Run {
    pub seconds: f64,
    pub events_per_s: f64,
    pub cpu_pct: f64,
    pub rss_warm_kb: u64,
    pub rss_end_kb: u64,
    pub rss_max_kb: u64,
    /// Least-squares slope of RSS after the warm-up, KiB per minute.
    pub rss_slope_kb_min: f64,
    /// The host's 1-minute load average over the measured window (mean,
    /// max): the CPU figure is only comparable between similar loads.
    pub load_mean: f64,
    pub load_max: f64,
}

/// The 1-minute load average.
fn loadavg() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn tmux(socket: &str, args: &[&str]) -> Result<String> {
    cmd::output(Command::new("tmux").arg("-L").arg(socket).args(args))
}

fn clk_tck() -> f64 {
    cmd::output(Command::new("getconf").arg("CLK_TCK"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// utime + stime (s) and VmRSS (KiB) of `pid`, None once it is gone.
fn sample(pid: u32, tck: f64) -> Option<(f64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised comm: state is field 3, utime 14, stime 15.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())?;
    Some((ticks / tck, rss))
}

fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    if n < 2.0 {
        return 0.0;
    }
    let (sx, sy) = points
        .iter()
        .fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
    let (mx, my) = (sx / n, sy / n);
    let (num, den) = points.iter().fold((0.0, 0.0), |(a, b), (x, y)| {
        (a + (x - mx) * (y - my), b + (x - mx) * (x - mx))
    });
    if den == 0.0 {
        0.0
    } else {
        num / den
    }
}

/// Events per second of event time in the trace (all records, as paced).
fn trace_rate(numatrace: &Path, trace: &Path) -> Result<f64> {
    let out = cmd::output(
        Command::new(numatrace)
            .args(["top", "--once", "--json", "--model", "none", "--replay"])
            .arg(trace),
    )?;
    let frame: Frame = serde_json::from_str(&out).context("top --once --json")?;
    let span = frame.elapsed_s;
    ensure!(frame.events > 0 && span > 0.0, "empty trace");
    Ok(frame.events as f64 / span)
}

/// Runs top for `seconds` and measures it.
pub(crate) fn measure(
    numatrace: &Path,
    trace: &Path,
    speed: f64,
    seconds: u64,
    extra: &str,
) -> Result<Run> {
    let socket = format!("numatrace-bench-{}", std::process::id());
    let summary = cmd::target_dir().join("bench/top-summary.txt");
    std::fs::create_dir_all(summary.parent().unwrap_or(Path::new(".")))?;
    let _ = std::fs::remove_file(&summary);
    let line = format!(
        "exec {} top --replay {} --speed {speed:.3} --loop --interval 1 --duration {seconds} {extra} 2>{}",
        numatrace.display(),
        trace.display(),
        summary.display()
    );
    tmux(
        &socket,
        &[
            "new-session",
            "-d",
            "-x",
            "200",
            "-y",
            "50",
            "-s",
            "b",
            &line,
        ],
    )
    .context("starting tmux (run `cargo xtask setup`)")?;
    let result = watch(&socket, &summary, seconds);
    let _ = tmux(&socket, &["kill-server"]);
    let dir = std::env::var("TMUX_TMPDIR").unwrap_or_else(|_| "/tmp".into());
    if let Ok(uid) = cmd::output(Command::new("id").arg("-u")) {
        let _ = std::fs::remove_file(format!("{dir}/tmux-{}/{socket}", uid.trim()));
    }
    result
}

/// Samples top in its tmux pane every 2 s for `seconds`, waits for it to
/// write its summary (the events it replayed), and sums the run up.
fn watch(socket: &str, summary: &Path, seconds: u64) -> Result<Run> {
    let pid: u32 = tmux(socket, &["display-message", "-p", "-t", "b", "#{pane_pid}"])?
        .trim()
        .parse()
        .context("pane pid")?;
    let tck = clk_tck();
    let start = Instant::now();
    let mut samples = Vec::new();
    loop {
        let t = start.elapsed().as_secs_f64();
        if t > seconds as f64 - 1.0 {
            break;
        }
        match sample(pid, tck) {
            Some((cpu_s, rss_kb)) => samples.push(Sample {
                t,
                cpu_s,
                rss_kb,
                load: loadavg(),
            }),
            None => bail!("numatrace top exited early (see {})", summary.display()),
        }
        std::thread::sleep(Duration::from_secs(2));
    }
    // Let top finish and write its summary.
    let deadline = Instant::now() + Duration::from_secs(20);
    while sample(pid, tck).is_some() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    let text = std::fs::read_to_string(summary).unwrap_or_default();
    let events: f64 = text
        .split("numatrace: top: ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .with_context(|| format!("no summary from top: {text:?}"))?;
    summarize(&samples, events, seconds)
}

/// The figures of a run of `seconds` from its samples after the warm-up.
fn summarize(samples: &[Sample], events: f64, seconds: u64) -> Result<Run> {
    let warm = (seconds as f64 * 0.1).clamp(5.0, 30.0);
    let after: Vec<&Sample> = samples.iter().filter(|s| s.t >= warm).collect();
    let (first, last) = match (after.first(), after.last()) {
        (Some(a), Some(b)) if b.t > a.t => (*a, *b),
        _ => bail!("run too short to measure ({} samples)", samples.len()),
    };
    let loads: Vec<f64> = after.iter().filter_map(|s| s.load).collect();
    let load_mean = loads.iter().sum::<f64>() / loads.len().max(1) as f64;
    let load_max = loads.iter().copied().fold(0.0, f64::max);
    let points: Vec<(f64, f64)> = after
        .iter()
        .map(|s| (s.t / 60.0, s.rss_kb as f64))
        .collect();
    Ok(Run {
        seconds: last.t - first.t,
        events_per_s: events / seconds as f64,
        cpu_pct: 100.0 * (last.cpu_s - first.cpu_s) / (last.t - first.t),
        rss_warm_kb: first.rss_kb,
        rss_end_kb: last.rss_kb,
        rss_max_kb: after.iter().map(|s| s.rss_kb).max().unwrap_or(0),
        rss_slope_kb_min: slope(&points),
        load_mean,
        load_max,
    })
}

pub(crate) fn run(seconds: u64) -> Result<()> {
    ensure!(seconds >= 20, "--seconds: at least 20");
    let numatrace = binary::build(true, &mut Setup::new(false))?;
    let trace: PathBuf =
        cmd::workspace_root().join("numa-cli/tests/testdata/hot-chunks-6.12.trace");
    let rate = trace_rate(&numatrace, &trace)?;
    let speed = TARGET_EVENTS_PER_S / rate;
    println!(
        "numatrace top benchmark: {} replayed in a loop at x{speed:.0} ({rate:.0} events/s recorded -> {:.0}k/s), refresh 1 s, 200x50 tmux pane",
        trace.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
        TARGET_EVENTS_PER_S / 1e3
    );
    println!("  full run: {seconds} s (warm-up excluded from the figures)...");
    let full = measure(&numatrace, &trace, speed, seconds, "")?;
    let short = (seconds / 5).clamp(20, 60);
    println!("  the same without shadow models (--model none): {short} s...");
    let bare = measure(&numatrace, &trace, speed, short, "--model none")?;
    let mib = |kb: u64| kb as f64 / 1024.0;
    let grow_10min_mib = full.rss_slope_kb_min * 10.0 / 1024.0;
    let flat =
        grow_10min_mib.abs() < 2.0 && full.rss_end_kb.saturating_sub(full.rss_warm_kb) < 4096;
    println!();
    println!(
        "  delivered       {:>9.0} events/s (target {:.0})",
        full.events_per_s, TARGET_EVENTS_PER_S
    );
    println!(
        "  CPU             {:>9.1} % of one core over {:.0} s (target < 5 %) {}",
        full.cpu_pct,
        full.seconds,
        if full.cpu_pct < 5.0 { "ok" } else { "OVER" }
    );
    println!(
        "  RSS             {:>9.1} MiB after warm-up -> {:.1} MiB at the end (max {:.1}); trend {:+.2} MiB per 10 min {}",
        mib(full.rss_warm_kb),
        mib(full.rss_end_kb),
        mib(full.rss_max_kb),
        grow_10min_mib,
        if flat { "(flat)" } else { "(GROWING)" }
    );
    if seconds < 600 {
        println!(
            "  (a {seconds} s run; the trend line extrapolates the RSS to 10 minutes: {:.1} MiB)",
            mib(full.rss_end_kb) + full.rss_slope_kb_min * (600.0 - full.seconds) / 60.0 / 1024.0
        );
    }
    println!(
        "  CPU without models {:>6.1} % ({:.0} events/s, RSS {:.1} MiB): the shadow models cost {:.1} points",
        bare.cpu_pct,
        bare.events_per_s,
        mib(bare.rss_end_kb),
        full.cpu_pct - bare.cpu_pct
    );
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "  host load average {:.1} (max {:.1}) during the full run, {:.1} (max {:.1}) without models, {cores} cores: compare runs at similar loads",
        full.load_mean, full.load_max, bare.load_mean, bare.load_max
    );
    Ok(())
}
