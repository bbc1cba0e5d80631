//! `numatrace top`: checks and attaches first (clear errors on the normal
//! screen), then runs the source and the aggregator on a background thread
//! and the draw loop on this one.
use std::{
    cell::RefCell,
    io::{IsTerminal, Write},
    path::PathBuf,
    process::ExitCode,
    sync::mpsc::{self, SyncSender},
    time::Duration,
};

use anyhow::{bail, Context, Result};
use tokio::{signal::unix::SignalKind, sync::watch};

use numa_probe::load::Probes;

use crate::{
    cli::{ModelSel, TopArgs},
    decode::{Event, Snapshot},
    evaluate,
    model::policy::{KernelDefaults, Policy},
    pipeline::{self, LiveOptions, Sink, StopReason},
    stats, system, trace,
    tui::{
        action::UiEvent,
        agg::{Aggregator, Focus},
        app::App,
        frame::Frame,
        procfs,
        term::{self, Exit, Msg},
    },
};

/// Shadow models `top` can show at once (one column each in memory).
const MAX_MODELS: usize = 8;
/// Processes whose numa_maps are read, every [`PROCFS_EVERY`].
const RESIDENT_PROCS: usize = 16;
const PROCFS_EVERY: Duration = Duration::from_secs(5);
/// "Forever" for a live run the user did not bound.
const UNBOUNDED: Duration = Duration::from_secs(100 * 365 * 86_400);
/// Records of a looped replay kept in memory for the passes after the
/// first (about 160 bytes each: 64 MiB at most); a longer trace is re-read
/// from the file on every pass.
const LOOP_CACHE_ITEMS: usize = 400_000;

/// The shadow policies `--model` asks for (`none`: no models).
fn policies(a: &ModelSel, k: &KernelDefaults) -> Result<Vec<Box<dyn Policy>>> {
    if a.models.iter().any(|m| m == "none") {
        if a.models.len() > 1 {
            bail!("--model none runs no shadow model: give it alone");
        }
        return Ok(Vec::new());
    }
    let p = evaluate::policies(a, k)?;
    if p.len() > MAX_MODELS {
        bail!("top shows at most {MAX_MODELS} models, {} given", p.len());
    }
    Ok(p)
}

/// Where events come from.
enum Source {
    Live(Box<Probes>, LiveOptions),
    Replay {
        path: PathBuf,
        speed: f64,
        duration: Option<Duration>,
        repeat: bool,
    },
}

impl Source {
    fn live(&self) -> bool {
        matches!(self, Source::Live(..))
    }
}

/// Forwards the pipeline into the shared aggregator, shifting time by
/// `offset` (looped replays keep time monotonic).
struct AggSink<'a> {
    agg: &'a RefCell<Aggregator>,
    offset: u64,
    last_ts: u64,
}

impl Sink for AggSink<'_> {
    fn event(&mut self, ev: &Event) -> Result<()> {
        if self.offset == 0 {
            self.last_ts = self.last_ts.max(ev.ts_ns());
            self.agg.borrow_mut().event(ev);
            return Ok(());
        }
        let ev = {
            let mut e = *ev;
            match &mut e {
                Event::Fault(f) => {
                    f.ts_ns += self.offset;
                    if f.scan_ns > 0 {
                        f.scan_ns += self.offset;
                    }
                }
                Event::Scan(s) => s.ts_ns += self.offset,
                Event::Skip(s) => s.ts_ns += self.offset,
            }
            e
        };
        self.last_ts = self.last_ts.max(ev.ts_ns());
        self.agg.borrow_mut().event(&ev);
        Ok(())
    }

    fn snapshot(&mut self, s: &Snapshot) -> Result<()> {
        if self.offset == 0 {
            self.last_ts = self.last_ts.max(s.ts_ns);
            self.agg.borrow_mut().snapshot(s);
        } else {
            // Counters restart with every loop: only the first pass's
            // snapshots describe the kernel; later ones only move time.
            self.last_ts = self.last_ts.max(s.ts_ns + self.offset);
        }
        Ok(())
    }
}

/// Control from the UI to the background side.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Control {
    focus: Focus,
    refresh: Duration,
    quit: bool,
}

/// What the background side reports when it stops.
struct Summary {
    events: u64,
    elapsed_s: f64,
    ring_drops: u64,
    evictions: u64,
    reason: String,
}

fn source_label(a: &TopArgs) -> String {
    match &a.replay {
        Some(p) => format!(
            "replay {} x{}{}",
            p.file_name().map_or_else(
                || p.display().to_string(),
                |n| n.to_string_lossy().into_owned()
            ),
            a.speed,
            if a.repeat { " (loop)" } else { "" }
        ),
        None => "live".into(),
    }
}

fn reason_text(r: &StopReason, replay: bool) -> String {
    match r {
        StopReason::CommandExited(_) if replay => "end of trace".into(),
        StopReason::CommandExited(_) => "command exited".into(),
        other => other.describe(),
    }
}

async fn run_source(source: &mut Source, agg: &RefCell<Aggregator>) -> Result<StopReason> {
    match source {
        Source::Live(probes, opts) => {
            let mut sink = AggSink {
                agg,
                offset: 0,
                last_ts: 0,
            };
            pipeline::run_live(probes, opts, &mut [&mut sink]).await
        }
        Source::Replay {
            path,
            speed,
            duration,
            repeat,
        } => {
            let mut sink = AggSink {
                agg,
                offset: 0,
                last_ts: 0,
            };
            if *repeat {
                let deadline = duration.map(|d| tokio::time::Instant::now() + d);
                return replay_loop(path, *speed, deadline, LOOP_CACHE_ITEMS, &mut sink).await;
            }
            let (reason, warning) =
                pipeline::run_replay(path, *speed, *duration, &mut [&mut sink]).await?;
            if let Some(w) = warning {
                agg.borrow_mut().set_ended(w);
            }
            Ok(reason)
        }
    }
}

/// Replays `path` over and over, each pass shifted in time to start 1 ms
/// after the previous one's last record, until `deadline` or a signal. The
/// file is read once: later passes replay the first pass's records from
/// memory when there are at most `cache_max` of them, else re-read it.
async fn replay_loop(
    path: &std::path::Path,
    speed: f64,
    deadline: Option<tokio::time::Instant>,
    cache_max: usize,
    sink: &mut AggSink<'_>,
) -> Result<StopReason> {
    // One clock for all passes: pass k is due from start + offset_k / speed,
    // so the batches' lateness does not add up from pass to pass.
    let t0 = first_ts(path)?;
    let start = tokio::time::Instant::now();
    let origin_at = |offset: u64| pass_origin(start, t0?, offset, speed);
    let mut reader = trace::Reader::open(path)?;
    let mut cache: Option<Vec<trace::Item>> = Some(Vec::new());
    let items = reader.by_ref().inspect(|item| {
        if cache.as_ref().is_some_and(|c| c.len() >= cache_max) {
            cache = None;
        }
        if let (Ok(it), Some(c)) = (item, cache.as_mut()) {
            c.push(it.clone());
        }
    });
    let mut reason =
        pipeline::replay_items(items, speed, origin_at(0), deadline, &mut [&mut *sink]).await?;
    let Some(t0) = t0 else {
        // Nothing to loop over.
        return Ok(reason);
    };
    loop {
        if !matches!(reason, StopReason::CommandExited(_)) {
            return Ok(reason);
        }
        sink.offset = (sink.last_ts + 1_000_000).saturating_sub(t0);
        let origin = origin_at(sink.offset);
        reason = match &cache {
            Some(c) => {
                pipeline::replay_items(c.iter().map(Ok), speed, origin, deadline, &mut [&mut *sink])
                    .await?
            }
            None => {
                let mut r = trace::Reader::open(path)?;
                pipeline::replay_items(r.by_ref(), speed, origin, deadline, &mut [&mut *sink])
                    .await?
            }
        };
    }
}

/// When a looped pass shifted by `offset` ns starts: (wall time, trace time
/// due then), None when unpaced (`speed` 0) or out of range.
fn pass_origin(
    start: tokio::time::Instant,
    t0: u64,
    offset: u64,
    speed: f64,
) -> Option<(tokio::time::Instant, u64)> {
    if speed <= 0.0 {
        return None;
    }
    let d = Duration::try_from_secs_f64(offset as f64 / 1e9 / speed).ok()?;
    Some((start.checked_add(d)?, t0))
}

/// Timestamp of the first record of a trace (the replay's time origin).
fn first_ts(path: &std::path::Path) -> Result<Option<u64>> {
    let mut r = trace::Reader::open(path)?;
    for item in r.by_ref() {
        if let Some(ts) = pipeline::item_ts(&item?) {
            return Ok(Some(ts));
        }
    }
    Ok(None)
}

fn now_for(live: bool) -> Option<u64> {
    live.then(numa_host::clock::monotonic_ns)
}

/// Reads procfs for the busiest processes (resident pages) and the detailed
/// one (VMAs); live only.
fn poll_procfs(agg: &RefCell<Aggregator>, focus: Focus, resident: bool) {
    if resident {
        let pids = agg.borrow().busiest(RESIDENT_PROCS);
        for pid in pids {
            let pages = procfs::numa_maps(pid);
            agg.borrow_mut().set_resident(pid, pages);
        }
        agg.borrow_mut().set_nodes(system::nodes());
    }
    if let Some(pid) = focus.detail_pid {
        let vmas = procfs::maps(pid);
        agg.borrow_mut().set_vmas(pid, vmas);
    }
}

fn send(tx: &SyncSender<Msg>, frame: Frame) {
    // A full channel means the UI is behind: drop this frame, never wait.
    let _ = tx.try_send(Msg::Frame(Box::new(frame)));
}

/// The background side: source + aggregator + publication ticks, until the
/// UI quits or a signal arrives.
async fn background(
    mut source: Source,
    agg: RefCell<Aggregator>,
    mut ctl: watch::Receiver<Control>,
    tx: SyncSender<Msg>,
    exit_when_done: bool,
) -> Result<Summary> {
    let live = source.live();
    let mut sigint = tokio::signal::unix::signal(SignalKind::interrupt())?;
    let mut sigterm = tokio::signal::unix::signal(SignalKind::terminate())?;
    let mut sighup = tokio::signal::unix::signal(SignalKind::hangup())?;
    let mut c = *ctl.borrow();
    let mut next_tick = tokio::time::Instant::now() + c.refresh;
    let mut next_procfs = tokio::time::Instant::now();
    let mut reason: Option<String> = None;
    let mut polled: std::collections::HashSet<u32> = std::collections::HashSet::new();
    {
        let pipeline = run_source(&mut source, &agg);
        tokio::pin!(pipeline);
        // One timer for the publication ticks, reset when it fires: the
        // loop turns on every replay batch, and a new timer each turn costs
        // a timer-wheel insertion and removal.
        let tick = tokio::time::sleep_until(next_tick);
        tokio::pin!(tick);
        let mut running = true;
        loop {
            tokio::select! {
                r = &mut pipeline, if running => {
                    running = false;
                    let r = r?;
                    if let StopReason::Signal(s) = r {
                        let _ = tx.send(Msg::Signal(s));
                        reason = Some(r.describe());
                        break;
                    }
                    let why = reason_text(&r, !live);
                    let frame = {
                        let mut a = agg.borrow_mut();
                        if a.ended().is_none() {
                            a.set_ended(why.clone());
                        }
                        a.publish(now_for(live), c.focus)
                    };
                    reason = Some(why);
                    send(&tx, frame);
                    let _ = tx.send(Msg::Ended { exit: exit_when_done });
                }
                _ = &mut tick => {
                    next_tick += c.refresh;
                    let now = tokio::time::Instant::now();
                    if next_tick < now {
                        next_tick = now + c.refresh;
                    }
                    tick.as_mut().reset(next_tick);
                    // numa_maps every PROCFS_EVERY, and at once for a process
                    // that just became one of the busiest.
                    let fresh = live && agg.borrow().busiest(RESIDENT_PROCS).iter().any(|p| !polled.contains(p));
                    if live && (now >= next_procfs || fresh) {
                        next_procfs = now + PROCFS_EVERY;
                        if polled.len() > 4096 {
                            polled.clear();
                        }
                        polled.extend(agg.borrow().busiest(RESIDENT_PROCS));
                        poll_procfs(&agg, c.focus, true);
                    } else if live {
                        poll_procfs(&agg, c.focus, false);
                    }
                    if running {
                        let frame = agg.borrow_mut().publish(now_for(live), c.focus);
                        send(&tx, frame);
                    }
                }
                r = ctl.changed() => {
                    if r.is_err() {
                        break;
                    }
                    let new = *ctl.borrow_and_update();
                    if new.quit {
                        break;
                    }
                    if new.refresh != c.refresh {
                        next_tick = tokio::time::Instant::now() + new.refresh;
                        tick.as_mut().reset(next_tick);
                    }
                    let refocus = new.focus != c.focus;
                    c = new;
                    if refocus {
                        // Show the new selection's histogram/detail now.
                        if live {
                            poll_procfs(&agg, c.focus, false);
                        }
                        let frame = agg.borrow_mut().peek(c.focus);
                        send(&tx, frame);
                    }
                }
                _ = sigint.recv() => { let _ = tx.send(Msg::Signal("SIGINT")); reason = Some("SIGINT received".into()); break; }
                _ = sigterm.recv() => { let _ = tx.send(Msg::Signal("SIGTERM")); reason = Some("SIGTERM received".into()); break; }
                _ = sighup.recv() => { let _ = tx.send(Msg::Signal("SIGHUP")); reason = Some("SIGHUP received".into()); break; }
            }
        }
    }
    let a = agg.borrow_mut().publish(None, c.focus);
    Ok(Summary {
        events: a.events,
        elapsed_s: a.elapsed_s,
        ring_drops: a.warnings.ring_drops,
        evictions: a.warnings.evictions,
        reason: reason.unwrap_or_else(|| "quit".into()),
    })
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

/// Prepares the source: attaches the probes (live) or opens the trace.
/// Every refusal happens here, before the terminal changes.
fn prepare(args: &TopArgs) -> Result<(Source, trace::Header)> {
    match &args.replay {
        Some(path) => {
            let header = trace::Reader::open(path)?.header;
            let duration = args.probe.duration.map(Duration::from_secs_f64);
            if !args.speed.is_finite() || args.speed < 0.0 {
                bail!(
                    "--speed {}: give a positive factor (0 = as fast as possible)",
                    args.speed
                );
            }
            Ok((
                Source::Replay {
                    path: path.clone(),
                    speed: if args.once { 0.0 } else { args.speed },
                    duration,
                    repeat: args.repeat && !args.once,
                },
                header,
            ))
        }
        None => {
            let probes = numa_probe::session::attach(&args.probe.options())?;
            let header = numa_probe::session::header(&probes);
            let mut opts = stats::live_options(&args.probe);
            if opts.duration.is_none() && opts.command.is_empty() {
                opts.duration = Some(if args.once {
                    Duration::from_secs(2)
                } else {
                    UNBOUNDED
                });
            }
            Ok((Source::Live(Box::new(probes), opts), header))
        }
    }
}

pub fn run(args: &TopArgs) -> Result<ExitCode> {
    if !(args.interval.is_finite() && args.interval > 0.0) {
        bail!("--interval {}: give seconds > 0", args.interval);
    }
    if !args.once && !std::io::stdout().is_terminal() {
        bail!(
            "`numatrace top` draws on a terminal, but stdout is not one; \
             for scripts use `numatrace top --once --json` (one snapshot)"
        );
    }
    // Validate the model specs before attaching anything.
    let _ = policies(&args.sel, &KernelDefaults::default())?;
    let (source, header) = prepare(args)?;
    let k = evaluate::kernel_defaults(&header);
    let label = source_label(args);
    if args.once {
        return once(args, source, &header, &k, label);
    }
    let refresh = Duration::from_secs_f64(args.interval);
    let exit_when_done = args.probe.duration.is_some() || !args.probe.command.is_empty();
    let app = App::new(refresh);
    let (ctl_tx, ctl_rx) = watch::channel(Control {
        focus: app.focus(),
        refresh: app.refresh(),
        quit: false,
    });
    let (tx, rx) = mpsc::sync_channel::<Msg>(4);
    let models = args.sel.clone();
    let bg = std::thread::Builder::new()
        .name("numatrace-agg".into())
        .spawn(move || -> Result<Summary> {
            // Policies are not Send: built here, on the thread that runs them.
            let policies = policies(&models, &k)?;
            let agg = RefCell::new(Aggregator::new(policies, &header, label));
            runtime()?.block_on(background(source, agg, ctl_rx, tx, exit_when_done))
        })
        .context("starting the aggregation thread")?;
    let outcome = ui(app, &rx, &ctl_tx);
    // Stop the background side and collect its summary.
    ctl_tx.send_modify(|c| c.quit = true);
    drop(rx);
    let summary = bg
        .join()
        .map_err(|_| anyhow::anyhow!("the aggregation thread panicked"))?;
    let exit = outcome?;
    let summary = summary?;
    let why = match exit {
        Exit::Quit => "quit".to_owned(),
        Exit::Signal(s) => format!("{s} received"),
        Exit::SourceEnded | Exit::Disconnected => summary.reason.clone(),
    };
    eprintln!(
        "numatrace top: {} events over {:.1} s of event time; ring drops {}, map evictions {}; stopped: {why}",
        summary.events, summary.elapsed_s, summary.ring_drops, summary.evictions
    );
    Ok(ExitCode::SUCCESS)
}

fn ui(mut app: App, rx: &mpsc::Receiver<Msg>, ctl: &watch::Sender<Control>) -> Result<Exit> {
    // Lets the real-terminal test check the panic path: `!` panics.
    let panic_key = std::env::var_os("NUMATRACE_TOP_PANIC_KEY").is_some();
    let input = |timeout| {
        let ev = term::read_input(timeout)?;
        if let UiEvent::Key(k) = &ev {
            if panic_key && k.code == crossterm::event::KeyCode::Char('!') {
                panic!("numatrace top: test panic (NUMATRACE_TOP_PANIC_KEY is set)");
            }
        }
        Ok(ev)
    };
    let (mut terminal, _guard) = term::enter()?;
    term::run(&mut terminal, &mut app, rx, input, |focus, refresh| {
        ctl.send_modify(|c| {
            c.focus = focus;
            c.refresh = refresh;
        });
    })
}

fn once(
    args: &TopArgs,
    mut source: Source,
    header: &trace::Header,
    k: &KernelDefaults,
    label: String,
) -> Result<ExitCode> {
    let live = source.live();
    let agg = RefCell::new(Aggregator::new(policies(&args.sel, k)?, header, label));
    let reason = runtime()?.block_on(run_source(&mut source, &agg))?;
    if live {
        poll_procfs(&agg, Focus::default(), true);
    }
    let mut a = agg.borrow_mut();
    a.set_ended(reason_text(&reason, !live));
    let frame = a.publish(now_for(live), Focus::default());
    let mut out = std::io::stdout().lock();
    // A running promoter, as the header line shows it (live and replay alike:
    // it is this host's promoter, not the trace's).
    let promoter = crate::promoter_state::Source::from_env().read();
    if args.json {
        let mut value = serde_json::to_value(&frame)?;
        if let Some(obj) = value.as_object_mut() {
            obj.insert("promoter".into(), promoter_json(&promoter)?);
        }
        serde_json::to_writer_pretty(&mut out, &value)?;
        writeln!(out)?;
    } else {
        let mut app = App::new(Duration::from_secs_f64(args.interval));
        app.promoter = Some(promoter);
        app.update(crate::tui::action::Action::Sample(Box::new(frame)));
        for line in screen_text(&app, 120, 40) {
            writeln!(out, "{line}")?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `{"running": true, "state": {...}}` or `{"running": false, "reason": "..."}`.
fn promoter_json(reading: &crate::promoter_state::Reading) -> Result<serde_json::Value> {
    use crate::promoter_state::Reading;
    Ok(match reading {
        Reading::Running(state) => {
            serde_json::json!({"running": true, "state": serde_json::to_value(state)?})
        }
        Reading::NotRunning(why) => {
            serde_json::json!({"running": false, "reason": why.to_string()})
        }
    })
}

/// The screen `app` draws at `width` x `height`, as text lines.
pub fn screen_text(app: &App, width: u16, height: u16) -> Vec<String> {
    use ratatui::{buffer::Buffer, layout::Rect, widgets::Widget};
    let area = Rect::new(0, 0, width, height);
    let mut buf = Buffer::empty(area);
    app.render(area, &mut buf);
    (0..height)
        .map(|y| {
            let line: String = (0..width)
                .filter_map(|x| buf.cell((x, y)).map(|c| c.symbol().to_owned()))
                .collect();
            line.trim_end().to_owned()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    const TRACE: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/testdata/hot-chunks-6.12.trace"
    );

    /// Events after the first snapshot in one pass, and the pass's span.
    fn one_pass() -> (u64, f64) {
        let header = trace::Reader::open(Path::new(TRACE)).expect("trace").header;
        let agg = RefCell::new(Aggregator::new(Vec::new(), &header, "t".into()));
        let mut source = Source::Replay {
            path: TRACE.into(),
            speed: 0.0,
            duration: None,
            repeat: false,
        };
        runtime()
            .expect("runtime")
            .block_on(run_source(&mut source, &agg))
            .expect("replay");
        let f = agg.borrow_mut().publish(None, Focus::default());
        (f.events, f.elapsed_s)
    }

    /// Loops for `ms` of wall time at a speed that makes a pass ~25 ms.
    fn looped(cache_max: usize, ms: u64) -> (StopReason, u64, f64, u64) {
        let header = trace::Reader::open(Path::new(TRACE)).expect("trace").header;
        let agg = RefCell::new(Aggregator::new(Vec::new(), &header, "t".into()));
        let reason = runtime()
            .expect("runtime")
            .block_on(async {
                let mut sink = AggSink {
                    agg: &agg,
                    offset: 0,
                    last_ts: 0,
                };
                let deadline = tokio::time::Instant::now() + Duration::from_millis(ms);
                let r = replay_loop(
                    Path::new(TRACE),
                    1000.0,
                    Some(deadline),
                    cache_max,
                    &mut sink,
                )
                .await;
                r.map(|r| (r, sink.last_ts))
            })
            .expect("replay");
        let f = agg.borrow_mut().publish(None, Focus::default());
        (reason.0, f.events, f.elapsed_s, reason.1)
    }

    #[test]
    fn looped_passes_share_one_clock() {
        let start = tokio::time::Instant::now();
        // 2 s of trace into the loop at x4: due half a second after the start.
        assert_eq!(
            pass_origin(start, 7, 2_000_000_000, 4.0),
            Some((start + Duration::from_millis(500), 7))
        );
        assert_eq!(pass_origin(start, 7, 0, 4.0), Some((start, 7)));
        assert_eq!(pass_origin(start, 7, 1, 0.0), None, "unpaced");
        assert_eq!(
            pass_origin(start, 7, u64::MAX, 1e-300),
            None,
            "out of range"
        );
    }

    #[test]
    fn looped_replay_repeats_the_trace_with_time_moving_on() {
        let (events, span) = one_pass();
        assert!(events > 20_000 && span > 20.0, "{events} {span}");
        // From memory, and re-reading the file (a trace too long to keep).
        for cache_max in [LOOP_CACHE_ITEMS, 10] {
            let (reason, ev, elapsed, _) = looped(cache_max, 1500);
            assert_eq!(reason, StopReason::Duration);
            // Later passes count every record (their snapshots only move
            // time): more than two passes' worth, and event time went on.
            assert!(ev > 2 * events, "cache {cache_max}: {ev} events");
            assert!(elapsed > 2.0 * span, "cache {cache_max}: {elapsed} s");
            // Whole passes are the same stream shifted in time.
            let passes = elapsed / span;
            let per_pass = ev as f64 / passes;
            assert!(
                (per_pass / events as f64 - 1.0).abs() < 0.1,
                "cache {cache_max}: {per_pass} events per pass, {events} in one"
            );
        }
    }
}
