//! The live source: the probes' ring buffer, drained into the sinks, with a
//! counter snapshot at the start, every `snapshot_every` and at the end.
use std::{os::fd::AsRawFd, sync::Arc, time::Duration};

use anyhow::{Context, Result};
use aya::maps::{MapData, RingBuf};
use numa_core::{
    decode::{self, Event, RecordHistograms, Snapshot},
    sink::Sink,
    stamping::{Item, Stamper},
};
use numa_probe::{
    load::{BpfLog, Probes},
    session,
};
use tokio::{io::unix::AsyncFd, process::Child};

use crate::{dispatch, dispatch_snapshot, signals::Signals, StopReason};

/// How often the live pipeline drains the ring: the probes wake it only
/// when a quarter of the ring is pending (see `emit` in numa-ebpf).
const RING_FLUSH_EVERY: Duration = Duration::from_millis(20);
/// Records one drain hands on at most: records can arrive faster than the
/// sinks take them, and the loop must get back to its timers, the
/// deadline and the stop signals (a drain that stops early leaves the
/// ring readable, so the next turn of the loop goes on draining).
const DRAIN_MAX_RECORDS: u32 = 4096;
/// Time one drain spends at most, for slow sinks; the clock is read once
/// every [`DRAIN_CLOCK_EVERY`] records.
const DRAIN_MAX_TIME: Duration = Duration::from_millis(20);
const DRAIN_CLOCK_EVERY: u32 = 256;
/// How long the drain after a run's end may go on when records keep
/// coming: the run stops even under a flood.
const FINAL_DRAIN_MAX_TIME: Duration = Duration::from_secs(1);

/// What a live run does besides reading the probes.
#[derive(Debug, Clone)]
pub struct LiveOptions {
    /// Run this command while attached and stop when it exits.
    pub command: Vec<String>,
    /// How often counters and histograms are read.
    pub snapshot_every: Duration,
    /// Stop when this says why (looked at every 100 ms, as the ring is
    /// drained).
    pub stop_when: Option<StopWhen>,
}

/// A reason to end a live run that another part of the command sees (the
/// promoter's mover: every process it serves has exited): None while the
/// run should go on, else the reason, which the run ends with.
#[derive(Clone)]
pub struct StopWhen(pub Arc<dyn Fn() -> Option<String> + Send + Sync>);

impl std::fmt::Debug for StopWhen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StopWhen(..)")
    }
}

/// Where ring records come from: the probes' ring buffer (a fake in
/// tests). The fd polls readable when records are pending.
///
/// # Safety
///
/// `as_raw_fd` returns the same open file descriptor for as long as the
/// value lives (the runtime polls it).
pub(crate) unsafe trait Records: AsRawFd {
    /// Hands the next record to `f`; None when none is pending.
    fn next_record(&mut self, f: &mut dyn FnMut(&[u8]) -> Result<()>) -> Option<Result<()>>;
}

// SAFETY: the RingBuf owns its map fd and keeps it open, unchanged, for as
// long as it lives.
unsafe impl Records for RingBuf<MapData> {
    fn next_record(&mut self, f: &mut dyn FnMut(&[u8]) -> Result<()>) -> Option<Result<()>> {
        let item = self.next()?;
        Some(f(&item))
    }
}

/// Whether a drain left the ring empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Drained {
    Empty,
    More,
}

/// The ring buffer, polled by the runtime, what it could not decode, the
/// stage that finds each fault's pass, and the histograms of the fault
/// records it handed on.
pub(crate) struct Ring<R: Records> {
    fd: AsyncFd<R>,
    decode_errors: u64,
    stamper: Stamper,
    hist: RecordHistograms,
    /// The programs' own log, emptied with every drain.
    log: Option<BpfLog>,
    /// Records of events after this time are not handed on: the final
    /// snapshot's, whose counters end the window (kswapd may still be
    /// demoting while the run stops).
    until_ns: u64,
}

impl Ring<RingBuf<MapData>> {
    fn of(probes: &mut Probes) -> Result<Self> {
        let stamper = Stamper::of(&probes.params);
        let mut ring = Ring::new(probes.take_events()?, stamper)?;
        ring.log = probes.take_log();
        Ok(ring)
    }
}

impl<R: Records> Ring<R> {
    /// `stamper`: the stamping stage for the kernel's folio access values.
    fn new(records: R, stamper: Stamper) -> Result<Ring<R>> {
        // SAFETY: `Records` promises an fd that stays open and unchanged
        // while the value lives, and the AsyncFd owns the value.
        let fd = unsafe { AsyncFd::register_with_interest(records, tokio::io::Interest::READABLE) }
            .map_err(std::io::Error::from)
            .context("polling the ring buffer")?;
        Ok(Ring {
            fd,
            decode_errors: 0,
            stamper,
            hist: RecordHistograms::default(),
            log: None,
            until_ns: u64::MAX,
        })
    }

    /// The probes' `snapshot`, in order with the records before it (it
    /// goes on with the histograms of the records handed on before it,
    /// which the probes leave to userspace).
    fn snapshot(&mut self, snapshot: Snapshot, sinks: &mut [&mut dyn Sink]) -> Result<()> {
        let hist = &mut self.hist;
        self.stamper
            .snapshot(snapshot, &mut |item| hand_on(item, hist, sinks))
    }

    /// The stream ended: what the stage still holds goes on.
    fn flush(&mut self, sinks: &mut [&mut dyn Sink]) -> Result<()> {
        let hist = &mut self.hist;
        self.stamper.flush(&mut |item| hand_on(item, hist, sinks))
    }

    fn drain_ring(
        ring: &mut R,
        errors: &mut u64,
        stamper: &mut Stamper,
        hist: &mut RecordHistograms,
        until_ns: u64,
        sinks: &mut [&mut dyn Sink],
    ) -> Result<Drained> {
        let mut decoded = |bytes: &[u8]| match decode::decode(bytes) {
            Ok(ev) if ev.ts_ns() > until_ns => Ok(()),
            Ok(ev) => stamper.event(ev, &mut |item| hand_on(item, hist, sinks)),
            Err(_) => {
                *errors += 1;
                Ok(())
            }
        };
        let start = std::time::Instant::now();
        for n in 1..=DRAIN_MAX_RECORDS {
            match ring.next_record(&mut decoded) {
                None => return Ok(Drained::Empty),
                Some(r) => r?,
            }
            if n % DRAIN_CLOCK_EVERY == 0 && start.elapsed() >= DRAIN_MAX_TIME {
                break;
            }
        }
        Ok(Drained::More)
    }

    /// Drains until the ring is empty or `limit` has passed.
    fn drain_for(&mut self, limit: Duration, sinks: &mut [&mut dyn Sink]) -> Result<Drained> {
        let start = std::time::Instant::now();
        loop {
            let d = self.drain(sinks)?;
            if d == Drained::Empty || start.elapsed() >= limit {
                return Ok(d);
            }
        }
    }

    fn drain(&mut self, sinks: &mut [&mut dyn Sink]) -> Result<Drained> {
        if let Some(log) = &mut self.log {
            log.flush();
        }
        Self::drain_ring(
            self.fd.get_mut(),
            &mut self.decode_errors,
            &mut self.stamper,
            &mut self.hist,
            self.until_ns,
            sinks,
        )
    }

    /// Waits until the probes wake the reader, then drains (one bounded
    /// drain: with records left, the ring stays readable).
    async fn readable(&mut self, sinks: &mut [&mut dyn Sink]) -> Result<()> {
        let mut guard = self.fd.readable_mut().await?;
        let drained = Self::drain_ring(
            guard.get_inner_mut(),
            &mut self.decode_errors,
            &mut self.stamper,
            &mut self.hist,
            self.until_ns,
            sinks,
        )?;
        if drained == Drained::Empty {
            guard.clear_ready();
        } else {
            drop(guard);
            // A ring that stays readable never makes this task wait, and
            // timers and signals are only delivered while the runtime polls
            // its drivers: hand it a turn before the next batch.
            tokio::task::yield_now().await;
        }
        Ok(())
    }
}

/// Hands one item of the stage on to the sinks.
fn hand_on(item: Item, hist: &mut RecordHistograms, sinks: &mut [&mut dyn Sink]) -> Result<()> {
    match item {
        Item::Event(ev) => {
            if let Event::Fault(f) = &ev {
                hist.add(f);
            }
            dispatch(sinks, &ev)
        }
        Item::Snapshot(s) => dispatch_snapshot(sinks, &hist.added_to(s)),
    }
}

fn spawn(command: &[String]) -> Result<Option<Child>> {
    let Some((prog, args)) = command.split_first() else {
        return Ok(None);
    };
    let mut cmd = tokio::process::Command::new(prog);
    cmd.args(args).kill_on_drop(true);
    die_with_parent(&mut cmd);
    let child = cmd.spawn().with_context(|| format!("starting {prog}"))?;
    Ok(Some(child))
}

/// The command gets SIGKILL when the thread that starts it ends, even when
/// numatrace itself is killed by SIGKILL and `kill_on_drop` never runs
/// (PR_SET_PDEATHSIG). A live run starts it on the thread that runs the
/// whole run, so it ends with the run or with numatrace.
fn die_with_parent(cmd: &mut tokio::process::Command) {
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: between fork and exec the closure calls only prctl and
    // getppid, both async-signal-safe, and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // Died before the prctl: nobody would send the signal.
            if libc::getppid() != parent {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

async fn exited(child: &mut Option<Child>) -> StopReason {
    match child.as_mut() {
        Some(c) => StopReason::CommandExited(c.wait().await.ok().and_then(|s| s.code())),
        None => std::future::pending().await,
    }
}

/// Test hook: the live pipeline panics this many seconds after attaching,
/// so a test can check what a crash leaves behind (nothing: no BPF object,
/// no state file). Not a flag, so it is in no `--help`.
pub(crate) const TEST_PANIC_ENV: &str = "NUMATRACE_TEST_PANIC_AFTER_S";

fn test_panic_after() -> Option<Duration> {
    let s: f64 = std::env::var(TEST_PANIC_ENV).ok()?.parse().ok()?;
    Duration::try_from_secs_f64(s).ok()
}

/// Runs the live pipeline until `until` has passed (None: no deadline), a
/// stop signal arrives or the command exits. Always ends with a drained
/// ring (drained for at most [`FINAL_DRAIN_MAX_TIME`] when records keep
/// coming) and a final snapshot.
pub(crate) async fn run(
    probes: &mut Probes,
    opts: &LiveOptions,
    until: Option<Duration>,
    sinks: &mut [&mut dyn Sink],
) -> Result<StopReason> {
    let mut ring = Ring::of(probes)?;
    // The first and the last snapshot bound every delta a report states:
    // they read the kernel's counters with nothing left per CPU.
    fold_vmstat();
    ring.snapshot(session::snapshot(probes)?, sinks)?;
    let mut child = spawn(&opts.command)?;
    let loop_opts = LoopOptions {
        snapshot_every: opts.snapshot_every,
        deadline: crate::deadline(until),
        panic_at: crate::deadline(test_panic_after()),
        stop_when: opts.stop_when.clone(),
    };
    let reason = pump(
        &mut ring,
        &mut || session::snapshot(probes),
        &mut child,
        &loop_opts,
        sinks,
    )
    .await?;
    if let Some(c) = child.as_mut() {
        if !matches!(reason, StopReason::CommandExited(_)) {
            let _ = c.start_kill();
        }
    }
    // The final snapshot is read first and the records up to it are handed
    // on before it: what the kernel still does meanwhile (kswapd) is in
    // neither.
    fold_vmstat();
    let last = session::snapshot(probes)?;
    ring.until_ns = last.ts_ns;
    if ring.drain_for(FINAL_DRAIN_MAX_TIME, sinks)? == Drained::More {
        log::warn!(
            "records were still arriving {} s after the stop; the rest are not counted",
            FINAL_DRAIN_MAX_TIME.as_secs()
        );
    }
    ring.snapshot(last, sinks)?;
    ring.flush(sinks)?;
    if ring.decode_errors > 0 {
        log::warn!("{} ring records could not be decoded", ring.decode_errors);
    }
    Ok(reason)
}

/// See [`numa_host::system::fold_vmstat`].
fn fold_vmstat() {
    if let Err(e) = numa_host::system::fold_vmstat() {
        log::debug!("/proc/sys/vm/stat_refresh: {e}: vmstat's node counters may lag");
    }
}

/// The live loop's timing.
struct LoopOptions {
    snapshot_every: Duration,
    deadline: Option<tokio::time::Instant>,
    /// See [`TEST_PANIC_ENV`].
    panic_at: Option<tokio::time::Instant>,
    stop_when: Option<StopWhen>,
}

/// Drains `ring` into the sinks and takes a `snapshot` every
/// `snapshot_every` until the deadline, a stop signal, the command's exit
/// or the stop condition.
async fn pump<R: Records>(
    ring: &mut Ring<R>,
    snapshot: &mut dyn FnMut() -> Result<Snapshot>,
    child: &mut Option<Child>,
    o: &LoopOptions,
    sinks: &mut [&mut dyn Sink],
) -> Result<StopReason> {
    let mut signals = Signals::new()?;
    let mut tick = tokio::time::interval(o.snapshot_every);
    tick.tick().await;
    // The probes wake this reader only when a quarter of the ring is
    // pending: drain on a timer, so records wait at most one period, and
    // before every snapshot, so counters and events agree.
    let mut flush = tokio::time::interval(RING_FLUSH_EVERY);
    flush.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    flush.tick().await;
    Ok(loop {
        tokio::select! {
            r = ring.readable(sinks) => r?,
            _ = flush.tick() => {
                ring.drain(sinks)?;
                if let Some(why) = o.stop_when.as_ref().and_then(|s| (s.0)()) {
                    break StopReason::Condition(why);
                }
            }
            _ = tick.tick() => {
                ring.drain(sinks)?;
                ring.snapshot(snapshot()?, sinks)?;
            }
            _ = crate::sleep_until(o.deadline) => break StopReason::Duration,
            s = signals.recv() => break StopReason::Signal(s),
            r = exited(child) => break r,
            _ = crate::sleep_until(o.panic_at) => panic!("{TEST_PANIC_ENV}: the test panic"),
        }
    })
}

#[cfg(test)]
mod tests {
    use std::{
        os::{fd::RawFd, unix::net::UnixStream},
        sync::mpsc,
    };

    use numa_core::decode::{fixtures::fault, Event};
    use numa_ebpf_common::Outcome;

    use super::*;

    /// A ring that never empties: every read finds another fault record,
    /// and its fd (a socket with a byte never read) always polls readable.
    struct Flood {
        readable: UnixStream,
        _peer: UnixStream,
        record: Vec<u8>,
    }

    impl Flood {
        fn new() -> Flood {
            use std::io::Write;
            let (readable, mut peer) = UnixStream::pair().expect("socket pair");
            peer.write_all(b"!").expect("make the socket readable");
            let ev = Event::Fault(fault(1, 1, 10, Outcome::PromoteHot));
            Flood {
                readable,
                _peer: peer,
                record: decode::raw_bytes(&ev).to_vec(),
            }
        }
    }

    impl AsRawFd for Flood {
        fn as_raw_fd(&self) -> RawFd {
            self.readable.as_raw_fd()
        }
    }

    // SAFETY: the socket is owned by the Flood and lives as long as it.
    unsafe impl Records for Flood {
        fn next_record(&mut self, f: &mut dyn FnMut(&[u8]) -> Result<()>) -> Option<Result<()>> {
            Some(f(&self.record))
        }
    }

    const PDEATHSIG_OUT: &str = "NUMATRACE_TEST_PDEATHSIG_OUT";

    /// The body of the process `the_command_dies_with_a_killed_numatrace`
    /// starts (the test binary again, with [`PDEATHSIG_OUT`] set): starts
    /// `sleep 60` as a live run's command does, writes its pid to `out`,
    /// and waits to be killed.
    fn pdeathsig_child(out: std::ffi::OsString) {
        let rt = crate::runtime().expect("runtime");
        let child = rt
            .block_on(async { spawn(&["sleep".to_owned(), "60".to_owned()]) })
            .expect("spawn")
            .expect("a command");
        let pid = child.id().expect("a pid");
        std::fs::write(out, pid.to_string()).expect("write the pid");
        std::thread::sleep(Duration::from_secs(60));
        drop(child);
    }

    /// Whether `pid` still runs (a zombie, dead but not yet reaped, does not).
    fn running(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| Some(s.get(s.rfind(')')? + 2..)?.starts_with(['Z', 'X'])))
            .is_some_and(|dead| !dead)
    }

    #[test]
    fn the_command_dies_with_a_killed_numatrace() {
        if let Some(out) = std::env::var_os(PDEATHSIG_OUT) {
            return pdeathsig_child(out);
        }
        let out = std::env::temp_dir().join(format!("numatrace-pdeathsig-{}", std::process::id()));
        let _ = std::fs::remove_file(&out);
        let mut helper = std::process::Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "--exact",
                "live::tests::the_command_dies_with_a_killed_numatrace",
            ])
            .env(PDEATHSIG_OUT, &out)
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("starting the helper");
        let start = std::time::Instant::now();
        let pid = loop {
            if let Some(pid) = std::fs::read_to_string(&out)
                .ok()
                .and_then(|s| s.parse::<u32>().ok())
            {
                break pid;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "the helper wrote no pid"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        let _ = std::fs::remove_file(&out);
        assert!(running(pid), "the command did not start");
        // SIGKILL: no destructor runs, only the kernel can end the command.
        helper.kill().expect("SIGKILL the helper");
        helper.wait().expect("reap the helper");
        let killed = std::time::Instant::now();
        while running(pid) && killed.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let survived = running(pid);
        if survived {
            // SAFETY: kill(2) on the pid of the sleep this test started.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
        assert!(!survived, "the command outlived a SIGKILLed numatrace");
    }

    /// A ring with nothing in it: its fd never polls readable.
    struct Quiet {
        fd: UnixStream,
        _peer: UnixStream,
    }

    impl AsRawFd for Quiet {
        fn as_raw_fd(&self) -> RawFd {
            self.fd.as_raw_fd()
        }
    }

    // SAFETY: the socket is owned by the Quiet and lives as long as it.
    unsafe impl Records for Quiet {
        fn next_record(&mut self, _f: &mut dyn FnMut(&[u8]) -> Result<()>) -> Option<Result<()>> {
            None
        }
    }

    #[test]
    fn a_stop_condition_ends_the_run_with_its_reason() {
        let rt = crate::runtime().expect("runtime");
        let (fd, peer) = UnixStream::pair().expect("socket pair");
        let t0 = std::time::Instant::now();
        let reason = rt
            .block_on(async {
                let mut ring =
                    Ring::new(Quiet { fd, _peer: peer }, Stamper::new(DEBIAN_CPUPID_MASK))?;
                let o = LoopOptions {
                    snapshot_every: Duration::from_secs(1),
                    deadline: crate::deadline(Some(Duration::from_secs(10))),
                    panic_at: None,
                    stop_when: Some(StopWhen(Arc::new(move || {
                        (t0.elapsed() > Duration::from_millis(200)).then(|| "done".to_owned())
                    }))),
                };
                pump(
                    &mut ring,
                    &mut || Ok(Snapshot::default()),
                    &mut None,
                    &o,
                    &mut [&mut Count::default()],
                )
                .await
            })
            .expect("the live loop");
        assert_eq!(reason, StopReason::Condition("done".into()));
        assert_eq!(reason.describe(), "done");
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    }

    /// LAST_CPUPID_MASK on Debian's kernels.
    const DEBIAN_CPUPID_MASK: u32 = (1 << 21) - 1;

    #[derive(Default)]
    struct Count {
        events: u64,
        snapshots: u64,
        last_snapshot: Option<Snapshot>,
    }

    impl Sink for Count {
        fn event(&mut self, _: &Event) -> Result<()> {
            self.events += 1;
            Ok(())
        }
        fn snapshot(&mut self, s: &Snapshot) -> Result<()> {
            self.snapshots += 1;
            self.last_snapshot = Some(s.clone());
            Ok(())
        }
    }

    /// The probes leave the records they send out of their histograms:
    /// a snapshot's are the kernel's plus the records read.
    #[test]
    fn snapshots_count_the_records_read_in_their_histograms() {
        use numa_ebpf_common::{HistEntry, HIST_SLOTS};
        let rt = crate::runtime().expect("runtime");
        let h = HistEntry::of(&fault(1, 1, 10, Outcome::PromoteHot)).expect("a stamped fault");
        let slot = h.slot(h.latency_ns);
        let (read, s) = rt
            .block_on(async {
                let mut ring = Ring::new(Flood::new(), Stamper::new(DEBIAN_CPUPID_MASK))?;
                let mut count = Count::default();
                ring.drain(&mut [&mut count])?;
                let mut kernel = Snapshot {
                    hist_latency: vec![0; HIST_SLOTS],
                    ..Snapshot::default()
                };
                // Five faults the probes counted themselves (sampled out).
                kernel.hist_latency[slot] = 5;
                ring.snapshot(kernel, &mut [&mut count])?;
                ring.flush(&mut [&mut count])?;
                let s = count.last_snapshot.take().context("a snapshot")?;
                anyhow::Ok((count.events, s))
            })
            .expect("a drain");
        assert!(read > 0);
        assert_eq!(s.hist_latency[slot], 5 + read);
        assert_eq!(s.hist_latency.iter().sum::<u64>(), 5 + read);
        assert_eq!(s.hist_sum[h.sum_slot()], read * h.latency_ns);
    }

    #[test]
    fn a_ring_that_never_empties_leaves_time_for_snapshots_and_the_deadline() {
        let (tx, rx) = mpsc::channel();
        // The loop runs on a thread of its own: without a bounded drain it
        // never returns, and the test must still end.
        std::thread::spawn(move || {
            let rt = crate::runtime().expect("runtime");
            let result = rt.block_on(async {
                let mut ring = Ring::new(Flood::new(), Stamper::new(DEBIAN_CPUPID_MASK))?;
                let mut count = Count::default();
                let o = LoopOptions {
                    snapshot_every: Duration::from_millis(50),
                    deadline: crate::deadline(Some(Duration::from_millis(400))),
                    panic_at: None,
                    stop_when: None,
                };
                let reason = pump(
                    &mut ring,
                    &mut || Ok(Snapshot::default()),
                    &mut None,
                    &o,
                    &mut [&mut count],
                )
                .await?;
                let last = ring.drain_for(Duration::from_millis(50), &mut [&mut count])?;
                assert_eq!(last, Drained::More, "a flood never empties");
                anyhow::Ok((reason, count.events, count.snapshots))
            });
            let _ = tx.send(result.map_err(|e| format!("{e:#}")));
        });
        let (reason, events, snapshots) = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("the live loop is stuck draining a flooded ring")
            .expect("the live loop failed");
        println!("flooded ring, 400 ms: {events} records, {snapshots} snapshots");
        assert_eq!(reason, StopReason::Duration);
        assert!(events > 0, "no records delivered");
        assert!(snapshots >= 3, "{snapshots} snapshots in 400 ms at 50 ms");
    }
}
