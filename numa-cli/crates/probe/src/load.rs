//! Loads the embedded BPF object and attaches one program per planned hook,
//! falling back from fentry/fexit to kprobe/kretprobe when the kernel
//! refuses tracing programs. Also the trivial per-mechanism trials of
//! `numatrace doctor`.
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use aya::{
    maps::{Array, RingBuf},
    programs::{FEntry, FExit, KProbe, KProbeError, ProgramError, TracePoint},
    Btf, Ebpf, EbpfLoader,
};
use numa_ebpf_common::{maps, programs as p, Counter, MigrateRet};

use crate::memory;
pub use crate::memory::DEFAULT_MAP_BUDGET;

use numa_core::{
    mapplan::MapPlan,
    params::{KernelHotness, KernelParams},
    plan::{
        AttachPlan, Hook, HookStatus, Mechanism, PlannedHook, ProgramStat, PMD_PASS, PTE_RANGE,
    },
    sampling::Sampling,
};

/// The BPF object built from `numa-ebpf` by build.rs.
pub static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/numa-ebpf"));

/// Entry or exit half of a hook's implementation.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Half {
    Entry,
    Exit,
}

/// The programs implementing `hook` with argument `layout` in the family of
/// `mechanism` (tracing: fentry/fexit; probes: kprobe/kretprobe).
fn programs(
    hook: Hook,
    layout: Option<&str>,
    mechanism: Mechanism,
) -> &'static [(&'static str, Half)] {
    use Half::{Entry, Exit};
    use Hook as H;
    let tracing = matches!(mechanism, Mechanism::Fentry | Mechanism::Fexit);
    match (hook, tracing) {
        (H::ScanRange, true) if layout == Some(PTE_RANGE) => {
            &[(p::FENTRY_SCAN_PTE, Entry), (p::FEXIT_SCAN_RANGE, Exit)]
        }
        (H::ScanRange, false) if layout == Some(PTE_RANGE) => {
            &[(p::KPROBE_SCAN_PTE, Entry), (p::KRETPROBE_SCAN_RANGE, Exit)]
        }
        (H::ThpScan, true) if layout == Some(PMD_PASS) => &[
            (p::FENTRY_THP_SCAN_PASS, Entry),
            (p::FEXIT_THP_SCAN_PASS, Exit),
        ],
        (H::ThpScan, false) if layout == Some(PMD_PASS) => &[
            (p::KPROBE_THP_SCAN_PASS, Entry),
            (p::KRETPROBE_THP_SCAN_PASS, Exit),
        ],
        (H::HintFault, true) => &[(p::FENTRY_HINT_FAULT, Entry)],
        (H::HintFault, false) => &[(p::KPROBE_HINT_FAULT, Entry)],
        // fexit reads the arguments too; the decision's exchange is known
        // without an entry program (numa-ebpf decision.rs).
        (H::Decision, true) => &[(p::FEXIT_DECISION, Exit)],
        (H::Decision, false) => &[(p::KPROBE_DECISION, Entry), (p::KRETPROBE_DECISION, Exit)],
        (H::DecisionExchange, true) => &[(p::FENTRY_DECISION_XCHG, Entry)],
        (H::DecisionExchange, false) => &[(p::KPROBE_DECISION_XCHG, Entry)],
        (H::ScanRange, true) => &[(p::FENTRY_SCAN_RANGE, Entry), (p::FEXIT_SCAN_RANGE, Exit)],
        (H::ScanRange, false) => &[
            (p::KPROBE_SCAN_RANGE, Entry),
            (p::KRETPROBE_SCAN_RANGE, Exit),
        ],
        (H::Migrate, true) => &[(p::FEXIT_MIGRATE, Exit)],
        (H::Migrate, false) => &[(p::KRETPROBE_MIGRATE, Exit)],
        (H::FaultAccount, true) => &[(p::FENTRY_FAULT_ACCOUNT, Entry)],
        (H::FaultAccount, false) => &[(p::KPROBE_FAULT_ACCOUNT, Entry)],
        (H::ThpFault, true) => &[(p::FENTRY_THP_FAULT, Entry)],
        (H::ThpFault, false) => &[(p::KPROBE_THP_FAULT, Entry)],
        (H::ThpScan, true) => &[(p::FENTRY_THP_SCAN, Entry)],
        (H::ThpScan, false) => &[(p::KPROBE_THP_SCAN, Entry)],
        (H::FaultCountReset, true) => &[(p::FENTRY_FAULT_COUNT_RESET, Entry)],
        (H::FaultCountReset, false) => &[(p::KPROBE_FAULT_COUNT_RESET, Entry)],
        (H::FaultCountDrop, true) => &[(p::FENTRY_FAULT_COUNT_DROP, Entry)],
        (H::FaultCountDrop, false) => &[(p::KPROBE_FAULT_COUNT_DROP, Entry)],
        (H::VmaSkip, _) => &[(p::TP_SKIP_VMA, Entry)],
        (H::MigrateTracepoint, _) => &[(p::TP_MIGRATE_PAGES, Entry)],
        (H::ThreadExit, _) => &[(p::TP_THREAD_EXIT, Entry)],
        (H::Demote, true) => &[(p::FEXIT_DEMOTE, Exit)],
        // A kretprobe cannot see the folio it would record.
        (H::Demote, false) => &[],
        (H::DemoteBatch, true) => &[(p::FEXIT_DEMOTE_BATCH, Exit)],
        (H::DemoteBatch, false) => &[],
        (H::PromoteDst, true) => &[(p::FEXIT_PROMOTE_DST, Exit)],
        (H::PromoteDst, false) => &[(p::KRETPROBE_PROMOTE_DST, Exit)],
    }
}

/// The concrete mechanism of one half within a family.
fn half_mechanism(family: Mechanism, half: Half) -> Mechanism {
    match (family, half) {
        (Mechanism::Tracepoint, _) => Mechanism::Tracepoint,
        (Mechanism::Fentry | Mechanism::Fexit, Half::Entry) => Mechanism::Fentry,
        (Mechanism::Fentry | Mechanism::Fexit, Half::Exit) => Mechanism::Fexit,
        (_, Half::Entry) => Mechanism::Kprobe,
        (_, Half::Exit) => Mechanism::Kretprobe,
    }
}

fn unload(ebpf: &mut Ebpf, name: &str, mechanism: Mechanism) {
    let Some(prog) = ebpf.program_mut(name) else {
        return;
    };
    let _ = match mechanism {
        Mechanism::Fentry => <&mut FEntry>::try_from(prog).map(|p| p.unload()),
        Mechanism::Fexit => <&mut FExit>::try_from(prog).map(|p| p.unload()),
        Mechanism::Kprobe | Mechanism::Kretprobe => {
            <&mut KProbe>::try_from(prog).map(|p| p.unload())
        }
        Mechanism::Tracepoint => <&mut TracePoint>::try_from(prog).map(|p| p.unload()),
    };
}

/// Attaches every program of one family for `hook`; all or nothing.
fn attach_family(
    ebpf: &mut Ebpf,
    btf: Option<&Btf>,
    h: &PlannedHook,
    family: Mechanism,
    target: &str,
    options: &LoadOptions,
) -> Result<()> {
    let progs = programs(h.hook, h.layout.as_deref(), family)
        .iter()
        .map(|&(name, half)| {
            if !options.empty_twin_of(name) {
                return Ok((name, half));
            }
            p::empty_twin(name).map(|e| (e, half)).ok_or_else(|| {
                anyhow!("--empty-programs has no program for {name}: it needs fentry/fexit")
            })
        })
        .collect::<Result<Vec<_>>>()?;
    if progs.is_empty() {
        bail!(
            "no {} program for the {} hook: it needs fentry/fexit",
            family.name(),
            h.hook.name()
        );
    }
    for (i, &(name, half)) in progs.iter().enumerate() {
        let m = half_mechanism(family, half);
        if let Err(e) = attach_one(ebpf, btf, name, m, target) {
            for &(done, h) in &progs[..i] {
                unload(ebpf, done, half_mechanism(family, h));
            }
            return Err(e.context(format!("{} {name}", m.name())));
        }
    }
    Ok(())
}

/// Loads and attaches one program; the error carries the kernel's answer.
fn attach_one(
    ebpf: &mut Ebpf,
    btf: Option<&Btf>,
    name: &str,
    mechanism: Mechanism,
    target: &str,
) -> Result<()> {
    let prog = ebpf
        .program_mut(name)
        .ok_or_else(|| anyhow!("program {name} missing from the BPF object"))?;
    let need_btf = || {
        btf.ok_or_else(|| {
            anyhow!(
                "{} needs kernel BTF ({})",
                mechanism.name(),
                super::discover::BTF_VMLINUX
            )
        })
    };
    match mechanism {
        Mechanism::Fentry => {
            let prog: &mut FEntry = prog.try_into()?;
            prog.load(target, need_btf()?)?;
            prog.attach()?;
        }
        Mechanism::Fexit => {
            let prog: &mut FExit = prog.try_into()?;
            prog.load(target, need_btf()?)?;
            prog.attach()?;
        }
        Mechanism::Kprobe | Mechanism::Kretprobe => {
            let prog: &mut KProbe = prog.try_into()?;
            prog.load()?;
            prog.attach(target, 0)?;
        }
        Mechanism::Tracepoint => {
            let (cat, tp) = target
                .split_once(':')
                .ok_or_else(|| anyhow!("tracepoint {target} is not category:name"))?;
            let prog: &mut TracePoint = prog.try_into()?;
            prog.load()?;
            prog.attach(cat, tp)?;
        }
    }
    Ok(())
}

/// Why the kernel refused, read from the error's evidence: the probe file
/// aya could not open, and the errno of the failed call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    NoKprobes,
    NoTracefs,
    Eperm,
}

fn refusal(e: &anyhow::Error) -> Option<Refusal> {
    for cause in e.chain() {
        let kprobe = match cause.downcast_ref::<ProgramError>() {
            Some(ProgramError::KProbeError(k)) => Some(k),
            _ => cause.downcast_ref::<KProbeError>(),
        };
        if let Some(KProbeError::FileError { filename, .. }) = kprobe {
            if filename.to_string_lossy().contains("kprobe") {
                return Some(Refusal::NoKprobes);
            }
        }
        let Some(io) = cause.downcast_ref::<std::io::Error>() else {
            continue;
        };
        match io.raw_os_error() {
            Some(libc::EPERM) => return Some(Refusal::Eperm),
            // aya's own error when it cannot find tracefs carries no errno.
            None if io.kind() == std::io::ErrorKind::Other
                && io.to_string() == "tracefs not found" =>
            {
                return Some(Refusal::NoTracefs)
            }
            _ => {}
        }
    }
    None
}

/// Puts the kernel's answer in plain words, keeping the raw error.
pub fn explain(mechanism: Mechanism, e: &anyhow::Error) -> String {
    let raw = format!("{e:#}");
    let plain = match refusal(e) {
        Some(Refusal::NoKprobes) => "the kernel has no kprobes (CONFIG_KPROBES off)",
        Some(Refusal::Eperm) if matches!(mechanism, Mechanism::Fentry | Mechanism::Fexit) => {
            "the kernel refuses tracing programs (fentry/fexit: EPERM)"
        }
        Some(Refusal::Eperm) => "permission denied (EPERM): run as root",
        Some(Refusal::NoTracefs) => {
            "tracefs is not mounted (mount -t tracefs nodev /sys/kernel/tracing)"
        }
        None => return raw,
    };
    format!("{plain} [{raw}]")
}

/// The BPF programs' log ring (aya-log). Its records are few (each
/// condition is logged at its first occurrence and then at powers of two),
/// so the reader empties it whenever it drains the event ring.
pub struct BpfLog(aya_log::EbpfLogger<&'static dyn log::Log>);

impl BpfLog {
    /// Hands every pending record to the `log` logger.
    pub fn flush(&mut self) {
        self.0.flush();
    }
}

/// Loaded, attached probes. Dropping this detaches everything.
pub struct Probes {
    ebpf: Ebpf,
    run_stats: Option<std::os::fd::OwnedFd>,
    /// CLOCK_MONOTONIC when attaching began: no stamp is older.
    pub attach_started_ns: u64,
    pub plan: AttachPlan,
    pub params: KernelParams,
    pub options: LoadOptions,
    /// The stamp array's spans and sampling rate under the budget.
    pub map_plan: MapPlan,
    /// Each map's kernel memory after load (fdinfo `memlock`).
    pub map_bytes: Vec<(String, u64)>,
    /// numatrace's kdamond (`--truth damon`), stopped when the probes are
    /// dropped, after the programs are detached.
    pub kdamond: Option<numa_host::damon::Kdamond>,
}

/// User-chosen sizes, filters and sampling.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// Kernel memory all maps may take (bytes); sets the sampling rate.
    pub map_budget: u64,
    pub ring_bytes: u32,
    pub sample_every: u64,
    pub filter_tgid: u32,
    pub filter_cgroup: u64,
    /// Depth of `filter_cgroup` below the cgroup v2 root.
    pub filter_cgroup_level: u32,
    /// Attach the programs that do nothing instead (see numa-ebpf empty.rs).
    pub empty_programs: bool,
    /// Attach these programs' empty twins instead, the others as they are
    /// (ablation: which program's work changes what the kernel does).
    pub empty_only: Vec<&'static str>,
    /// The thread id of the kdamond whose damon:damon_aggregated regions
    /// are recorded (None: the tracepoint is not attached).
    pub damon_pid: Option<u32>,
}

impl LoadOptions {
    /// Whether `program`'s empty twin is attached in its place.
    fn empty_twin_of(&self, program: &str) -> bool {
        self.empty_programs || self.empty_only.contains(&program)
    }
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            map_budget: DEFAULT_MAP_BUDGET,
            ring_bytes: numa_ebpf_common::DEFAULT_RING_BYTES,
            sample_every: 1,
            filter_tgid: 0,
            filter_cgroup: 0,
            filter_cgroup_level: 0,
            empty_programs: false,
            empty_only: Vec::new(),
            damon_pid: None,
        }
    }
}

fn migrate_convention(plan: &AttachPlan) -> MigrateRet {
    match plan.hook(Hook::Migrate).and_then(|h| h.target.as_deref()) {
        Some("migrate_misplaced_page") => MigrateRet::OneOnSuccess,
        _ => MigrateRet::ZeroOnSuccess,
    }
}

/// The mm_migrate_pages reason number when the tracepoint can report the
/// misplaced-folio migration's result (its fields and reasons are known and
/// the plan has it), so the migrate hook needs no fexit of its own.
fn migrate_via_tracepoint(plan: &AttachPlan, k: &KernelParams) -> Option<u32> {
    let tp = plan.hook(Hook::MigrateTracepoint)?;
    if tp.target.is_none() || tp.mechanism.is_none() || k.tp_migrate.is_none() {
        return None;
    }
    k.numa_misplaced_reason()
}

/// The most verbose level the programs log at: what the logger would
/// show anyway, so a record the user would not see is never written.
/// aya-log's levels count like `log::LevelFilter` (0 off, 1 error .. 5 trace).
fn bpf_log_level() -> u8 {
    log::max_level() as u8
}

/// The ring buffer's size: a power of two of at least a page.
fn ring_bytes(o: &LoadOptions) -> u32 {
    o.ring_bytes
        .max(4096)
        .checked_next_power_of_two()
        .unwrap_or(1 << 31)
}

/// `misplaced`: see [`migrate_via_tracepoint`].
fn load_object(
    plan: &AttachPlan,
    k: &KernelParams,
    o: &LoadOptions,
    misplaced: Option<u32>,
    stamps: &MapPlan,
) -> Result<Ebpf> {
    let convention = migrate_convention(plan) as u32;
    let misplaced = misplaced.unwrap_or(u32::MAX);
    let (tp_ok, tp_failed, tp_reason) = k.tp_migrate.unwrap_or((8, 16, 0));
    let ring_bytes = ring_bytes(o);
    if k.hz == 0 && k.hotness == KernelHotness::Latency {
        log::warn!(
            "the kernel's HZ is unknown (no /boot/config-RELEASE, /proc/timer_list unreadable): \
             faults on folios the scanner protected get no scan stamp"
        );
    }
    let (jiffy_ms_num, jiffy_ms_den) = numa_core::params::jiffy_ms_ratio(k.hz).unwrap_or((0, 1));
    // The ring wakes its reader once this much is pending (else on a timer).
    let ring_wake_bytes = u64::from(ring_bytes / 4);
    let mut ebpf = EbpfLoader::new()
        .override_global("MIGRATE_RET_CONVENTION", &convention, true)
        .override_global("SYM_NB_MODE", &k.sym_nb_mode, true)
        .override_global("NB_MODE_AT_LOAD", &k.nb_mode_at_load, true)
        .override_global("SYM_HOT_THRESHOLD", &k.sym_hot_threshold, true)
        .override_global("SYM_NODE_DATA", &k.sym_node_data, true)
        .override_global("OFF_NBP_THRESHOLD", &k.off_nbp_threshold, true)
        .override_global("OFF_TASK_MM", &k.off_task_mm, true)
        .override_global("OFF_VMF_ADDRESS", &k.off_vmf_address, true)
        .override_global("OFF_PROMOTE_CANDIDATE", &k.off_promote_candidate, true)
        .override_global("SYM_PER_CPU_OFFSET", &k.sym_per_cpu_offset, true)
        .override_global("OFF_PCP_NODESTATS", &k.off_pcp_nodestats, true)
        .override_global("OFF_CANDIDATE_DIFF", &k.off_candidate_diff, true)
        .override_global("TOPTIER_MASK", &k.toptier_mask, true)
        .override_global("CPUPID_MASK", &k.cpupid_mask, true)
        .override_global("ACCESS_TIME_BUCKETS", &k.access_time_buckets, true)
        .override_global("JIFFY_MS_NUM", &jiffy_ms_num, true)
        .override_global("JIFFY_MS_DEN", &jiffy_ms_den, true)
        .override_global("ACCESS_PGSHIFT", &k.access_pgshift, true)
        .override_global("NODES_PGSHIFT", &k.nodes_pgshift, true)
        .override_global("OFF_LAST_CPUPID", &k.off_last_cpupid, true)
        .override_global("OFF_TASK_COMM", &k.off_task_comm, true)
        .override_global("OFF_TASK_FLAGS", &k.off_task_flags, true)
        .override_global("PG_HEAD_BIT", &k.pg_head_bit.unwrap_or(64), true)
        .override_global("OFF_FOLIO_ORDER", &k.off_folio_order, true)
        .override_global("OFF_MEMCG_DATA", &k.off_memcg_data, true)
        .override_global(
            "OFF_MEMCG_CGROUP",
            &k.off_memcg_cgroup.unwrap_or(u32::MAX),
            true,
        )
        .override_global(
            "OFF_OBJCG_MEMCG",
            &k.off_objcg_memcg.unwrap_or(u32::MAX),
            true,
        )
        .override_global("OFF_CGROUP_KN", &k.off_cgroup_kn, true)
        .override_global("OFF_KN_ID", &k.off_kn_id, true)
        .override_global("OFF_MM_HINT_FAULTS", &k.off_mm_hint_faults, true)
        .override_global("SAMPLE_EVERY", &o.sample_every.max(1), true)
        .override_global("FILTER_TGID", &o.filter_tgid, true)
        .override_global("FILTER_CGROUP", &o.filter_cgroup, true)
        .override_global("FILTER_CGROUP_LEVEL", &o.filter_cgroup_level, true)
        .override_global("DAMON_PID", &o.damon_pid.unwrap_or(0), true)
        .override_global("RING_WAKE_BYTES", &ring_wake_bytes, true)
        .override_global("TP_MIGRATE_SUCCEEDED_OFF", &tp_ok, true)
        .override_global("TP_MIGRATE_FAILED_OFF", &tp_failed, true)
        .override_global("TP_MIGRATE_REASON_OFF", &tp_reason, true)
        .override_global("TP_REASON_NUMA_MISPLACED", &misplaced, true)
        .override_global(aya_log::LEVEL, &bpf_log_level(), true)
        .override_global("VMEMMAP_SYM", &k.sym_vmemmap_base, true)
        .override_global("PAGE_STRUCT_SIZE", &u64::from(k.page_struct_size), true)
        .override_global("FOLLOW_SHIFT", &stamps.shift, true)
        .override_global("SPAN_START", &stamps.span_starts(), true)
        .override_global("SPAN_END", &stamps.span_ends(), true)
        .override_global("SPAN_BASE", &stamps.span_bases(), true)
        .map_max_entries(
            maps::STAMPS,
            u32::try_from(stamps.slots).unwrap_or(u32::MAX),
        )
        .map_max_entries(maps::EVENTS, ring_bytes)
        // THREADS is task storage, which aya creates but has no type for.
        .allow_unsupported_maps()
        .load(EBPF_OBJECT)
        .context("loading the BPF object (creating maps)")?;
    let mut cpu_node: Array<_, u32> = Array::try_from(
        ebpf.map_mut(maps::CPU_NODE)
            .ok_or_else(|| anyhow!("map {} missing", maps::CPU_NODE))?,
    )?;
    for (cpu, node) in &k.cpu_node {
        if *cpu < numa_ebpf_common::MAX_CPUS {
            cpu_node.set(*cpu, node, 0)?;
        }
    }
    Ok(ebpf)
}

/// Attaches one resolved hook, falling back from tracing programs to
/// probes, and records the outcome in `h`.
fn attach_hook(ebpf: &mut Ebpf, btf: Option<&Btf>, h: &mut PlannedHook, options: &LoadOptions) {
    let (Some(target), Some(first)) = (h.target.clone(), h.mechanism) else {
        return;
    };
    let mut errors = Vec::new();
    let mut mechanism = Some(first);
    while let Some(m) = mechanism {
        match attach_family(ebpf, btf, h, m, &target, options) {
            Ok(()) => {
                log::debug!("{:?}: attached {} to {target}", h.hook, m.name());
                h.mechanism = Some(m);
                h.status = HookStatus::Attached;
                if !errors.is_empty() {
                    h.detail = format!("{}; degraded to {}", errors.join("; "), m.name());
                }
                return;
            }
            Err(e) => {
                let why = format!("{} refused: {}", m.name(), explain(m, &e));
                log::debug!("{:?}: {why}", h.hook);
                errors.push(why);
            }
        }
        mechanism = m.probe_fallback();
    }
    h.status = HookStatus::Refused;
    h.detail = errors.join("; ");
}

/// Attaches every resolved hook of `plan`. Hooks that cannot be attached
/// are marked `Refused` with the kernel's error; the caller decides whether
/// an incomplete plan is fatal (`plan.complete`).
pub fn attach(mut plan: AttachPlan, options: &LoadOptions) -> Result<Probes> {
    let attach_started_ns = numa_host::clock::monotonic_ns();
    let params = super::params::resolve();
    let misplaced = migrate_via_tracepoint(&plan, &params);
    let map_plan = memory::plan(&params, options.map_budget, u64::from(ring_bytes(options)))?;
    let mut ebpf = load_object(&plan, &params, options, misplaced, &map_plan)?;
    let map_bytes = memory::measured(&ebpf);
    let btf = Btf::from_sys_fs().ok();
    let via_tp = misplaced.is_some();
    for h in plan.hooks.iter_mut() {
        if via_tp && h.hook == Hook::Migrate {
            continue; // after the tracepoint, below
        }
        attach_hook(&mut ebpf, btf.as_ref(), h, options);
    }
    let tp_attached = plan
        .hook(Hook::MigrateTracepoint)
        .is_some_and(|h| h.status == HookStatus::Attached);
    if let Some(h) = plan.hooks.iter_mut().find(|h| h.hook == Hook::Migrate) {
        if via_tp && tp_attached {
            h.status = HookStatus::Attached;
            // The target stays the function whose result this is.
            h.detail = "result seen at migrate:mm_migrate_pages (reason numa_misplaced) \
                inside the call: no fexit, one trampoline fewer per promotion"
                .to_owned();
            h.mechanism = Some(Mechanism::Tracepoint);
        } else if via_tp {
            // The tracepoint did not attach, so its program never runs:
            // the fexit reports the result after all.
            attach_hook(&mut ebpf, btf.as_ref(), h, options);
        }
    }
    if let Some(h) = plan.hooks.iter_mut().find(|h| h.hook == Hook::Demote) {
        if h.status == HookStatus::Attached {
            let memcg = memcg_path(&params);
            h.detail = if h.detail.is_empty() {
                memcg.to_owned()
            } else {
                format!("{}; {memcg}", h.detail)
            };
        }
    }
    plan.refresh_complete();
    if let Some(pid) = options.damon_pid {
        attach_damon(&mut ebpf, options)
            .with_context(|| format!("recording DAMON's regions (kdamond {pid})"))?;
    }
    Ok(Probes {
        ebpf,
        run_stats: None,
        attach_started_ns,
        plan,
        params,
        options: options.clone(),
        map_plan,
        map_bytes,
        kdamond: None,
    })
}

/// Where damon:damon_aggregated's fields are in the record that
/// numa-ebpf damon.rs reads at fixed offsets: (name, offset, size).
const DAMON_FIELDS: [(&str, u32, u32); 6] = [
    ("target_id", 8, 8),
    ("nr_regions", 16, 4),
    ("start", 24, 8),
    ("end", 32, 8),
    ("nr_accesses", 40, 4),
    ("age", 44, 4),
];

/// Attaches damon:damon_aggregated after checking that its record has the
/// layout the program reads. The caller asked for DAMON, so every failure
/// is an error rather than a hook left out.
fn attach_damon(ebpf: &mut Ebpf, options: &LoadOptions) -> Result<()> {
    let root = super::discover::tracefs().ok_or_else(|| {
        anyhow!("tracefs is not mounted (mount -t tracefs nodev /sys/kernel/tracing)")
    })?;
    let path = std::path::Path::new(root).join("events/damon/damon_aggregated/format");
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
            "this kernel has no damon:damon_aggregated tracepoint (CONFIG_DAMON off: \
             Debian's 6.1 has none); --truth damon needs DAMON"
        ),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    check_damon_format(&text).with_context(|| format!("checking {}", path.display()))?;
    let name = if options.empty_twin_of(p::TP_DAMON_AGGREGATED) {
        p::empty_twin(p::TP_DAMON_AGGREGATED)
            .ok_or_else(|| anyhow!("no empty twin of {}", p::TP_DAMON_AGGREGATED))?
    } else {
        p::TP_DAMON_AGGREGATED
    };
    attach_one(
        ebpf,
        None,
        name,
        Mechanism::Tracepoint,
        "damon:damon_aggregated",
    )
    .map_err(|e| anyhow!("{}", explain(Mechanism::Tracepoint, &e)))
    .with_context(|| format!("tracepoint {name}"))
}

/// Whether a damon:damon_aggregated `format` file has the fields the
/// program reads at the offsets and sizes it reads them.
pub fn check_damon_format(text: &str) -> Result<()> {
    let fields = numa_core::params::parse_tp_fields(text);
    for (name, offset, size) in DAMON_FIELDS {
        match fields.get(name) {
            None => {
                bail!("damon:damon_aggregated has no field {name} (expected at offset {offset})")
            }
            Some(&(o, _)) if o != offset => bail!(
                "damon:damon_aggregated field {name} is at offset {o}, expected {offset}: \
                 this kernel's record layout is not one numatrace reads"
            ),
            Some(&(_, z)) if z != size => bail!(
                "damon:damon_aggregated field {name} has size {z}, expected {size} (at offset \
                 {offset}): this kernel's record layout is not one numatrace reads"
            ),
            Some(_) => {}
        }
    }
    Ok(())
}

/// How a demoted folio's memory cgroup is read on this kernel, for
/// `doctor`'s attach plan.
fn memcg_path(k: &KernelParams) -> &'static str {
    let known = k.off_memcg_data != 0
        && k.off_memcg_cgroup.is_some()
        && k.off_cgroup_kn != 0
        && k.off_kn_id != 0;
    match (known, k.off_objcg_memcg) {
        (false, _) => "memory cgroup not read: BTF lacks folio.memcg_data, mem_cgroup.css.cgroup, cgroup.kn or kernfs_node.id",
        (true, Some(_)) => "memory cgroup: folio.memcg_data -> obj_cgroup.memcg -> css.cgroup -> kn.id (user folios charged to object cgroups)",
        (true, None) => "memory cgroup: folio.memcg_data -> mem_cgroup.css.cgroup -> kn.id",
    }
}

impl Probes {
    /// The per-folio sampling in force: the plan, the kernel's figure for
    /// all maps, and the followed folios stamped so far.
    pub fn sampling(&self) -> Sampling {
        let folios = self
            .counters()
            .ok()
            .and_then(|c| c.get(Counter::StampInserts as usize).copied())
            .unwrap_or(0);
        Sampling::new(&self.map_plan, self.map_bytes_total(), folios)
    }

    /// The kernel's memory figure for all maps (fdinfo `memlock`).
    pub fn map_bytes_total(&self) -> u64 {
        self.map_bytes.iter().map(|(_, b)| b).sum()
    }

    /// Every counter summed over CPUs, indexed by [`Counter`].
    pub fn counters(&self) -> Result<Vec<u64>> {
        let mut values = read_counters(&self.ebpf)?;
        if let Some(slot) = values.get_mut(Counter::RunsMissed as usize) {
            *slot = self.runs_missed();
        }
        Ok(values)
    }

    /// Runs of numatrace's programs the kernel skipped, summed (see
    /// [`Counter::RunsMissed`]).
    pub fn runs_missed(&self) -> u64 {
        self.ebpf
            .programs()
            .filter_map(|(_, prog)| runs_missed(prog))
            .sum()
    }

    /// A per-CPU u64 array summed over CPUs.
    pub fn summed(&self, name: &str) -> Result<Vec<u64>> {
        crate::percpu::summed(&self.ebpf, name)
    }

    /// Whether the probes' histogram maps (`HIST_*`) are still all zero,
    /// judged from `counters` read before them. The probes count a fault
    /// there only when its record does not reach the ring: sampled out,
    /// filtered out, or dropped. Without sampling or a filter and with no
    /// ring drop in `counters`, none was; a drop after `counters` were
    /// read shows in the next snapshot's, whose maps are then read.
    pub fn histograms_empty(&self, counters: &[u64]) -> bool {
        histograms_empty(&self.options, counters)
    }

    /// Whether snapshots read each per-CPU array with one syscall (see
    /// [`crate::percpu`]); the error says why not.
    pub fn batch_reads(&self) -> Result<()> {
        crate::percpu::batch_lookup(&self.ebpf, maps::COUNTERS)
    }

    /// Run counts and run time of every attached program (needs
    /// [`Probes::enable_run_stats`] or `kernel.bpf_stats_enabled=1`).
    pub fn program_stats(&self) -> Vec<ProgramStat> {
        self.ebpf
            .programs()
            .filter_map(|(name, prog)| {
                let info = prog.info().ok()?;
                let run_count = info.run_count();
                let run_time_ns = info.run_time().as_nanos() as u64;
                Some(ProgramStat {
                    name: name.to_owned(),
                    run_count,
                    run_time_ns,
                    ns_per_run: if run_count == 0 {
                        0.0
                    } else {
                        run_time_ns as f64 / run_count as f64
                    },
                    xlated_bytes: info.size_translated().unwrap_or(0),
                    jited_bytes: info.size_jitted(),
                    runs_missed: runs_missed(prog).unwrap_or(0),
                })
            })
            .filter(|p| p.run_count > 0 || p.runs_missed > 0)
            .collect()
    }

    /// Turns on the kernel's BPF run-time accounting while `self` lives.
    pub fn enable_run_stats(&mut self) -> Result<()> {
        let fd = aya::sys::enable_stats(aya::sys::Stats::RunTime)
            .context("enabling BPF run-time stats")?;
        self.run_stats = Some(fd);
        Ok(())
    }

    /// Takes the ring buffer out (once) for the event reader.
    /// The programs' log records (their rare conditions), for the reader
    /// to forward to the `log` logger; None (with a warning) if the log
    /// ring cannot be had, which costs only those messages.
    pub fn take_log(&mut self) -> Option<BpfLog> {
        match aya_log::EbpfLogger::init(&mut self.ebpf) {
            Ok(l) => Some(BpfLog(l)),
            Err(e) => {
                log::warn!("the probes' log messages will not be shown: {e}");
                None
            }
        }
    }

    pub fn take_events(&mut self) -> Result<RingBuf<aya::maps::MapData>> {
        let map = self
            .ebpf
            .take_map(maps::EVENTS)
            .ok_or_else(|| anyhow!("ring buffer {} already taken or missing", maps::EVENTS))?;
        Ok(RingBuf::try_from(map)?)
    }
}

/// The kernel's count of skipped runs of one loaded program, from its fd's
/// `recursion_misses` (fdinfo; counted whether or not run stats are on).
fn runs_missed(prog: &aya::programs::Program) -> Option<u64> {
    use std::os::fd::{AsFd, AsRawFd};
    let fd = prog.fd().ok()?.as_fd().as_raw_fd();
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).ok()?;
    fdinfo_field(&info, "recursion_misses")
}

fn fdinfo_field(info: &str, key: &str) -> Option<u64> {
    info.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == key).then(|| v.trim().parse().ok())?
    })
}

fn read_counters(ebpf: &Ebpf) -> Result<Vec<u64>> {
    crate::percpu::summed(ebpf, maps::COUNTERS)
}

/// See [`Probes::histograms_empty`].
fn histograms_empty(o: &LoadOptions, counters: &[u64]) -> bool {
    o.sample_every <= 1
        && o.filter_tgid == 0
        && o.filter_cgroup == 0
        && counter(counters, Counter::RingDrops) == 0
}

pub fn counter(values: &[u64], c: Counter) -> u64 {
    values.get(c as usize).copied().unwrap_or(0)
}

pub use numa_core::doctor::Trial;

/// Loads and attaches a trivial program with `mechanism` to `target`,
/// triggers it by reading a procfs file, and counts its hits.
pub fn trial(mechanism: Mechanism, target: &str) -> Trial {
    let name = match mechanism {
        Mechanism::Fentry | Mechanism::Fexit => p::TRIAL_FENTRY,
        Mechanism::Kprobe | Mechanism::Kretprobe => p::TRIAL_KPROBE,
        Mechanism::Tracepoint => p::TRIAL_TRACEPOINT,
    };
    let run = || -> Result<u64> {
        let mut ebpf = EbpfLoader::new()
            .allow_unsupported_maps()
            .load(EBPF_OBJECT)
            .context("loading the BPF object")?;
        let btf = Btf::from_sys_fs().ok();
        attach_one(&mut ebpf, btf.as_ref(), name, mechanism, target)?;
        for _ in 0..8 {
            let _ = std::fs::read_to_string("/proc/self/stat");
            std::thread::sleep(Duration::from_millis(2));
        }
        Ok(counter(&read_counters(&ebpf)?, Counter::TrialHits))
    };
    match run() {
        Ok(hits) => Trial {
            mechanism: mechanism.name().into(),
            target: target.to_owned(),
            ok: hits > 0,
            hits,
            detail: if hits > 0 {
                format!("attached to {target}, fired {hits} times")
            } else {
                format!("attached to {target} but never fired")
            },
        },
        Err(e) => Trial {
            mechanism: mechanism.name().into(),
            target: target.to_owned(),
            ok: false,
            hits: 0,
            detail: explain(mechanism, &e),
        },
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_memcg_path_follows_the_kernels_layout() {
        use super::*;
        let mut k = KernelParams {
            off_memcg_data: 56,
            off_memcg_cgroup: Some(0),
            off_cgroup_kn: 296,
            off_kn_id: 96,
            ..KernelParams::default()
        };
        assert!(memcg_path(&k).contains("-> mem_cgroup.css.cgroup"));
        k.off_objcg_memcg = Some(8);
        assert!(memcg_path(&k).contains("-> obj_cgroup.memcg"));
        k.off_kn_id = 0;
        assert!(memcg_path(&k).starts_with("memory cgroup not read"));
    }

    #[test]
    fn refusals_are_read_from_the_evidence() {
        use super::*;
        let no_kprobes = anyhow::Error::from(ProgramError::KProbeError(KProbeError::FileError {
            filename: "/sys/bus/event_source/devices/kprobe/type".into(),
            io_error: std::io::Error::from_raw_os_error(libc::ENOENT),
        }));
        assert!(explain(Mechanism::Kprobe, &no_kprobes).starts_with("the kernel has no kprobes"));
        let eperm = anyhow::Error::from(std::io::Error::from_raw_os_error(libc::EPERM))
            .context("loading fentry_hint_fault");
        assert!(explain(Mechanism::Fentry, &eperm).contains("refuses tracing programs"));
        assert!(explain(Mechanism::Tracepoint, &eperm).starts_with("permission denied"));
        let tracefs = anyhow::Error::from(std::io::Error::other("tracefs not found"));
        assert!(explain(Mechanism::Tracepoint, &tracefs).starts_with("tracefs is not mounted"));
        let other = anyhow::anyhow!("BTF is broken");
        assert_eq!(explain(Mechanism::Fentry, &other), "BTF is broken");
    }

    use super::*;

    /// Whether the BPF object names a symbol `name` (NUL-terminated in its
    /// string table).
    fn in_object(name: &str) -> bool {
        let needle = [name.as_bytes(), b"\0"].concat();
        EBPF_OBJECT.windows(needle.len()).any(|w| w == needle)
    }

    #[test]
    fn every_tracing_program_has_an_empty_twin_in_the_object() {
        // The tracing family (tracepoint hooks have one family).
        let layouts = [None, Some(PTE_RANGE), Some(PMD_PASS)];
        for (hook, layout) in Hook::ALL.into_iter().flat_map(|h| layouts.map(|l| (h, l))) {
            for &(name, _) in programs(hook, layout, Mechanism::Fentry) {
                assert!(in_object(name), "{name} is not in the BPF object");
                let twin =
                    p::empty_twin(name).unwrap_or_else(|| panic!("{name} has no empty twin"));
                assert!(in_object(twin), "{twin} is not in the BPF object");
            }
        }
        assert!(p::empty_twin(p::KPROBE_HINT_FAULT).is_none());
    }

    #[test]
    fn the_damon_program_its_twin_and_its_setting_are_in_the_object() {
        assert!(in_object(p::TP_DAMON_AGGREGATED));
        let twin = p::empty_twin(p::TP_DAMON_AGGREGATED).expect("a twin");
        assert!(in_object(twin), "{twin} is not in the BPF object");
        assert!(in_object("DAMON_PID"));
        assert_eq!(LoadOptions::default().damon_pid, None);
    }

    /// damon:damon_aggregated's format file as Linux 6.12 prints it.
    const DAMON_FORMAT_6_12: &str = "name: damon_aggregated\n\
ID: 1580\n\
format:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\
\n\
\tfield:unsigned long target_id;\toffset:8;\tsize:8;\tsigned:0;\n\
\tfield:unsigned int nr_regions;\toffset:16;\tsize:4;\tsigned:0;\n\
\tfield:unsigned long start;\toffset:24;\tsize:8;\tsigned:0;\n\
\tfield:unsigned long end;\toffset:32;\tsize:8;\tsigned:0;\n\
\tfield:unsigned int nr_accesses;\toffset:40;\tsize:4;\tsigned:0;\n\
\tfield:unsigned int age;\toffset:44;\tsize:4;\tsigned:0;\n\
\n\
print fmt: \"target_id=%lu nr_regions=%u %lu-%lu: %u %u\", REC->target_id, \
REC->nr_regions, REC->start, REC->end, REC->nr_accesses, REC->age\n";

    #[test]
    fn the_damon_format_of_6_12_is_accepted() {
        check_damon_format(DAMON_FORMAT_6_12).expect("6.12's layout");
        // Fields appended after age (newer kernels) change nothing read.
        let longer = DAMON_FORMAT_6_12.replace(
            "\n\nprint fmt",
            "\n\tfield:unsigned long nr_accesses_bp;\toffset:48;\tsize:8;\tsigned:0;\n\nprint fmt",
        );
        assert_ne!(longer, DAMON_FORMAT_6_12);
        check_damon_format(&longer).expect("a field appended");
    }

    #[test]
    fn a_shifted_damon_format_is_refused_naming_the_field() {
        // A context id ahead of target_id moves every field 8 bytes on.
        let shifted: String = DAMON_FORMAT_6_12
            .lines()
            .map(|line| {
                let moved = DAMON_FIELDS.iter().find_map(|&(name, offset, _)| {
                    line.contains(&format!(" {name};")).then(|| {
                        line.replace(&format!("offset:{offset};"), &format!("offset:{};", offset + 8))
                    })
                });
                let line = moved.unwrap_or_else(|| line.to_owned());
                if line.contains(" target_id;") {
                    format!("\tfield:unsigned long context_id;\toffset:8;\tsize:8;\tsigned:0;\n{line}\n")
                } else {
                    format!("{line}\n")
                }
            })
            .collect();
        assert!(shifted.contains("nr_accesses;\toffset:48;"), "{shifted}");
        let err = check_damon_format(&shifted)
            .expect_err("shifted")
            .to_string();
        assert!(
            err.contains("field target_id is at offset 16, expected 8"),
            "{err}"
        );
        let resized = DAMON_FORMAT_6_12.replace(
            "unsigned int age;\toffset:44;\tsize:4",
            "unsigned long age;\toffset:44;\tsize:8",
        );
        let err = check_damon_format(&resized)
            .expect_err("resized")
            .to_string();
        assert!(err.contains("field age has size 8, expected 4"), "{err}");
        let missing = DAMON_FORMAT_6_12.replace("unsigned int age;", "unsigned int aged;");
        let err = check_damon_format(&missing)
            .expect_err("missing")
            .to_string();
        assert!(err.contains("no field age"), "{err}");
        assert!(check_damon_format("").is_err());
    }

    #[test]
    fn histogram_maps_are_read_once_a_record_can_miss_the_ring() {
        let mut counters = vec![0; numa_ebpf_common::COUNTER_SLOTS as usize];
        let all = LoadOptions::default();
        assert!(histograms_empty(&all, &counters));
        for o in [
            LoadOptions {
                sample_every: 4,
                ..all.clone()
            },
            LoadOptions {
                filter_tgid: 7,
                ..all.clone()
            },
            LoadOptions {
                filter_cgroup: 9,
                ..all.clone()
            },
        ] {
            assert!(!histograms_empty(&o, &counters), "{o:?}");
        }
        counters[Counter::RingDrops as usize] = 1;
        assert!(!histograms_empty(&all, &counters));
    }
}

#[cfg(test)]
mod fdinfo_tests {
    #[test]
    fn recursion_misses_are_read_from_a_program_fdinfo() {
        let info = "pos:\t0\nflags:\t02000002\nprog_type:\t26\nrun_time_ns:\t0\n\
                    run_cnt:\t0\nrecursion_misses:\t17\nverified_insns:\t321\n";
        assert_eq!(super::fdinfo_field(info, "recursion_misses"), Some(17));
        assert_eq!(super::fdinfo_field(info, "run_cnt"), Some(0));
        assert_eq!(
            super::fdinfo_field("prog_type:\t26\n", "recursion_misses"),
            None
        );
        assert_eq!(
            super::fdinfo_field("recursion_misses:\tx\n", "recursion_misses"),
            None
        );
    }
}
