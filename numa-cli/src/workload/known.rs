//! `numatrace workload known`: a workload whose hot pages are known by
//! construction, so that the test bed's truth (every access, per frame)
//! can be checked against it and policies judged on it. Steady chunks are
//! visited every `--revisit-ms`, burst chunks back to back for
//! `--burst-ms` once each, the rare page once every `--rare-s`, and the
//! cold mapping never after placement. The log names each visit and every
//! page's frame as placed, so a true access at a slow frame is told from
//! its page and its time.
use std::os::unix::fs::FileExt as _;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use numa_core::rng::Rng;
use numa_core::workload::{FrameRun, KnownLog, Part, Visit};
use numa_host::clock::monotonic_ns;

use super::{dram_filler, named_on_nodes, Pages, Region, MIB, PAGE};
use crate::cli::KnownArgs;

pub(crate) fn run(a: &KnownArgs) -> Result<ExitCode> {
    check(a)?;
    let (slow_node, dram_node) = named_on_nodes(c"known", a.slow_node, a.dram_node)?;
    let _dram = dram_filler(a.dram_mb, false, dram_node)?;
    let chunk_pages = a.chunk_mb * (MIB / PAGE) as u64;
    let rare = u64::from(a.rare_s > 0);
    let visited_pages = (a.steady_chunks + a.burst_chunks) * chunk_pages + rare;
    let (visited, cold) = placed(visited_pages as usize * PAGE, a.cold_mb, slow_node)?;
    let mut log = KnownLog {
        pid: std::process::id(),
        slow_node,
        chunk_pages,
        steady_chunks: a.steady_chunks,
        burst_chunks: a.burst_chunks,
        rare_page: (rare == 1).then_some(visited_pages - 1),
        slow_vma: visited.span(),
        cold_vma: cold.as_ref().map(Region::span),
        slow_frames: frames(&visited)?,
        cold_frames: cold.as_ref().map(frames).transpose()?.unwrap_or_default(),
        placed_ns: monotonic_ns(),
        start_ns: 0,
        end_ns: 0,
        visits: Vec::new(),
        visits_not_logged: 0,
        accesses: 0,
    };
    Shape::new(a, Pages::of(&visited, false), chunk_pages).run(&mut log);
    crate::write_output(Some(&a.log), &serde_json::to_vec(&log)?)?;
    Ok(ExitCode::SUCCESS)
}

/// The flags' limits that span two flags.
fn check(a: &KnownArgs) -> Result<()> {
    ensure!(
        a.steady_chunks + a.burst_chunks > 0 || a.rare_s > 0,
        "nothing to visit: ask for --steady-chunks, --burst-chunks or --rare-s"
    );
    ensure!(
        a.burst_chunks == 0 || a.burst_every_ms >= a.burst_ms,
        "--burst-every-ms {} is shorter than --burst-ms {}: bursts would overlap; \
         make --burst-every-ms at least --burst-ms",
        a.burst_every_ms,
        a.burst_ms
    );
    let mb = (a.steady_chunks + a.burst_chunks) * a.chunk_mb;
    ensure!(
        mb <= crate::cli::ranges::MAX_WORKLOAD_MB,
        "the chunks come to {mb} MiB, more than {} MiB: fewer chunks or smaller ones",
        crate::cli::ranges::MAX_WORKLOAD_MB
    );
    Ok(())
}

/// The visited mapping of `len` bytes and the cold one of `cold_mb` MiB,
/// apart as VMAs, each populated on `node` in one call and released to the
/// default policy.
fn placed(len: usize, cold_mb: u64, node: u32) -> Result<(Region, Option<Region>)> {
    if cold_mb == 0 {
        let r = Region::fenced_one(len, false)?;
        r.populate_on(node, 0..r.len)?;
        return Ok((r, None));
    }
    let (r, cold) = Region::pair(len, cold_mb as usize * MIB, false)?;
    cold.populate_on(node, 0..cold.len)?;
    r.populate_on(node, 0..r.len)?;
    Ok((r, Some(cold)))
}

/// Entries of /proc/self/pagemap read at once.
const PAGEMAP_BATCH: usize = 1 << 16;

/// The frame of each page of `r`, as runs, from /proc/self/pagemap.
fn frames(r: &Region) -> Result<Vec<FrameRun>> {
    let f = std::fs::File::open("/proc/self/pagemap").context("/proc/self/pagemap")?;
    let pages = r.len / PAGE;
    let first = r.ptr as u64 / PAGE as u64;
    let mut runs = Vec::new();
    let mut buf = vec![0u8; PAGEMAP_BATCH.min(pages) * 8];
    for start in (0..pages).step_by(PAGEMAP_BATCH) {
        let n = PAGEMAP_BATCH.min(pages - start);
        let bytes = &mut buf[..n * 8];
        f.read_exact_at(bytes, (first + start as u64) * 8)
            .context("reading /proc/self/pagemap")?;
        for (i, e) in bytes.chunks_exact(8).enumerate() {
            let pfn = pfn_of(e.try_into().unwrap_or_default())?;
            FrameRun::push(&mut runs, (start + i) as u64, pfn);
        }
    }
    Ok(runs)
}

/// A pagemap entry's frame: every page was populated, so one not present
/// is an error, and so is a frame the kernel hides.
fn pfn_of(entry: [u8; 8]) -> Result<u64> {
    let e = u64::from_le_bytes(entry);
    ensure!(
        e >> 63 == 1,
        "a populated page is not present in /proc/self/pagemap"
    );
    let pfn = e & ((1 << 55) - 1);
    ensure!(
        pfn != 0,
        "/proc/self/pagemap hides the frames: reading them needs CAP_SYS_ADMIN (run as root)"
    );
    Ok(pfn)
}

/// The access phase's timetable, in CLOCK_MONOTONIC ns.
struct Shape<'a> {
    pages: Pages<'a>,
    chunk_pages: u64,
    steady: u64,
    bursts: u64,
    revisit: u64,
    burst: u64,
    burst_every: u64,
    /// ns between touches of the rare page (when the log has one).
    rare_every: u64,
    accesses: u64,
    duration: u64,
    rng: Rng,
    /// Accesses made in chunk visits.
    made: u64,
}

impl<'a> Shape<'a> {
    fn new(a: &KnownArgs, pages: Pages<'a>, chunk_pages: u64) -> Shape<'a> {
        const MS: u64 = 1_000_000;
        Shape {
            pages,
            chunk_pages,
            steady: a.steady_chunks,
            bursts: a.burst_chunks,
            revisit: a.revisit_ms * MS,
            burst: a.burst_ms * MS,
            burst_every: a.burst_every_ms * MS,
            rare_every: a.rare_s * 1000 * MS,
            accesses: a.accesses,
            duration: (a.duration * 1e9) as u64,
            rng: Rng::new(a.seed),
            made: 0,
        }
    }

    /// Runs the access phase, logging each visit.
    fn run(mut self, log: &mut KnownLog) {
        let t0 = monotonic_ns();
        log.start_ns = t0;
        let end = t0 + self.duration;
        // Steady chunks fall due in turn, spread over one revisit.
        let mut steady_due: Vec<u64> = (0..self.steady)
            .map(|c| t0 + c * self.revisit / self.steady)
            .collect();
        let mut rare_due = log.rare_page.map(|_| t0);
        let mut burst: Option<Visit> = None;
        loop {
            let now = monotonic_ns();
            if now >= end {
                break;
            }
            let active = self.burst_at(now - t0);
            if burst.is_some_and(|b| Some(b.part) != active) {
                record(log, burst.take());
            }
            if let Some(part @ Part::Burst(chunk)) = active {
                let b = burst.get_or_insert(Visit {
                    part,
                    start_ns: now,
                    end_ns: now,
                });
                self.visit(chunk);
                b.end_ns = monotonic_ns();
            }
            self.steady_visits(log, &mut steady_due, now);
            if let Some(due) = rare_due.as_mut().filter(|due| **due <= now) {
                self.rare_touch(log);
                *due += self.rare_every;
            }
            if active.is_none() {
                let next = self.next_due(t0, now, &steady_due, rare_due);
                std::thread::sleep(Duration::from_nanos(next.min(end).saturating_sub(now)));
            }
        }
        record(log, burst);
        log.accesses += self.made;
        log.end_ns = monotonic_ns();
    }

    /// Visits every steady chunk due by `now`, each then due a revisit on.
    fn steady_visits(&mut self, log: &mut KnownLog, steady_due: &mut [u64], now: u64) {
        for (c, due) in steady_due.iter_mut().enumerate() {
            if *due <= now {
                let start_ns = monotonic_ns();
                self.visit(c as u64);
                let v = Visit {
                    part: Part::Steady(c as u64),
                    start_ns,
                    end_ns: monotonic_ns(),
                };
                record(log, Some(v));
                *due = (*due + self.revisit).max(now);
            }
        }
    }

    /// One access to the rare page.
    fn rare_touch(&mut self, log: &mut KnownLog) {
        let Some(page) = log.rare_page else { return };
        let start_ns = monotonic_ns();
        // SAFETY: the rare page is the visited mapping's last.
        unsafe { self.pages.bump(page as usize) };
        let v = Visit {
            part: Part::Rare,
            start_ns,
            end_ns: monotonic_ns(),
        };
        record(log, Some(v));
        log.accesses += 1;
    }

    /// The burst chunk hot at `t` ns into the phase, if any.
    fn burst_at(&self, t: u64) -> Option<Part> {
        let b = t / self.burst_every;
        (b < self.bursts && t % self.burst_every < self.burst)
            .then_some(Part::Burst(self.steady + b))
    }

    /// When something next falls due after `now`: a steady chunk, the
    /// next burst, or the rare page.
    fn next_due(&self, t0: u64, now: u64, steady_due: &[u64], rare_due: Option<u64>) -> u64 {
        let next_burst = {
            let b = (now - t0) / self.burst_every + 1;
            (b < self.bursts).then_some(t0 + b * self.burst_every)
        };
        steady_due
            .iter()
            .copied()
            .chain(next_burst)
            .chain(rare_due)
            .min()
            .unwrap_or(u64::MAX)
    }

    /// `--accesses` random accesses to chunk `chunk`.
    fn visit(&mut self, chunk: u64) {
        for _ in 0..self.accesses {
            let page = chunk * self.chunk_pages + self.rng.next_u64() % self.chunk_pages;
            // SAFETY: chunk < steady + burst chunks, so the page lies in
            // the visited mapping.
            unsafe { self.pages.bump(page as usize) };
        }
        self.made += self.accesses;
    }
}

/// Logs `visit`, or counts it once the log holds all it may.
fn record(log: &mut KnownLog, visit: Option<Visit>) {
    let Some(v) = visit else { return };
    if log.visits.len() < KnownLog::MAX_VISITS {
        log.visits.push(v);
    } else {
        log.visits_not_logged += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known(args: &[&str]) -> KnownArgs {
        let argv = ["numatrace", "workload", "known", "--log", "l"];
        match crate::cli::ranges::try_parse_from(argv.iter().chain(args)).map(|c| c.command) {
            Ok(crate::cli::Command::Workload(crate::cli::Workload::Known(a))) => a,
            other => panic!("not known: {other:?}"),
        }
    }

    fn log_of(a: &KnownArgs) -> (KnownLog, Region) {
        let pages = (a.steady_chunks + a.burst_chunks) * 256 + 1;
        let r = Region::new(pages as usize * PAGE, false).expect("a mapping");
        let mut log = KnownLog {
            chunk_pages: 256,
            steady_chunks: a.steady_chunks,
            burst_chunks: a.burst_chunks,
            rare_page: Some(pages - 1),
            slow_vma: r.span(),
            ..KnownLog::default()
        };
        Shape::new(a, Pages::of(&r, false), 256).run(&mut log);
        (log, r)
    }

    #[test]
    fn bursts_come_once_in_their_slot_and_steady_chunks_every_revisit() {
        let a = known(&[
            "--steady-chunks",
            "2",
            "--revisit-ms",
            "100",
            "--burst-chunks",
            "2",
            "--burst-ms",
            "150",
            "--burst-every-ms",
            "300",
            "--rare-s",
            "1",
            "--accesses",
            "50",
            "--duration",
            "0.9",
        ]);
        let (log, _r) = log_of(&a);
        let at = |v: &Visit| (v.start_ns - log.start_ns) / 1_000_000;
        let of = |p: Part| log.visits.iter().filter(move |v| v.part == p);
        for (b, chunk) in [(0, 2), (1, 3)] {
            let bursts: Vec<&Visit> = of(Part::Burst(chunk)).collect();
            assert_eq!(bursts.len(), 1, "{:?}", log.visits);
            let (start, end) = (at(bursts[0]), (bursts[0].end_ns - log.start_ns) / 1_000_000);
            assert!(
                start >= b * 300 && start < b * 300 + 20 && end <= b * 300 + 150 + 20,
                "burst {b}: {start} to {end} ms"
            );
        }
        for c in 0..2 {
            let n = of(Part::Steady(c)).count();
            assert!(
                (8..=10).contains(&n),
                "steady chunk {c}: {n} visits in 0.9 s"
            );
        }
        assert_eq!(of(Part::Rare).count(), 1);
        let chunk_visits = log.visits.len() as u64 - 1;
        assert!(log.accesses > chunk_visits * 50, "{}", log.accesses);
        assert!(log.end_ns >= log.start_ns + 900_000_000);
    }

    #[test]
    fn overlapping_bursts_and_nothing_to_visit_are_refused() {
        let e = check(&known(&["--burst-ms", "500", "--burst-every-ms", "400"]))
            .expect_err("overlapping bursts");
        assert!(
            e.to_string().contains("--burst-every-ms 400 is shorter"),
            "{e}"
        );
        let e = check(&known(&[
            "--steady-chunks",
            "0",
            "--burst-chunks",
            "0",
            "--rare-s",
            "0",
        ]))
        .expect_err("nothing to visit");
        assert!(e.to_string().contains("nothing to visit"), "{e}");
    }

    #[test]
    fn a_mapping_s_frames_are_read_as_runs() {
        let r = Region::new(64 * PAGE, false).expect("a mapping");
        r.touch_all();
        let runs = frames(&r).expect("root reads frames");
        assert_eq!(runs.iter().map(|r| r.pages).sum::<u64>(), 64);
        assert!(runs
            .windows(2)
            .all(|w| w[0].first_page + w[0].pages == w[1].first_page));
        let split = FrameRun::runs([100, 101, 102, 103, 104, 200]);
        assert_eq!(split.len(), 2);
    }
}
