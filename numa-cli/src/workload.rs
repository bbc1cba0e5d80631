//! `numatrace workload hot-chunks`: the pghot RFC's microbenchmark, so that the
//! test bed (and a user on an emulated CXL box) has a workload that makes
//! the kernel's latency threshold reject hot pages.
//!
//! Memory is placed with mbind(2) on the slow node, touched, then its policy
//! reset to the default so NUMA balancing may promote it.
use std::{
    io::Write,
    process::ExitCode,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use serde::Serialize;

use numa_core::topology::Node;

use crate::cli::HotChunksArgs;
use numa_core::rng::Rng;
use numa_host::system;

const PAGE: usize = 4096;
const MIB: usize = 1 << 20;
pub(crate) const MPOL_DEFAULT: libc::c_long = 0;
pub(crate) const MPOL_BIND: libc::c_long = 2;

/// An anonymous mapping, unmapped on drop.
pub(crate) struct Region {
    pub(crate) ptr: *mut u8,
    pub(crate) len: usize,
}

impl Region {
    pub(crate) fn new(len: usize, thp: bool) -> Result<Self> {
        // SAFETY: anonymous private mapping; the result is checked.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error()).context(format!("mmap {len} bytes"));
        }
        if !thp {
            // SAFETY: the range was just mapped by us.
            unsafe { libc::madvise(ptr, len, libc::MADV_NOHUGEPAGE) };
        }
        Ok(Region {
            ptr: ptr.cast(),
            len,
        })
    }

    pub(crate) fn mbind(&self, mode: libc::c_long, node: Option<u32>) -> Result<()> {
        let mask = NodeMask::of(node);
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
            return Err(std::io::Error::last_os_error())
                .context(format!("mbind(mode {mode}, node {node:?})"));
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

    /// Node of each page (move_pages with null nodes = query).
    pub(crate) fn page_nodes(&self) -> Vec<i32> {
        let pages: Vec<*mut libc::c_void> = (0..self.len)
            .step_by(PAGE)
            .map(|o| {
                // SAFETY: inside our mapping.
                unsafe { self.ptr.add(o).cast() }
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
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what new() mapped.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

#[derive(Debug, Serialize)]
struct Summary {
    pid: u32,
    slow_node: u32,
    dram_node: u32,
    slow_pages: usize,
    /// `[start, end)` of the accessed slow-node mapping, and of the cold
    /// one (`--cold-mb`).
    slow_vma: [u64; 2],
    cold_vma: Option<[u64; 2]>,
    cold_pages_on_dram_node_at_end: Option<usize>,
    /// Not asked with `--late-populate-ms`: a query of every page's node is
    /// CPU time, on which the scanner runs, at the ends of the run.
    slow_pages_on_slow_node_at_start: Option<usize>,
    slow_pages_on_dram_node_at_end: Option<usize>,
    chunk_visits: u64,
    accesses: u64,
    elapsed_s: f64,
    /// Microseconds spent accessing (idle gaps excluded): the RFC's "score".
    score_us: u64,
    /// CPU time of the access phase: system time is where hint faults
    /// (and any probe on them) are paid.
    user_ms: f64,
    sys_ms: f64,
    /// System-wide vmstat numa_hint_faults during the access phase.
    numa_hint_faults: u64,
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

/// The DRAM filler, touched on `dram_node`, when `--dram-mb` asks for one.
fn dram_filler(a: &HotChunksArgs, dram_node: u32) -> Result<Option<Region>> {
    if a.dram_mb == 0 {
        return Ok(None);
    }
    let r = Region::new(a.dram_mb as usize * MIB, a.thp)?;
    r.mbind(MPOL_BIND, Some(dram_node))?;
    r.touch_all();
    Ok(Some(r))
}

/// What the access phase did.
struct Accessed {
    visits: u64,
    accesses: u64,
    busy: Duration,
}

/// Random accesses to random chunks of `slow` until `--duration` (or, with
/// `--min-faults`, until that many hint faults or `--max-duration`).
fn access_chunks(a: &HotChunksArgs, slow: &Region, start: Instant, faults0: u64) -> Accessed {
    // The first chunk of a late-populated mapping stays untouched.
    let first_chunk = usize::from(a.late_populate_ms > 0);
    let chunk_pages = (a.chunk_mb as usize * MIB) / PAGE;
    let chunks = a.slow_mb / a.chunk_mb;
    let mut rng = Rng::new(a.seed);
    let deadline = start + Duration::from_secs_f64(a.duration);
    let hard_deadline = start + Duration::from_secs_f64(a.max_duration.max(a.duration));
    let faults_so_far = || hint_faults().saturating_sub(faults0);
    let compute = (a.compute_ms > 0).then(|| Work::taking(Duration::from_millis(a.compute_ms)));
    let (mut visits, mut accesses, mut busy) = (0u64, 0u64, Duration::ZERO);
    loop {
        let now = Instant::now();
        let done = if a.visits > 0 {
            visits >= a.visits || now >= hard_deadline
        } else {
            now >= deadline
                && !(a.min_faults > 0 && now < hard_deadline && faults_so_far() < a.min_faults)
        };
        if done {
            break;
        }
        let span = chunks - first_chunk as u64;
        let chunk = first_chunk
            + if a.in_turn {
                visits % span
            } else {
                rng.next_u64() % span
            } as usize;
        if a.in_turn && a.idle_ms > 0 {
            std::thread::sleep(Duration::from_millis(a.idle_ms));
        }
        let t = Instant::now();
        for _ in 0..a.accesses {
            let page = chunk * chunk_pages + (rng.next_u64() as usize % chunk_pages);
            // SAFETY: page < slow_mb * MiB / PAGE, inside the mapping.
            unsafe {
                let p = slow.ptr.add(page * PAGE);
                p.write_volatile(p.read_volatile().wrapping_add(1));
            }
        }
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
    }
}

/// Threads started by `--idle-threads`, asleep until the process exits.
type Sleepers = Vec<std::thread::JoinHandle<()>>;

/// The accessed slow-node mapping, the cold one `--cold-mb` asks for, and
/// the idle threads, started after the mappings so that their stacks lie
/// below them (mmap places top-down) and come first in the scanner's
/// address-ordered walk.
fn slow_regions(a: &HotChunksArgs, node: u32) -> Result<(Region, Option<Region>, Sleepers)> {
    let hot = a.slow_mb as usize * MIB;
    if a.late_populate_ms > 0 {
        return late_populated(a, node);
    }
    // Each populated whole before the scanner first comes by, so that the
    // passes of its first two scan sequences protect all of it (touching
    // page by page, a slow machine may let the scanner visit the VMA
    // half-populated and then skip it for good as never accessed).
    if a.cold_mb == 0 {
        let hot = Region::fenced_one(hot, a.thp)?;
        hot.populate_on(node, 0..hot.len)?;
        return Ok((hot, None, idle_threads(a.idle_threads)?));
    }
    let (hot, cold) = Region::pair(hot, a.cold_mb as usize * MIB, a.thp)?;
    cold.populate_on(node, 0..cold.len)?;
    hot.populate_on(node, 0..hot.len)?;
    Ok((hot, Some(cold), idle_threads(a.idle_threads)?))
}

/// The slow mapping populated in two steps (see `--late-populate-ms`).
fn late_populated(a: &HotChunksArgs, node: u32) -> Result<(Region, Option<Region>, Sleepers)> {
    let r = Region::fenced_one(a.slow_mb as usize * MIB, a.thp)?;
    let chunk = a.chunk_mb as usize * MIB;
    r.populate_on(node, 0..chunk)?;
    let sleepers = idle_threads(a.idle_threads)?;
    compute_for(Duration::from_millis(a.late_populate_ms));
    r.populate_on(node, chunk..r.len)?;
    Ok((r, None, sleepers))
}

/// A node mask of 1024 bits for mbind(2) and set_mempolicy(2); none for
/// the default policy.
struct NodeMask(Option<[u64; 16]>);

impl NodeMask {
    fn of(node: Option<u32>) -> Self {
        NodeMask(node.map(|n| {
            let mut m = [0u64; 16];
            m[(n / 64) as usize % 16] |= 1 << (n % 64);
            m
        }))
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

pub fn hot_chunks(a: &HotChunksArgs) -> Result<ExitCode> {
    // Show up as "hot-chunks" in top/ps, not as another numatrace.
    // SAFETY: PR_SET_NAME with a NUL-terminated buffer of <= 16 bytes.
    unsafe { libc::prctl(libc::PR_SET_NAME, c"hot-chunks".as_ptr()) };
    let (slow_node, dram_node) = slow_and_dram_nodes(
        a.slow_node,
        a.dram_node,
        &system::nodes(),
        " (see `numatrace doctor`)",
    )?;
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
    let _dram = dram_filler(a, dram_node)?;
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
    let (slow, cold, _sleepers) = slow_regions(a, slow_node)?;
    let query = a.late_populate_ms == 0;
    let at_start = query.then(|| slow.pages_on(slow_node));

    let (user0, sys0) = cpu_times_ms();
    let faults0 = hint_faults();
    let start = Instant::now();
    let done = access_chunks(a, &slow, start, faults0);
    let (user1, sys1) = cpu_times_ms();
    let faults1 = hint_faults();
    let at_end = query.then(|| slow.pages_on(dram_node));
    let summary = Summary {
        pid: std::process::id(),
        slow_node,
        dram_node,
        slow_pages: slow.len / PAGE,
        slow_vma: slow.span(),
        cold_vma: cold.as_ref().map(Region::span),
        cold_pages_on_dram_node_at_end: cold.as_ref().map(|c| c.pages_on(dram_node)),
        slow_pages_on_slow_node_at_start: at_start,
        slow_pages_on_dram_node_at_end: at_end,
        chunk_visits: done.visits,
        accesses: done.accesses,
        elapsed_s: start.elapsed().as_secs_f64(),
        score_us: done.busy.as_micros() as u64,
        user_ms: user1 - user0,
        sys_ms: sys1 - sys0,
        numa_hint_faults: faults1.saturating_sub(faults0),
    };
    write_summary(a, &summary)?;
    Ok(ExitCode::SUCCESS)
}
