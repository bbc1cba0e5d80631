//! `numatrace top`: checks and attaches first (clear errors on the normal
//! screen), then runs the source and the aggregator on a background thread
//! and the draw loop on this one.
use std::{
    cell::RefCell,
    io::{IsTerminal, Write},
    process::ExitCode,
    sync::mpsc::{self, SyncSender},
    time::Duration,
};

use anyhow::{bail, Context, Result};
use numa_core::sink::Sink;
use numa_source::{signals::Signals, Replay, Source, StopReason};
use tokio::sync::watch;

use numa_tui::{
    action::UiEvent,
    agg::{Aggregator, Focus},
    app::App,
    frame::Frame,
    procfs,
    term::{self, Exit, Msg},
    view::screen_text,
};

use crate::cli::{ModelSel, TopArgs};
use numa_core::{
    decode::{Event, Snapshot},
    model::policy::{KernelDefaults, Policy},
    trace,
};
use numa_host::system;

/// Shadow models `top` can show at once (one column each in memory).
const MAX_MODELS: usize = 8;
/// Processes whose numa_maps are read, every [`PROCFS_EVERY`].
const RESIDENT_PROCS: usize = 16;
const PROCFS_EVERY: Duration = Duration::from_secs(5);

/// The shadow policies `--model` asks for, as many as `top` shows.
fn top_policies(a: &ModelSel, k: &KernelDefaults) -> Result<Vec<Box<dyn Policy>>> {
    let p = a.policies(k)?;
    if p.len() > MAX_MODELS {
        bail!("top shows at most {MAX_MODELS} models, {} given", p.len());
    }
    Ok(p)
}

/// Forwards the pipeline into the shared aggregator.
struct AggSink<'a>(&'a RefCell<Aggregator>);

impl Sink for AggSink<'_> {
    fn header(&mut self, h: &numa_core::trace::Header) -> Result<()> {
        self.0.borrow_mut().header(h)
    }

    fn event(&mut self, ev: &Event) -> Result<()> {
        self.0.borrow_mut().event(ev);
        Ok(())
    }

    fn snapshot(&mut self, s: &Snapshot) -> Result<()> {
        self.0.borrow_mut().snapshot(s);
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

fn reason_text(r: &StopReason) -> String {
    match r {
        StopReason::CommandExited(_) => "command exited".into(),
        other => other.describe(),
    }
}

/// Runs the source into the aggregator; a damaged trace's warning becomes
/// the end reason shown.
async fn run_source(
    source: &mut Source,
    until: Option<Duration>,
    agg: &RefCell<Aggregator>,
) -> Result<StopReason> {
    let finished = source.run(until, &mut [&mut AggSink(agg)]).await?;
    if let Some(w) = finished.warning {
        agg.borrow_mut().set_ended(w);
    }
    Ok(finished.reason)
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

/// When to read procfs: numa_maps every [`PROCFS_EVERY`], and at once for
/// a process that just became one of the busiest; maps on every tick.
struct ProcfsSchedule {
    next: tokio::time::Instant,
    polled: std::collections::HashSet<u32>,
}

impl ProcfsSchedule {
    fn tick(&mut self, agg: &RefCell<Aggregator>, focus: Focus, now: tokio::time::Instant) {
        let fresh = agg
            .borrow()
            .busiest(RESIDENT_PROCS)
            .iter()
            .any(|p| !self.polled.contains(p));
        if now >= self.next || fresh {
            self.next = now + PROCFS_EVERY;
            if self.polled.len() > 4096 {
                self.polled.clear();
            }
            self.polled.extend(agg.borrow().busiest(RESIDENT_PROCS));
            poll_procfs(agg, focus, true);
        } else {
            poll_procfs(agg, focus, false);
        }
    }
}

/// The source ended: a signal stops the loop; otherwise the last frame is
/// published with why it ended, and the UI told. Returns the reason and
/// whether to stop.
fn source_ended(
    r: StopReason,
    agg: &RefCell<Aggregator>,
    live: bool,
    focus: Focus,
    tx: &SyncSender<Msg>,
    exit_when_done: bool,
) -> (String, bool) {
    if let StopReason::Signal(s) = r {
        let _ = tx.send(Msg::Signal(s));
        return (r.describe(), true);
    }
    let why = reason_text(&r);
    let frame = {
        let mut a = agg.borrow_mut();
        if a.ended().is_none() {
            a.set_ended(why.clone());
        }
        a.publish(now_for(live), focus)
    };
    send(tx, frame);
    let _ = tx.send(Msg::Ended {
        exit: exit_when_done,
    });
    (why, false)
}

/// The background side: source + aggregator + publication ticks, until the
/// UI quits or a signal arrives.
async fn background(
    mut source: Source,
    until: Option<Duration>,
    agg: RefCell<Aggregator>,
    mut ctl: watch::Receiver<Control>,
    tx: SyncSender<Msg>,
    exit_when_done: bool,
) -> Result<Summary> {
    let live = source.is_live();
    let mut signals = Signals::new()?;
    let mut c = *ctl.borrow();
    let mut next_tick = tokio::time::Instant::now() + c.refresh;
    let mut procfs = ProcfsSchedule {
        next: tokio::time::Instant::now(),
        polled: std::collections::HashSet::new(),
    };
    let mut reason: Option<String> = None;
    {
        let pipeline = run_source(&mut source, until, &agg);
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
                    let (why, stop) = source_ended(r?, &agg, live, c.focus, &tx, exit_when_done);
                    reason = Some(why);
                    if stop {
                        break;
                    }
                }
                _ = &mut tick => {
                    let now = tokio::time::Instant::now();
                    next_tick = reschedule(next_tick, c.refresh, now);
                    tick.as_mut().reset(next_tick);
                    if live {
                        procfs.tick(&agg, c.focus, now);
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
                        show_focus(&agg, live, c.focus, &tx);
                    }
                }
                s = signals.recv() => {
                    let _ = tx.send(Msg::Signal(s));
                    reason = Some(StopReason::Signal(s).describe());
                    break;
                }
            }
        }
    }
    Ok(summary(&agg, c.focus, reason))
}

/// The next publication tick after `last`; a late one (a slow turn of the
/// loop) restarts the period from `now` instead of firing in a burst.
fn reschedule(
    last: tokio::time::Instant,
    refresh: Duration,
    now: tokio::time::Instant,
) -> tokio::time::Instant {
    let next = last + refresh;
    if next < now {
        now + refresh
    } else {
        next
    }
}

/// Shows the new selection's histogram/detail now, without waiting for the
/// next tick.
fn show_focus(agg: &RefCell<Aggregator>, live: bool, focus: Focus, tx: &SyncSender<Msg>) {
    if live {
        poll_procfs(agg, focus, false);
    }
    let frame = agg.borrow_mut().peek(focus);
    send(tx, frame);
}

/// The [`Summary`] from a last publication over the whole run.
fn summary(agg: &RefCell<Aggregator>, focus: Focus, reason: Option<String>) -> Summary {
    let a = agg.borrow_mut().publish(None, focus);
    Summary {
        events: a.events,
        elapsed_s: a.elapsed_s,
        ring_drops: a.warnings.ring_drops,
        evictions: a.warnings.evictions,
        reason: reason.unwrap_or_else(|| "quit".into()),
    }
}

/// Prepares the source and how long it runs: attaches the probes (live)
/// or opens the trace. Every refusal happens here, before the terminal
/// changes.
fn prepare(args: &TopArgs) -> Result<(Source, Option<Duration>, trace::Header)> {
    match &args.replay {
        Some(path) => {
            let header = trace::Reader::open(path)?.header;
            let replay = Replay {
                path: path.clone(),
                speed: if args.once { 0.0 } else { args.speed },
                repeat: args.repeat && !args.once,
            };
            Ok((Source::Replay(replay), args.probe.until(), header))
        }
        None => {
            let probes = numa_probe::session::attach(&args.probe.options())?;
            let header = numa_probe::session::header(&probes);
            // A one-shot snapshot of an unbounded live run covers 2 s.
            let until = match args.probe.until() {
                None if args.once && args.probe.command.is_empty() => Some(Duration::from_secs(2)),
                until => until,
            };
            Ok((
                args.probe.live(probes, Duration::from_secs(1)),
                until,
                header,
            ))
        }
    }
}

pub(crate) fn run(args: &TopArgs) -> Result<ExitCode> {
    if !args.once && !std::io::stdout().is_terminal() {
        bail!(
            "`numatrace top` draws on a terminal, but stdout is not one; \
             for scripts use `numatrace top --once --json` (one snapshot)"
        );
    }
    // Validate the model specs before attaching anything.
    let _ = top_policies(&args.sel, &KernelDefaults::default())?;
    let (source, until, header) = prepare(args)?;
    let k = KernelDefaults::from_host(&header.tunables, header.params.as_ref());
    let label = source_label(args);
    if args.once {
        return once(args, source, until, &header, &k, label);
    }
    let exit_when_done = args.probe.duration.is_some() || !args.probe.command.is_empty();
    let app = new_app(args);
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
            let policies = top_policies(&models, &k)?;
            let agg = RefCell::new(new_aggregator(policies, &header, label));
            numa_source::runtime()?.block_on(background(
                source,
                until,
                agg,
                ctl_rx,
                tx,
                exit_when_done,
            ))
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
    log::info!(
        "top: {} events over {:.1} s of event time; ring drops {}, map evictions {}; stopped: {why}",
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

/// The aggregator of a run of `header`, naming cgroups when the run is
/// this boot's.
fn new_aggregator(
    policies: Vec<Box<dyn numa_core::model::policy::Policy>>,
    header: &trace::Header,
    label: String,
) -> Aggregator {
    Aggregator::new(policies, header, label)
        .with_cgroup_paths(numa_host::cgroup::lookup(header.boot_id.as_deref()))
}

fn once(
    args: &TopArgs,
    mut source: Source,
    until: Option<Duration>,
    header: &trace::Header,
    k: &KernelDefaults,
    label: String,
) -> Result<ExitCode> {
    let live = source.is_live();
    let agg = RefCell::new(new_aggregator(top_policies(&args.sel, k)?, header, label));
    let reason = numa_source::runtime()?.block_on(run_source(&mut source, until, &agg))?;
    if live {
        poll_procfs(&agg, Focus::default(), true);
    }
    let mut a = agg.borrow_mut();
    a.set_ended(reason_text(&reason));
    let frame = a.publish(now_for(live), Focus::default());
    let mut out = std::io::stdout().lock();
    // A running promoter, as the header line shows it (live and replay alike:
    // it is this host's promoter, not the trace's).
    let promoter = numa_host::promoter_state::Source::from_env().read();
    if args.json {
        let mut value = serde_json::to_value(&frame)?;
        if let Some(obj) = value.as_object_mut() {
            obj.insert("promoter".into(), promoter_json(&promoter)?);
        }
        serde_json::to_writer_pretty(&mut out, &value)?;
        writeln!(out)?;
    } else {
        let mut app = new_app(args);
        app.promoter = Some(promoter);
        app.update(numa_tui::action::Action::Sample(Box::new(frame)));
        for line in screen_text(&app, 120, 40) {
            writeln!(out, "{line}")?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The UI state `args` start with.
fn new_app(args: &TopArgs) -> App {
    let mut app = App::new(Duration::from_secs_f64(args.interval));
    app.by_cgroup = args.by == Some(crate::cli::StatsBy::Cgroup);
    app
}

/// `{"running": true, "state": {...}}` or `{"running": false, "reason": "..."}`.
fn promoter_json(reading: &numa_host::promoter_state::Reading) -> Result<serde_json::Value> {
    use numa_host::promoter_state::Reading;
    Ok(match reading {
        Reading::Running(state) => {
            serde_json::json!({"running": true, "state": serde_json::to_value(state)?})
        }
        Reading::NotRunning(why) => {
            serde_json::json!({"running": false, "reason": why.to_string()})
        }
    })
}
