//! `numatrace workload hot-chunks`: the pghot RFC's microbenchmark, so that the
//! test bed (and a user on an emulated CXL box) has a workload that makes
//! the kernel's latency threshold reject hot pages.
//!
//! Memory is placed with mbind(2) on the slow node, touched, then its policy
//! reset to the default so NUMA balancing may promote it.
//!
//! With `--procs`, `--threads` and `--shared-mb` the access phase takes the
//! shapes of production: forked processes, threads of one process, and a
//! shared mapping all the processes touch.
use std::{
    io::Write,
    marker::PhantomData,
    panic::AssertUnwindSafe,
    process::ExitCode,
    sync::{
        atomic::{AtomicU8, Ordering},
        Condvar, Mutex, MutexGuard, PoisonError,
    },
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};

use numa_core::topology::Node;
use numa_core::workload::Summary;

use crate::cli::HotChunksArgs;
use numa_core::rng::{splitmix64, Rng};
use numa_host::system;

const PAGE: usize = 4096;
const MIB: usize = 1 << 20;

pub(crate) mod known;
pub(crate) const MPOL_DEFAULT: libc::c_long = 0;
pub(crate) const MPOL_BIND: libc::c_long = 2;
/// Gives a policy MPOL_F_MOF, which the NUMA scanner asks of a VMA.
const MPOL_F_NUMA_BALANCING: libc::c_long = libc::MPOL_F_NUMA_BALANCING as libc::c_long;
/// Stack of an access thread (`--threads`): it only draws and touches.
const ACCESS_THREAD_STACK: usize = 64 * 1024;

/// An anonymous mapping, unmapped on drop.
pub(crate) struct Region {
    pub(crate) ptr: *mut u8,
    pub(crate) len: usize,
}

impl Region {
    pub(crate) fn new(len: usize, thp: bool) -> Result<Self> {
        let r = Region::map(len, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS)?;
        r.advise_thp(thp);
        Ok(r)
    }

    /// A shared anonymous mapping (shmem), which forked children map too.
    fn shared(len: usize, thp: bool) -> Result<Self> {
        let r = Region::map(len, libc::MAP_SHARED | libc::MAP_ANONYMOUS)?;
        r.advise_thp(thp);
        Ok(r)
    }

    /// Asks for huge pages or forbids them: MADV_HUGEPAGE is what the
    /// `madvise` settings of transparent_hugepage/enabled (private memory)
    /// and `advise` of shmem_enabled (shared) wait for.
    fn advise_thp(&self, thp: bool) {
        let advice = if thp {
            libc::MADV_HUGEPAGE
        } else {
            libc::MADV_NOHUGEPAGE
        };
        // SAFETY: madvise of our own mapping.
        let rc = unsafe { libc::madvise(self.ptr.cast(), self.len, advice) };
        if rc != 0 && thp {
            log::warn!(
                "--thp: madvise(MADV_HUGEPAGE) failed ({}): the mapping stays on 4K pages",
                std::io::Error::last_os_error()
            );
        }
    }

    fn map(len: usize, flags: libc::c_int) -> Result<Self> {
        // SAFETY: an anonymous mapping placed by the kernel; the result is
        // checked.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error()).context(format!("mmap {len} bytes"));
        }
        Ok(Region {
            ptr: ptr.cast(),
            len,
        })
    }

    pub(crate) fn mbind(&self, mode: libc::c_long, node: Option<u32>) -> Result<()> {
        self.mbind_mask(mode, &NodeMask::of(node))
            .with_context(|| format!("mbind(mode {mode}, node {node:?})"))
    }

    fn mbind_mask(&self, mode: libc::c_long, mask: &NodeMask) -> std::io::Result<()> {
        let (mask_ptr, maxnode) = mask.arg();
        // SAFETY: mbind on our own mapping with a valid mask buffer.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_mbind,
                self.ptr,
                self.len,
                mode,
                mask_ptr,
                maxnode,
                0u32,
            )
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// Leaves a forked child an empty mapping in the place of this one,
    /// instead of its pages shared copy-on-write: the child's first write
    /// to such a page would copy it to the child's local node.
    fn wipe_on_fork(&self) -> Result<()> {
        // SAFETY: madvise of our own private anonymous mapping.
        let rc = unsafe { libc::madvise(self.ptr.cast(), self.len, libc::MADV_WIPEONFORK) };
        if rc != 0 {
            return Err(std::io::Error::last_os_error())
                .context("madvise(MADV_WIPEONFORK): Linux 4.14 or later is needed");
        }
        Ok(())
    }

    pub(crate) fn touch_all(&self) {
        for off in (0..self.len).step_by(PAGE) {
            // SAFETY: off < len, inside our mapping.
            unsafe { self.ptr.add(off).write_volatile(1) };
        }
    }

    /// A mapping of `len` bytes placed on `node` and touched there, then
    /// with its policy reset to the default so NUMA balancing (or a
    /// move_pages call) may move it.
    pub(crate) fn placed_then_released(len: usize, thp: bool, node: u32) -> Result<Self> {
        let r = Region::new(len, thp)?;
        r.mbind(MPOL_BIND, Some(node))?;
        r.touch_all();
        r.mbind(MPOL_DEFAULT, None)?;
        Ok(r)
    }

    /// Two mappings of `first` and `second` bytes; see [`Region::fenced`].
    pub(crate) fn pair(first: usize, second: usize, thp: bool) -> Result<(Self, Self)> {
        let mut parts = Region::fenced(&[first, second], thp)?.into_iter();
        match (parts.next(), parts.next()) {
            (Some(a), Some(b)) => Ok((a, b)),
            _ => bail!("fenced mapping returned fewer than two parts"),
        }
    }

    /// Mappings of the given sizes fenced by inaccessible pages before,
    /// between and after them, so each stays one VMA of exactly its own
    /// range whatever the kernel would merge with its neighbours.
    pub(crate) fn fenced(sizes: &[usize], thp: bool) -> Result<Vec<Self>> {
        let total = sizes.iter().sum::<usize>() + (sizes.len() + 1) * PAGE;
        // The parts own their ranges from here on; the guard pages stay
        // mapped until the process exits.
        let whole = std::mem::ManuallyDrop::new(Region::new(total, thp)?);
        let mut parts = Vec::with_capacity(sizes.len());
        let mut off = 0;
        for &len in sizes {
            whole.protect_none(off)?;
            off += PAGE;
            // SAFETY: off + len lies inside the mapping, before its last guard.
            let ptr = unsafe { whole.ptr.add(off) };
            parts.push(Region { ptr, len });
            off += len;
        }
        whole.protect_none(off)?;
        Ok(parts)
    }

    /// One mapping of `len` bytes; see [`Region::fenced`].
    fn fenced_one(len: usize, thp: bool) -> Result<Self> {
        Region::fenced(&[len], thp)?
            .pop()
            .context("fenced mapping returned no part")
    }

    fn protect_none(&self, off: usize) -> Result<()> {
        // SAFETY: mprotect of a page inside our own mapping.
        let rc = unsafe { libc::mprotect(self.ptr.add(off).cast(), PAGE, libc::PROT_NONE) };
        if rc != 0 {
            return Err(std::io::Error::last_os_error()).context("mprotect of a guard page");
        }
        Ok(())
    }

    /// Populates `range` of the mapping on `node` in one system call
    /// (MADV_POPULATE_WRITE under the thread's memory policy): the NUMA
    /// scanner runs as task work on return to user space, so it never sees
    /// the range half-populated, and no VMA policy splits the mapping (a
    /// new VMA would start its scan history anew).
    fn populate_on(&self, node: u32, range: std::ops::Range<usize>) -> Result<()> {
        const MADV_POPULATE_WRITE: libc::c_int = 23;
        let range = range.start.min(self.len)..range.end.min(self.len);
        set_thread_policy(MPOL_BIND, Some(node))?;
        // SAFETY: the range lies inside our mapping.
        let rc = unsafe {
            libc::madvise(
                self.ptr.add(range.start).cast(),
                range.len(),
                MADV_POPULATE_WRITE,
            )
        };
        let err = std::io::Error::last_os_error();
        set_thread_policy(MPOL_DEFAULT, None)?;
        if rc != 0 {
            return Err(err).context("madvise(MADV_POPULATE_WRITE): Linux 5.14 or later is needed");
        }
        Ok(())
    }

    /// `[start, end)` of the mapping.
    fn span(&self) -> [u64; 2] {
        let start = self.ptr as u64;
        [start, start + self.len as u64]
    }

    /// Pages of the mapping on `node`.
    pub(crate) fn pages_on(&self, node: u32) -> usize {
        self.page_nodes()
            .iter()
            .filter(|&&n| n == node as i32)
            .count()
    }

    /// Node of each page.
    pub(crate) fn page_nodes(&self) -> Vec<i32> {
        nodes_of(self.ptr, 0..self.len / PAGE)
    }
}

/// Node of each of the `pages` (page numbers) of the mapping at `base`,
/// -1 for all when the query fails (move_pages with null nodes queries).
fn nodes_of(base: *mut u8, pages: impl Iterator<Item = usize>) -> Vec<i32> {
    let pages: Vec<*mut libc::c_void> = pages
        .map(|p| {
            // SAFETY: the caller's pages lie inside the mapping.
            unsafe { base.add(p * PAGE).cast() }
        })
        .collect();
    let mut status = vec![-1i32; pages.len()];
    // SAFETY: pages and status have the same length; pid 0 = self.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_pages,
            0,
            pages.len(),
            pages.as_ptr(),
            std::ptr::null::<i32>(),
            status.as_mut_ptr(),
            0,
        )
    };
    if rc != 0 {
        status.iter_mut().for_each(|s| *s = -1);
    }
    status
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what new() mapped.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// (user, system) CPU time of this process, in ms.
fn cpu_times_ms() -> (f64, f64) {
    // SAFETY: getrusage fills the zeroed struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let ms = |t: libc::timeval| t.tv_sec as f64 * 1e3 + t.tv_usec as f64 / 1e3;
    (ms(ru.ru_utime), ms(ru.ru_stime))
}

/// The slow node (`slow`, or the first CPU-less node with memory) and the
/// DRAM node (`dram`, or CPU 0's node); `hint` ends the error message when
/// there is no slow node.
pub(crate) fn slow_and_dram_nodes(
    slow: Option<u32>,
    dram: Option<u32>,
    nodes: &[Node],
    hint: &str,
) -> Result<(u32, u32)> {
    let slow = match slow {
        Some(n) => n,
        None => nodes
            .iter()
            .find(|n| n.cpus.is_empty() && n.mem_total_kb > 0)
            .map(|n| n.id)
            .with_context(|| format!("no CPU-less memory node found: pass --slow-node N{hint}"))?,
    };
    let dram = dram.unwrap_or_else(|| {
        nodes
            .iter()
            .find(|n| n.cpus.contains(&0))
            .map_or(0, |n| n.id)
    });
    Ok((slow, dram))
}

/// System-wide NUMA hint faults so far.
fn hint_faults() -> u64 {
    system::vmstat()
        .get("numa_hint_faults")
        .copied()
        .unwrap_or(0)
}

/// The DRAM filler of `mb` MiB, touched on `dram_node`, when `--dram-mb`
/// asks for one.
fn dram_filler(mb: u64, thp: bool, dram_node: u32) -> Result<Option<Region>> {
    if mb == 0 {
        return Ok(None);
    }
    let r = Region::new(mb as usize * MIB, thp)?;
    r.mbind(MPOL_BIND, Some(dram_node))?;
    r.touch_all();
    Ok(Some(r))
}

/// What the access phase did.
struct Accessed {
    visits: u64,
    accesses: u64,
    busy: Duration,
    /// Each phase's length with `--phase-ms`.
    phase_s: Vec<f64>,
}

/// The pages of one mapping as the access phase touches them, for as
/// long as the mapping is borrowed.
#[derive(Clone, Copy)]
struct Pages<'a> {
    ptr: *mut u8,
    pages: usize,
    /// Whether other threads or processes touch it at the same time.
    concurrent: bool,
    region: PhantomData<&'a Region>,
}

// SAFETY: the borrow keeps the mapping alive wherever a Pages goes, and
// a Pages that several threads touch is `concurrent`, so they touch it
// with atomics.
unsafe impl Send for Pages<'_> {}
// SAFETY: as for Send.
unsafe impl Sync for Pages<'_> {}

impl<'a> Pages<'a> {
    fn of(r: &'a Region, concurrent: bool) -> Self {
        Pages {
            ptr: r.ptr,
            pages: r.len / PAGE,
            concurrent,
            region: PhantomData,
        }
    }

    /// Reads the first byte of `page` and writes it back plus one, so the
    /// page takes a hint fault whichever access the scanner traps. Atomic
    /// when other threads or processes may touch the byte at once (plain
    /// accesses would race), volatile otherwise: the same load and store.
    ///
    /// # Safety
    ///
    /// `page` must be below `self.pages`.
    unsafe fn bump(&self, page: usize) {
        // SAFETY: page < pages (the caller's promise): inside the mapping.
        let p = unsafe { self.ptr.add(page * PAGE) };
        if self.concurrent {
            // SAFETY: p is valid for a u8 while the mapping is borrowed,
            // and every access to it that may run at the same time is
            // atomic.
            let byte = unsafe { AtomicU8::from_ptr(p) };
            byte.store(
                byte.load(Ordering::Relaxed).wrapping_add(1),
                Ordering::Relaxed,
            );
        } else {
            // SAFETY: p lies in the mapping and no other thread touches it.
            unsafe { p.write_volatile(p.read_volatile().wrapping_add(1)) };
        }
    }

    /// Of every `step`th page in `range`, those on `node`.
    fn sampled_on(&self, range: std::ops::Range<usize>, step: usize, node: u32) -> usize {
        let range = range.start.min(self.pages)..range.end.min(self.pages);
        nodes_of(self.ptr, range.step_by(step))
            .iter()
            .filter(|&&n| n == node as i32)
            .count()
    }

    /// (first page, pages) of chunk `chunk` when the mapping holds it
    /// whole, else of the whole mapping.
    fn chunk_or_all(&self, chunk: usize, chunk_pages: usize) -> (usize, usize) {
        if (chunk + 1) * chunk_pages <= self.pages {
            (chunk * chunk_pages, chunk_pages)
        } else {
            (0, self.pages)
        }
    }
}

/// Where the access phase's accesses land.
#[derive(Clone, Copy)]
struct Layout<'a> {
    slow: Pages<'a>,
    shared: Option<Pages<'a>>,
    chunk_pages: usize,
    /// Where a page promoted lies (`--phase-push` asks).
    dram_node: u32,
}

impl Layout<'_> {
    /// `n` random accesses to `chunk`: of the private mapping alone or,
    /// with a shared one, of each in turn (`shared_next` carries the turn
    /// over to the next visit, so that an odd `n` favours neither).
    fn visit(&self, chunk: usize, n: u64, rng: &mut Rng, shared_next: &mut bool) {
        let cp = self.chunk_pages;
        let Some(shared) = self.shared else {
            for _ in 0..n {
                let page = chunk * cp + (rng.next_u64() as usize % cp);
                // SAFETY: chunk < slow_mb / chunk_mb, so page < slow_mb * MiB / PAGE.
                unsafe { self.slow.bump(page) };
            }
            return;
        };
        let (first, span) = shared.chunk_or_all(chunk, cp);
        for _ in 0..n {
            let r = rng.next_u64() as usize;
            if *shared_next {
                // SAFETY: first + span <= shared.pages (chunk_or_all).
                unsafe { shared.bump(first + r % span) };
            } else {
                // SAFETY: chunk < slow_mb / chunk_mb, as above.
                unsafe { self.slow.bump(chunk * cp + r % cp) };
            }
            *shared_next = !*shared_next;
        }
    }
}

/// When the access phase ends: after `--visits` visits, or at
/// `--duration`, kept going by `--min-faults` and then `--linger` up to
/// `--max-duration`.
struct Pace {
    deadline: Instant,
    hard_deadline: Instant,
    faults0: u64,
    /// When `--duration` and `--min-faults` were first both met (the
    /// crew's threads share it).
    met: std::sync::OnceLock<Instant>,
}

impl Pace {
    fn new(a: &HotChunksArgs, start: Instant, faults0: u64) -> Self {
        Pace {
            deadline: start + Duration::from_secs_f64(a.duration),
            hard_deadline: start + Duration::from_secs_f64(a.max_duration.max(a.duration)),
            faults0,
            met: std::sync::OnceLock::new(),
        }
    }

    /// Whether the access phase is over after `visits` visits and
    /// `phases` whole phases (`--phase-ms`).
    fn done(&self, a: &HotChunksArgs, visits: u64, phases: u64) -> bool {
        let now = Instant::now();
        if a.visits > 0 {
            return visits >= a.visits || now >= self.hard_deadline;
        }
        if a.phases > 0 {
            return phases >= a.phases || now >= self.hard_deadline;
        }
        let faults_so_far = || hint_faults().saturating_sub(self.faults0);
        let met = now >= self.deadline
            && !(a.min_faults > 0 && now < self.hard_deadline && faults_so_far() < a.min_faults);
        if !met {
            return false;
        }
        let since = *self.met.get_or_init(|| now);
        now >= self.hard_deadline || now >= since + Duration::from_secs_f64(a.linger)
    }
}

/// Random accesses to random chunks of the slow mapping (and the shared
/// one) until `--duration` (or, with `--min-faults`, until that many hint
/// faults or `--max-duration`), in `--threads` threads; `index` numbers
/// the process (0: the parent) for the random seeds.
fn access_chunks(
    a: &HotChunksArgs,
    layout: Layout,
    index: u64,
    start: Instant,
    faults0: u64,
) -> Result<Accessed> {
    let mut rng = Rng::new(stream_seed(a.seed, index, 0));
    let pace = Pace::new(a, start, faults0);
    let phases = Phases::new(a, layout);
    if a.threads == 1 {
        let mut shared_next = false;
        return Ok(visit_loop(a, &pace, phases, &mut rng, |chunk, rng| {
            layout.visit(chunk, a.accesses, rng, &mut shared_next)
        }));
    }
    crew_access(a, layout, index, (&pace, phases), &mut rng)
}

/// Chunk visits until `pace` says done; `visit` makes one visit's
/// accesses, drawing from `rng` after the chunk was drawn from it.
fn visit_loop(
    a: &HotChunksArgs,
    pace: &Pace,
    mut phases: Phases,
    rng: &mut Rng,
    mut visit: impl FnMut(usize, &mut Rng),
) -> Accessed {
    let compute = (a.compute_ms > 0).then(|| Work::taking(Duration::from_millis(a.compute_ms)));
    let (mut visits, mut accesses, mut busy) = (0u64, 0u64, Duration::ZERO);
    loop {
        let (first, span) = phases.hot_set();
        if pace.done(a, visits, phases.ended()) {
            break;
        }
        let chunk = phases.first_chunk
            + (first
                + if a.in_turn {
                    visits % span
                } else {
                    rng.next_u64() % span
                }) as usize;
        if a.in_turn && a.idle_ms > 0 {
            std::thread::sleep(Duration::from_millis(a.idle_ms));
        }
        let t = Instant::now();
        visit(chunk, rng);
        busy += t.elapsed();
        accesses += a.accesses;
        visits += 1;
        if let Some(w) = &compute {
            w.run();
        }
        if a.idle_ms > 0 && !a.in_turn {
            std::thread::sleep(Duration::from_millis(a.idle_ms));
        }
    }
    Accessed {
        visits,
        accesses,
        busy,
        phase_s: phases.lengths(a.phases),
    }
}

/// One page in this many of the resting half is queried for its node
/// (`--phase-push`).
const PUSH_SAMPLE: usize = 16;
/// How often a phase past `--phase-ms` asks whether it has pushed enough.
const PUSH_CHECK: Duration = Duration::from_millis(500);

/// Phase lengths a summary keeps, the most `--phases` asks for: phases
/// of a millisecond over days would otherwise grow the record without end.
const PHASES_KEPT: usize = 1000;

/// The hot set with `--phase-ms`: the half of the chunks visited (A, the
/// first half, in even phases; B, the rest, in odd ones), and when each
/// phase ends.
struct Phases<'a> {
    /// The first chunk of a late-populated mapping stays untouched.
    first_chunk: usize,
    chunks: u64,
    phase: Duration,
    push_pct: u64,
    layout: Layout<'a>,
    /// Whole phases so far, and when the current one began.
    ended: u64,
    began: Instant,
    /// The first [`PHASES_KEPT`] whole phases' lengths, in seconds.
    kept: Vec<f64>,
    /// Sampled pages of the resting half on the DRAM node when the
    /// current phase began (`--phase-push`).
    resting_at_start: usize,
    next_check: Instant,
}

impl<'a> Phases<'a> {
    fn new(a: &HotChunksArgs, layout: Layout<'a>) -> Self {
        let first_chunk = first_chunk(a);
        let now = Instant::now();
        let mut p = Phases {
            first_chunk,
            chunks: a.slow_mb / a.chunk_mb - first_chunk as u64,
            phase: Duration::from_millis(a.phase_ms),
            push_pct: a.phase_push,
            layout,
            ended: 0,
            began: now,
            kept: Vec::new(),
            resting_at_start: 0,
            next_check: now,
        };
        p.resting_at_start = p.resting_on_dram();
        p
    }

    /// Whole phases so far.
    fn ended(&self) -> u64 {
        self.ended
    }

    /// (first, count) of the chunks to visit now: all of them, or the
    /// current phase's half, starting the next phase when this one is over.
    fn hot_set(&mut self) -> (u64, u64) {
        if self.phase.is_zero() {
            return (0, self.chunks);
        }
        while self.over() {
            self.next();
        }
        self.half(self.ended % 2)
    }

    /// (first, count) of half `h` (0: A, 1: B).
    fn half(&self, h: u64) -> (u64, u64) {
        let half = self.chunks / 2;
        match h {
            0 => (0, half),
            _ => (half, self.chunks - half),
        }
    }

    /// Whether the current phase is over: past `--phase-ms` and, with
    /// `--phase-push`, once the resting half has lost that share of its
    /// DRAM pages.
    fn over(&mut self) -> bool {
        let now = Instant::now();
        if now < self.began + self.phase {
            return false;
        }
        if self.push_pct == 0 {
            return true;
        }
        if now < self.next_check {
            return false;
        }
        self.next_check = now + PUSH_CHECK;
        let kept = self.resting_at_start * (100 - self.push_pct as usize) / 100;
        self.resting_on_dram() <= kept
    }

    /// Starts the next phase: at the end of the last one's `--phase-ms`
    /// when phases are fixed (the same phases however slow the visits),
    /// now when they wait for a push.
    fn next(&mut self) {
        let at = if self.push_pct == 0 {
            self.began + self.phase
        } else {
            Instant::now()
        };
        if self.kept.len() < PHASES_KEPT {
            self.kept
                .push(at.saturating_duration_since(self.began).as_secs_f64());
        }
        self.ended += 1;
        self.began = at;
        if self.push_pct > 0 {
            self.resting_at_start = self.resting_on_dram();
        }
    }

    /// Sampled pages of the half not visited in this phase on the DRAM node.
    fn resting_on_dram(&self) -> usize {
        if self.push_pct == 0 || self.phase.is_zero() {
            return 0;
        }
        let (first, count) = self.half((self.ended + 1) % 2);
        let cp = self.layout.chunk_pages;
        let start = (self.first_chunk + first as usize) * cp;
        let pages = start..start + count as usize * cp;
        self.layout
            .slow
            .sampled_on(pages, PUSH_SAMPLE, self.layout.dram_node)
    }

    /// Each phase's length in seconds, the current one until now, at
    /// most the first `limit` (0: as many as are kept).
    fn lengths(&self, limit: u64) -> Vec<f64> {
        if self.phase.is_zero() {
            return Vec::new();
        }
        let limit = match limit {
            0 => PHASES_KEPT,
            n => PHASES_KEPT.min(n as usize),
        };
        let current = self.began.elapsed().as_secs_f64();
        self.kept
            .iter()
            .copied()
            .chain([current])
            .take(limit)
            .collect()
    }
}

/// The first chunk visited: a late-populated mapping's first stays
/// untouched.
fn first_chunk(a: &HotChunksArgs) -> usize {
    usize::from(a.late_populate_ms > 0)
}

/// The seed of thread `thread` of process `proc`: `--seed` itself for the
/// parent's first thread, so that one thread in one process draws the
/// sequence `--seed` names; a mix of it and both indices otherwise.
fn stream_seed(seed: u64, proc: u64, thread: u64) -> u64 {
    if proc == 0 && thread == 0 {
        return seed;
    }
    splitmix64(seed ^ splitmix64((proc << 32) | thread))
}

/// Thread `thread`'s part of `accesses` split between `threads`: the
/// parts add up to `accesses`.
fn share(accesses: u64, threads: u64, thread: u64) -> u64 {
    accesses / threads + u64::from(thread < accesses % threads)
}

/// The visit loop with `--threads` - 1 more threads making their part of
/// each visit's accesses while this one makes its own, then waits for
/// them; the chunk, computing and idling stay with this thread.
fn crew_access(
    a: &HotChunksArgs,
    layout: Layout,
    index: u64,
    (pace, phases): (&Pace, Phases),
    rng: &mut Rng,
) -> Result<Accessed> {
    let gate = Gate::default();
    let helpers = a.threads - 1;
    std::thread::scope(|s| {
        // Whatever way this closure is left, the helpers stop, so the
        // scope's join cannot wait for ever.
        let _stop = StopOnDrop(&gate);
        for t in 1..a.threads {
            let (gate, part) = (&gate, share(a.accesses, a.threads, t));
            let seed = stream_seed(a.seed, index, t);
            std::thread::Builder::new()
                .stack_size(ACCESS_THREAD_STACK)
                .spawn_scoped(s, move || access_thread(gate, layout, part, seed))
                .context("spawning an access thread (--threads)")?;
        }
        let own = share(a.accesses, a.threads, 0);
        let mut shared_next = false;
        Ok(visit_loop(a, pace, phases, rng, |chunk, rng| {
            gate.open(chunk, helpers as usize);
            layout.visit(chunk, own, rng, &mut shared_next);
            gate.wait_done();
        }))
    })
}

/// A helper of [`crew_access`]: `part` accesses to each visit's chunk.
fn access_thread(gate: &Gate, layout: Layout, part: u64, seed: u64) {
    // A panic here stops the visits rather than leave them waiting.
    let _stop = StopOnDrop(gate);
    let mut rng = Rng::new(seed);
    let mut shared_next = false;
    let mut seen = 0;
    while let Some((round, chunk)) = gate.next(seen) {
        seen = round;
        layout.visit(chunk, part, &mut rng, &mut shared_next);
        gate.finished();
    }
}

/// Where the visiting thread hands each visit's chunk to the helpers and
/// waits for them to finish it.
#[derive(Default)]
struct Gate {
    round: Mutex<Round>,
    changed: Condvar,
}

#[derive(Default)]
struct Round {
    number: u64,
    chunk: usize,
    /// Helpers still accessing in this round.
    running: usize,
    stop: bool,
}

impl Gate {
    fn lock(&self) -> MutexGuard<'_, Round> {
        self.round.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wait<'g>(&self, r: MutexGuard<'g, Round>) -> MutexGuard<'g, Round> {
        self.changed.wait(r).unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts a round of visits to `chunk` by `helpers` threads.
    fn open(&self, chunk: usize, helpers: usize) {
        let mut r = self.lock();
        r.number += 1;
        r.chunk = chunk;
        r.running = helpers;
        self.changed.notify_all();
    }

    /// Waits until every helper has finished the round (or stopped).
    fn wait_done(&self) {
        let mut r = self.lock();
        while r.running > 0 && !r.stop {
            r = self.wait(r);
        }
    }

    /// A helper's next round after round `seen`: (number, chunk), or none
    /// once stopped.
    fn next(&self, seen: u64) -> Option<(u64, usize)> {
        let mut r = self.lock();
        loop {
            if r.stop {
                return None;
            }
            if r.number != seen {
                return Some((r.number, r.chunk));
            }
            r = self.wait(r);
        }
    }

    fn finished(&self) {
        let mut r = self.lock();
        r.running = r.running.saturating_sub(1);
        if r.running == 0 {
            self.changed.notify_all();
        }
    }

    fn stop(&self) {
        self.lock().stop = true;
        self.changed.notify_all();
    }
}

/// Stops the gate's rounds when dropped.
struct StopOnDrop<'g>(&'g Gate);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.stop();
    }
}

/// Threads started by `--idle-threads`, asleep until the process exits.
type Sleepers = Vec<std::thread::JoinHandle<()>>;

/// The memory of the run: the accessed private mapping on the slow node,
/// the cold one beside it (`--cold-mb`), the shared one (`--shared-mb`),
/// and the idle threads if `--late-populate-ms` had to start them between
/// its populate steps.
struct Setup {
    cold: Option<Region>,
    slow: Region,
    shared: Option<Region>,
    sleepers: Option<Sleepers>,
}

impl Setup {
    fn layout(&self, a: &HotChunksArgs, dram_node: u32) -> Layout<'_> {
        Layout {
            dram_node,
            slow: Pages::of(&self.slow, a.threads > 1),
            // Other processes may touch it whenever they like.
            shared: self.shared.as_ref().map(|r| Pages::of(r, true)),
            chunk_pages: (a.chunk_mb as usize * MIB) / PAGE,
        }
    }

    /// Places a child's private mappings on `node` as the parent's were:
    /// the fork left it them empty (see [`Region::wipe_on_fork`]).
    fn repopulate(&self, node: u32) -> Result<()> {
        if let Some(cold) = &self.cold {
            cold.populate_on(node, 0..cold.len)?;
        }
        self.slow.populate_on(node, 0..self.slow.len)
    }

    /// The private mappings, which every process has of its own.
    fn private(&self) -> impl Iterator<Item = &Region> {
        std::iter::once(&self.slow).chain(&self.cold)
    }
}

/// The accessed slow-node mapping and the cold one `--cold-mb` asks for;
/// the idle threads start after them (see [`start_sleepers`]).
fn slow_regions(a: &HotChunksArgs, node: u32) -> Result<Setup> {
    let hot = a.slow_mb as usize * MIB;
    if a.late_populate_ms > 0 {
        return late_populated(a, node);
    }
    // Each populated whole before the scanner first comes by, so that the
    // passes of its first two scan sequences protect all of it (touching
    // page by page, a slow machine may let the scanner visit the VMA
    // half-populated and then skip it for good as never accessed).
    let (slow, cold) = if a.cold_mb == 0 {
        let hot = Region::fenced_one(hot, a.thp)?;
        hot.populate_on(node, 0..hot.len)?;
        (hot, None)
    } else {
        let (hot, cold) = Region::pair(hot, a.cold_mb as usize * MIB, a.thp)?;
        cold.populate_on(node, 0..cold.len)?;
        hot.populate_on(node, 0..hot.len)?;
        (hot, Some(cold))
    };
    Ok(Setup {
        slow,
        cold,
        shared: None,
        sleepers: None,
    })
}

/// The slow mapping populated in two steps (see `--late-populate-ms`).
fn late_populated(a: &HotChunksArgs, node: u32) -> Result<Setup> {
    let r = Region::fenced_one(a.slow_mb as usize * MIB, a.thp)?;
    let chunk = a.chunk_mb as usize * MIB;
    r.populate_on(node, 0..chunk)?;
    let sleepers = idle_threads(a.idle_threads)?;
    compute_for(Duration::from_millis(a.late_populate_ms));
    r.populate_on(node, chunk..r.len)?;
    Ok(Setup {
        slow: r,
        cold: None,
        shared: None,
        sleepers: Some(sleepers),
    })
}

/// The idle threads, unless `--late-populate-ms` started them already:
/// started after the mappings (and any fork) so that their stacks lie
/// below the mappings (mmap places top-down) and come first in the
/// scanner's address-ordered walk.
fn start_sleepers(a: &HotChunksArgs, setup: &mut Setup) -> Result<Sleepers> {
    match setup.sleepers.take() {
        Some(s) => Ok(s),
        None => idle_threads(a.idle_threads),
    }
}

/// The `--shared-mb` mapping, populated on `slow` as the private one is,
/// then given a policy under which the NUMA scanner visits it.
fn shared_region(a: &HotChunksArgs, slow: u32, dram: u32) -> Result<Option<Region>> {
    if a.shared_mb == 0 {
        return Ok(None);
    }
    let r = Region::shared(a.shared_mb as usize * MIB, a.thp)?;
    r.populate_on(slow, 0..r.len)?;
    // Shmem allocates under its shared policy once it has one, hence the
    // policy after the pages. Shmem has none by default, and then
    // task_numa_work() skips the VMA (vma_policy_mof() is false);
    // MPOL_F_NUMA_BALANCING adds the MPOL_F_MOF it asks for, and lets a
    // hint fault move a page to the faulting CPU's node when the mask
    // holds that node, as the default policy does for private memory.
    // Without MPOL_MF_MOVE, mbind moves none of the pages placed above.
    r.mbind_mask(
        MPOL_BIND | MPOL_F_NUMA_BALANCING,
        &NodeMask::of_nodes(&[slow, dram]),
    )
    .context(
        "mbind(MPOL_BIND | MPOL_F_NUMA_BALANCING) of the --shared-mb mapping: \
             Linux 5.14 or later is needed",
    )?;
    Ok(Some(r))
}

/// A node mask of 1024 bits for mbind(2) and set_mempolicy(2); none for
/// the default policy.
struct NodeMask(Option<[u64; 16]>);

impl NodeMask {
    fn of(node: Option<u32>) -> Self {
        match node {
            Some(n) => NodeMask::of_nodes(&[n]),
            None => NodeMask(None),
        }
    }

    fn of_nodes(nodes: &[u32]) -> Self {
        let mut m = [0u64; 16];
        for n in nodes {
            m[(n / 64) as usize % 16] |= 1 << (n % 64);
        }
        NodeMask(Some(m))
    }

    /// (mask pointer, maxnode) as the system calls take them.
    fn arg(&self) -> (*const u64, libc::c_ulong) {
        match &self.0 {
            Some(m) => (m.as_ptr(), 1024 + 1),
            None => (std::ptr::null(), 0),
        }
    }
}

/// set_mempolicy(2) for the calling thread.
fn set_thread_policy(mode: libc::c_long, node: Option<u32>) -> Result<()> {
    let mask = NodeMask::of(node);
    let (ptr, maxnode) = mask.arg();
    // SAFETY: a valid mask buffer of 1024 bits, or none.
    let rc = unsafe { libc::syscall(libc::SYS_set_mempolicy, mode, ptr, maxnode) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error())
            .context(format!("set_mempolicy(mode {mode}, node {node:?})"));
    }
    Ok(())
}

/// Keeps the CPU busy on a small buffer of its own for `d`: the NUMA
/// scanner runs on the task's CPU time, so it makes scan sequences pass.
fn compute_for(d: Duration) {
    let end = Instant::now() + d;
    while Instant::now() < end {
        Work { rounds: 1 }.run();
    }
}

/// A fixed amount of computing on a small buffer of its own, in rounds of
/// 10 000 steps.
struct Work {
    rounds: u64,
}

impl Work {
    /// The work that took `d` here: timed over a few samples, the fastest
    /// taken, as a sample the task was preempted in ran long.
    fn taking(d: Duration) -> Work {
        const SAMPLE_ROUNDS: u64 = 64;
        let fastest = (0..5)
            .map(|_| {
                let t = Instant::now();
                Work {
                    rounds: SAMPLE_ROUNDS,
                }
                .run();
                t.elapsed()
            })
            .min()
            .unwrap_or(Duration::from_millis(1))
            .max(Duration::from_nanos(1));
        let rounds = d.as_nanos() * u128::from(SAMPLE_ROUNDS) / fastest.as_nanos();
        Work {
            rounds: u64::try_from(rounds).unwrap_or(u64::MAX).max(1),
        }
    }

    fn run(&self) {
        let mut buf = [0u64; 4096];
        let mut i = 0usize;
        for _ in 0..self.rounds {
            for _ in 0..10_000 {
                i = i.wrapping_mul(31).wrapping_add(7) % buf.len();
                buf[i] = buf[i].wrapping_add(1);
            }
        }
        std::hint::black_box(&buf);
    }
}

/// Threads that sleep until the process exits (see `--idle-threads`).
fn idle_threads(n: u64) -> Result<Sleepers> {
    (0..n)
        .map(|i| {
            std::thread::Builder::new()
                .name(format!("idle-{i}"))
                .stack_size(64 * 1024)
                .spawn(|| loop {
                    std::thread::park();
                })
                .context("spawning an idle thread")
        })
        .collect()
}

fn write_summary(a: &HotChunksArgs, summary: &Summary) -> Result<()> {
    let mut json = serde_json::to_vec(summary)?;
    if a.summary.is_none() {
        json.push(b'\n');
    }
    crate::write_output(a.summary.as_deref(), &json)
}

/// The children `--procs` forked: killed and reaped when dropped, unless
/// [`Children::wait`] reaped them.
struct Children(Vec<libc::pid_t>);

impl Children {
    fn pids(&self) -> Vec<u32> {
        self.0.iter().map(|&p| p.unsigned_abs()).collect()
    }

    /// Waits for every child; the error names each one that failed.
    fn wait(mut self) -> Result<()> {
        let pids = std::mem::take(&mut self.0);
        let failures: Vec<String> = pids
            .iter()
            .zip(1..)
            .filter_map(|(&pid, index)| {
                let what = match reap(pid) {
                    Ok(status) => exit_problem(status)?,
                    Err(e) => format!("could not be waited for: {e}"),
                };
                Some(format!("child {index} (pid {pid}) {what}"))
            })
            .collect();
        if !failures.is_empty() {
            bail!(
                "--procs: {} of {} children failed, so no summary: {} (a child's own error, \
                 if it had one, is logged above)",
                failures.len(),
                pids.len(),
                failures.join("; ")
            );
        }
        Ok(())
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        for &pid in &self.0 {
            // SAFETY: a child of ours not yet reaped, so the pid is still
            // its own; kill takes no pointer.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            let _ = reap(pid);
        }
    }
}

/// waitpid(2) for child `pid`, retried when a signal interrupts it.
fn reap(pid: libc::pid_t) -> std::io::Result<libc::c_int> {
    let mut status = 0;
    loop {
        // SAFETY: waitpid for our own child, with a valid status pointer.
        let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
        if rc == pid {
            return Ok(status);
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// What went wrong with a child that ended with wait status `status`, if
/// anything.
fn exit_problem(status: libc::c_int) -> Option<String> {
    if libc::WIFEXITED(status) {
        match libc::WEXITSTATUS(status) {
            0 => None,
            code => Some(format!("exited with status {code}")),
        }
    } else if libc::WIFSIGNALED(status) {
        Some(format!("was killed by signal {}", libc::WTERMSIG(status)))
    } else {
        Some(format!("ended with wait status {status:#x}"))
    }
}

/// Which side of the fork the caller is on.
enum Forked {
    Parent(Children),
    /// Child number 1 to `--procs` - 1.
    Child(u64),
}

/// Forks `--procs` - 1 children, each of which leaves here as
/// `Forked::Child`, with its private mappings empty (see
/// [`Region::wipe_on_fork`]) and the shared one in common.
fn fork_children(a: &HotChunksArgs, setup: &Setup) -> Result<Forked> {
    let mut children = Children(Vec::new());
    if a.procs == 1 {
        return Ok(Forked::Parent(children));
    }
    single_threaded()?;
    for r in setup.private() {
        r.wipe_on_fork()?;
    }
    let parent = std::process::id();
    for index in 1..a.procs {
        // SAFETY: no other thread exists (checked above), so the child
        // inherits no lock some other thread held at the fork, and can
        // run ordinary code.
        match unsafe { libc::fork() } {
            -1 => {
                return Err(std::io::Error::last_os_error())
                    .context(format!("fork of child {index} (--procs {})", a.procs));
            }
            0 => {
                // The siblings are the parent's to reap, not this child's.
                children.0.clear();
                die_with_parent(parent);
                return Ok(Forked::Child(index));
            }
            pid => children.0.push(pid),
        }
    }
    Ok(Forked::Parent(children))
}

/// Fails unless this process has a single thread: a forked child gets a
/// copy of every lock another thread held, and none of those threads.
fn single_threaded() -> Result<()> {
    let threads = std::fs::read_dir("/proc/self/task")
        .context("reading /proc/self/task (--procs)")?
        .count();
    if threads != 1 {
        bail!(
            "--procs forks, which needs a single-threaded process; this one has {threads} threads"
        );
    }
    Ok(())
}

/// Has the calling child killed when the parent dies, so that an
/// interrupted run leaves no workload behind.
fn die_with_parent(parent: u32) {
    // SAFETY: PR_SET_PDEATHSIG takes a signal number and no pointer.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) };
    // The parent may have died before the call above took effect.
    if std::os::unix::process::parent_id() != parent {
        // SAFETY: ends this process at once; see `run_child`.
        unsafe { libc::_exit(1) };
    }
}

/// The life of child `index`: its private memory placed, its idle threads
/// started, its access phase run; then `_exit`, never a return into the
/// parent's code, which would write a second summary.
fn run_child(
    a: &HotChunksArgs,
    setup: &Setup,
    (slow_node, dram_node): (u32, u32),
    index: u64,
) -> ! {
    let body = || -> Result<()> {
        setup.repopulate(slow_node)?;
        let _sleepers = idle_threads(a.idle_threads)?;
        let layout = setup.layout(a, dram_node);
        access_chunks(a, layout, index, Instant::now(), hint_faults())?;
        Ok(())
    };
    let code = match std::panic::catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            let pid = std::process::id();
            crate::logging::fatal(&e.context(format!("hot-chunks child {index} (pid {pid})")));
            1
        }
        // The panic hook has told what happened.
        Err(_) => 101,
    };
    // SAFETY: ends this process at once: its copy of the parent's state
    // has nothing to flush or clean up (stdout is untouched; the summary
    // is the parent's), and its threads end with it.
    unsafe { libc::_exit(code) }
}

/// Refuses flag combinations that make no sense, naming the flags and
/// the way out.
fn check_flags(a: &HotChunksArgs) -> Result<()> {
    if a.slow_mb == 0 && a.cold_mb > 0 {
        bail!("--cold-mb needs a slow-node mapping to sit beside: give --slow-mb too");
    }
    if a.late_populate_ms > 0 && (a.cold_mb > 0 || a.slow_mb < 2 * a.chunk_mb) {
        bail!(
            "--late-populate-ms needs at least two chunks (--slow-mb >= 2 x --chunk-mb) and no --cold-mb"
        );
    }
    if a.slow_mb > 0 && (a.chunk_mb == 0 || a.slow_mb < a.chunk_mb) {
        bail!("--chunk-mb must be between 1 and --slow-mb ({})", a.slow_mb);
    }
    if a.phase_ms > 0 && a.slow_mb / a.chunk_mb.max(1) < 2 + first_chunk(a) as u64 {
        bail!(
            "--phase-ms alternates between two halves of the chunks, and --slow-mb {} in \
             --chunk-mb {} chunks has fewer than two to visit: give --slow-mb at least twice \
             --chunk-mb (plus one chunk with --late-populate-ms), or leave --phase-ms out",
            a.slow_mb,
            a.chunk_mb
        );
    }
    if a.phase_ms == 0 && (a.phase_push > 0 || a.phases > 0) {
        bail!("--phase-push and --phases shape the phases of --phase-ms: give --phase-ms too");
    }
    check_shapes(a)
}

/// [`check_flags`] for `--procs`, `--threads` and `--shared-mb`.
fn check_shapes(a: &HotChunksArgs) -> Result<()> {
    if a.slow_mb == 0 {
        let given = [
            ("--procs", a.procs > 1),
            ("--threads", a.threads > 1),
            ("--shared-mb", a.shared_mb > 0),
        ];
        let given: Vec<&str> = given.iter().filter(|g| g.1).map(|g| g.0).collect();
        if let Some((last, rest)) = given.split_last() {
            let (flags, verb) = match rest {
                [] => (last.to_string(), "shapes"),
                _ => (format!("{} and {last}", rest.join(", ")), "shape"),
            };
            bail!(
                "{flags} {verb} the access phase, which --slow-mb 0 (DRAM filler only) has \
                 none of: give --slow-mb too, or leave {flags} out"
            );
        }
    }
    if a.late_populate_ms > 0 && a.procs > 1 {
        bail!(
            "--procs with --late-populate-ms: the idle threads start between the populate \
             steps, before a fork could (fork needs a single-threaded process), and a child \
             would populate its mapping at once: drop --procs or --late-populate-ms"
        );
    }
    if a.late_populate_ms > 0 && a.shared_mb > 0 {
        bail!(
            "--shared-mb with --late-populate-ms: the hint faults of the shared mapping would \
             mix with those of the pages that arrive late: drop --shared-mb or \
             --late-populate-ms"
        );
    }
    if a.threads > a.accesses {
        bail!(
            "--threads {} would split --accesses {} per chunk visit, leaving some threads none: \
             give --accesses at least --threads",
            a.threads,
            a.accesses
        );
    }
    check_slow_total(a)
}

/// [`check_flags`] for the memory `--procs` multiplies.
fn check_slow_total(a: &HotChunksArgs) -> Result<()> {
    let max = crate::cli::ranges::MAX_WORKLOAD_MB;
    let on_slow = a.procs * (a.slow_mb + a.cold_mb) + a.shared_mb;
    if a.procs > 1 && on_slow > max {
        bail!(
            "--procs {} x (--slow-mb {} + --cold-mb {}) + --shared-mb {} is {on_slow} MiB on the \
             slow node, over the {max} MiB a workload may place there: lower one of them",
            a.procs,
            a.slow_mb,
            a.cold_mb,
            a.shared_mb,
        );
    }
    Ok(())
}

/// Names the process `name` (so it shows up as that in top and ps, not as
/// another numatrace) and picks its slow and DRAM nodes.
fn named_on_nodes(
    name: &std::ffi::CStr,
    slow: Option<u32>,
    dram: Option<u32>,
) -> Result<(u32, u32)> {
    // SAFETY: PR_SET_NAME with a NUL-terminated buffer; the kernel keeps
    // its first 15 bytes.
    unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr()) };
    slow_and_dram_nodes(slow, dram, &system::nodes(), " (see `numatrace doctor`)")
}

pub(crate) fn hot_chunks(a: &HotChunksArgs) -> Result<ExitCode> {
    let (slow_node, dram_node) = named_on_nodes(c"hot-chunks", a.slow_node, a.dram_node)?;
    check_flags(a)?;
    let _dram = dram_filler(a.dram_mb, a.thp, dram_node)?;
    if a.slow_mb == 0 {
        // DRAM filler only: hold the memory idle for the duration.
        std::thread::sleep(Duration::from_secs_f64(a.duration));
        writeln!(
            std::io::stdout(),
            "{{\"dram_mb\":{},\"dram_node\":{dram_node}}}",
            a.dram_mb
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut setup = slow_regions(a, slow_node)?;
    setup.shared = shared_region(a, slow_node, dram_node)?;
    let children = match fork_children(a, &setup)? {
        Forked::Parent(children) => children,
        Forked::Child(index) => run_child(a, &setup, (slow_node, dram_node), index),
    };
    let _sleepers = start_sleepers(a, &mut setup)?;
    let summary = measure(a, &setup, children, slow_node, dram_node)?;
    write_summary(a, &summary)?;
    Ok(ExitCode::SUCCESS)
}

/// This process's access phase, measured, then the children awaited.
fn measure(
    a: &HotChunksArgs,
    setup: &Setup,
    children: Children,
    slow_node: u32,
    dram_node: u32,
) -> Result<Summary> {
    let query = a.late_populate_ms == 0;
    let at_start = query.then(|| setup.slow.pages_on(slow_node));
    let child_pids = children.pids();

    let (user0, sys0) = cpu_times_ms();
    let faults0 = hint_faults();
    let start = Instant::now();
    let done = access_chunks(a, setup.layout(a, dram_node), 0, start, faults0)?;
    let (user1, sys1) = cpu_times_ms();
    children.wait()?;
    let faults1 = hint_faults();
    let at_end = query.then(|| setup.slow.pages_on(dram_node));
    let (slow, cold, shared) = (&setup.slow, setup.cold.as_ref(), setup.shared.as_ref());
    Ok(Summary {
        pid: std::process::id(),
        slow_node,
        dram_node,
        slow_pages: slow.len / PAGE,
        slow_vma: slow.span(),
        cold_vma: cold.map(Region::span),
        cold_pages_on_dram_node_at_end: cold.map(|c| c.pages_on(dram_node)),
        slow_pages_on_slow_node_at_start: at_start,
        slow_pages_on_dram_node_at_end: at_end,
        chunk_visits: done.visits,
        accesses: done.accesses,
        shared_pages_on_dram_node_at_end: shared.filter(|_| query).map(|s| s.pages_on(dram_node)),
        elapsed_s: start.elapsed().as_secs_f64(),
        score_us: done.busy.as_micros() as u64,
        user_ms: user1 - user0,
        sys_ms: sys1 - sys0,
        numa_hint_faults: faults1.saturating_sub(faults0),
        procs: a.procs,
        threads: a.threads,
        shared_pages: shared.map_or(0, |s| s.len / PAGE),
        shared_vma: shared.map(Region::span),
        child_pids,
        phase_s: done.phase_s,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parents_first_thread_draws_the_seed_itself_and_the_others_differ() {
        assert_eq!(stream_seed(7, 0, 0), 7);
        let mut seeds: Vec<u64> = (0..64)
            .flat_map(|p| (0..64).map(move |t| stream_seed(7, p, t)))
            .collect();
        seeds.sort_unstable();
        seeds.dedup();
        assert_eq!(seeds.len(), 64 * 64);
    }

    /// The phases of `args` over `region` (one-page chunks), begun `ago`.
    fn phases_of<'r>(
        args: &[&str],
        region: &'r Region,
        dram_node: u32,
        ago: Duration,
    ) -> Phases<'r> {
        let a = hot_chunks(args);
        let layout = Layout {
            slow: Pages::of(region, false),
            shared: None,
            chunk_pages: 1,
            dram_node,
        };
        let mut p = Phases::new(&a, layout);
        p.began = Instant::now() - ago;
        p.next_check = Instant::now();
        p
    }

    #[test]
    fn phases_visit_the_first_half_then_the_rest_then_the_first_again() {
        let r = Region::new(37 * PAGE, false).expect("mapping");
        r.touch_all();
        let at = Duration::from_millis;
        let fixed = |ms| {
            phases_of(
                &["--slow-mb", "37", "--chunk-mb", "1", "--phase-ms", "8000"],
                &r,
                0,
                at(ms),
            )
        };
        let every = phases_of(&["--slow-mb", "37", "--chunk-mb", "1"], &r, 0, at(99_000)).hot_set();
        assert_eq!(every, (0, 37));
        assert_eq!(fixed(0).hot_set(), (0, 18));
        assert_eq!(fixed(7990).hot_set(), (0, 18));
        let mut b = fixed(8000);
        assert_eq!((b.hot_set(), b.ended()), ((18, 19), 1));
        let mut a_again = fixed(16_500);
        assert_eq!((a_again.hot_set(), a_again.ended()), ((0, 18), 2));
        let lengths = a_again.lengths(0);
        assert_eq!(a_again.lengths(2).len(), 2);
        assert_eq!(lengths.len(), 3);
        assert!(
            lengths[..2].iter().all(|&l| (l - 8.0).abs() < 1e-6),
            "{lengths:?}"
        );
        let two = phases_of(
            &["--slow-mb", "2", "--chunk-mb", "1", "--phase-ms", "8000"],
            &r,
            0,
            at(8000),
        )
        .hot_set();
        assert_eq!(two, (1, 1));
    }

    #[test]
    fn the_phases_kept_are_bounded_however_many_pass() {
        let r = Region::new(2 * PAGE, false).expect("mapping");
        let args = ["--slow-mb", "2", "--chunk-mb", "1", "--phase-ms", "1"];
        let mut p = phases_of(&args, &r, 0, Duration::from_secs(5));
        p.hot_set();
        assert!(p.ended() >= 5000, "{} phases in 5 s of 1 ms", p.ended());
        assert_eq!(p.lengths(0).len(), PHASES_KEPT);
        assert_eq!(p.kept.len(), PHASES_KEPT);
    }

    /// The node the host puts a fresh mapping on: one of its pages, asked.
    fn node_of(r: &Region) -> u32 {
        let n = r.page_nodes()[0];
        u32::try_from(n).unwrap_or_else(|_| panic!("move_pages could not tell the node: {n}"))
    }

    #[test]
    fn a_pushing_phase_lasts_until_the_resting_half_has_left_dram() {
        let r = Region::new(64 * PAGE, false).expect("mapping");
        r.touch_all();
        let here = node_of(&r);
        let args = [
            "--slow-mb",
            "64",
            "--chunk-mb",
            "1",
            "--phase-ms",
            "1000",
            "--phase-push",
            "25",
        ];
        // B rests where it was placed: counted as DRAM, it never leaves,
        // so A's phase goes on past --phase-ms.
        let mut held = phases_of(&args, &r, here, Duration::from_secs(5));
        assert!(held.resting_at_start > 0);
        assert_eq!((held.hot_set(), held.ended()), ((0, 32), 0));
        // Nothing of B on the DRAM node: nothing to push, the phase ends
        // at --phase-ms.
        let mut free = phases_of(&args, &r, here + 1, Duration::from_secs(5));
        assert_eq!((free.hot_set(), free.ended()), ((32, 32), 1));
    }

    #[test]
    fn phase_shaping_needs_phases() {
        for flag in [["--phase-push", "20"], ["--phases", "3"]] {
            let a = hot_chunks(&["--slow-mb", "64", flag[0], flag[1]]);
            let err = check_flags(&a).expect_err(flag[0]).to_string();
            assert!(err.contains("give --phase-ms too"), "{err}");
        }
    }

    /// `numatrace workload hot-chunks ARGS`, parsed.
    fn hot_chunks(args: &[&str]) -> HotChunksArgs {
        let argv = ["numatrace", "workload", "hot-chunks"].iter().chain(args);
        match crate::cli::ranges::try_parse_from(argv).map(|c| c.command) {
            Ok(crate::cli::Command::Workload(crate::cli::Workload::HotChunks(a))) => a,
            other => panic!("not hot-chunks: {other:?}"),
        }
    }

    #[test]
    fn phases_need_two_chunks_to_visit() {
        let one = hot_chunks(&["--slow-mb", "64", "--chunk-mb", "64", "--phase-ms", "100"]);
        let e = check_flags(&one).expect_err("one chunk has no halves");
        assert!(e.to_string().contains("--phase-ms alternates"), "{e}");
        let late = hot_chunks(&[
            "--slow-mb",
            "128",
            "--chunk-mb",
            "64",
            "--phase-ms",
            "100",
            "--late-populate-ms",
            "10",
        ]);
        assert!(
            check_flags(&late).is_err(),
            "the first chunk is never visited"
        );
        let two = hot_chunks(&["--slow-mb", "128", "--chunk-mb", "64", "--phase-ms", "100"]);
        check_flags(&two).expect("two chunks, one a phase");
    }

    #[test]
    fn the_threads_parts_add_up_to_the_accesses() {
        for (accesses, threads) in [(20_000, 3), (7, 7), (64, 5), (1, 1)] {
            let parts: Vec<u64> = (0..threads).map(|t| share(accesses, threads, t)).collect();
            assert_eq!(parts.iter().sum::<u64>(), accesses);
            assert!(parts.iter().max().unwrap() - parts.iter().min().unwrap() <= 1);
        }
    }

    #[test]
    fn a_shared_chunk_is_used_only_when_whole() -> Result<()> {
        let r = Region::new(3 * PAGE, false)?;
        let p = Pages::of(&r, true);
        assert_eq!(p.chunk_or_all(0, 2), (0, 2));
        assert_eq!(p.chunk_or_all(1, 2), (0, 3));
        assert_eq!(p.chunk_or_all(1, 1), (1, 1));
        Ok(())
    }

    #[test]
    fn a_round_waits_for_every_helper() {
        let gate = Gate::default();
        let done = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            let _stop = StopOnDrop(&gate);
            for _ in 0..3 {
                s.spawn(|| {
                    let mut seen = 0;
                    while let Some((round, chunk)) = gate.next(seen) {
                        seen = round;
                        done.fetch_add(chunk, Ordering::Relaxed);
                        gate.finished();
                    }
                });
            }
            for chunk in 1..=4 {
                gate.open(chunk, 3);
                gate.wait_done();
                assert_eq!(done.load(Ordering::Relaxed), 3 * (1..=chunk).sum::<usize>());
            }
        });
    }
}
