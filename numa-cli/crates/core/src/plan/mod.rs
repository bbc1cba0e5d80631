//! The attach plan: for each logical hook, which kernel function or
//! tracepoint numatrace uses, with which mechanism and argument layout.
//!
//! Built by a pure function from [`KernelFacts`] (what the running kernel
//! offers), so the per-version choices are unit-tested with facts recorded
//! from real kernels. `discover` reads those facts from the running system.
//! A function is a candidate only where BTF (when there is BTF) gives the
//! argument types its programs read, and each hook whose function the
//! design names says whether the plan uses it and why not.
use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

/// A logical hook: something numatrace needs to observe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Hook {
    /// Every NUMA hint fault.
    HintFault,
    /// should_numa_migrate_memory: the kernel's promotion decision.
    Decision,
    /// The decision's access-value exchange (folio_xchg_last_cpupid), on
    /// the fault-count RFC's kernel only: elsewhere the exchange is known
    /// from the folio's value, and a program on it would also run for
    /// every slow-node folio the scanner protects.
    #[serde(alias = "scan_stamp")]
    DecisionExchange,
    /// The scanner's range pass (PTEs made PROT_NONE).
    ScanRange,
    /// The misplaced-folio migration and its result.
    Migrate,
    /// task_numa_fault: fault accounting with flags.
    FaultAccount,
    /// Hint faults on transparent huge pages.
    ThpFault,
    /// Scanner passes over huge PMDs.
    ThpScan,
    /// sched:sched_skip_vma_numa, why a VMA was not scanned (6.12+).
    VmaSkip,
    /// migrate:mm_migrate_pages, promotions vs demotions by reason.
    MigrateTracepoint,
    /// init_numa_balancing: where the fault-count patch resets an mm's
    /// counter (every clone of a process).
    FaultCountReset,
    /// __mmdrop: an mm (and its fault-count counter) is freed.
    FaultCountDrop,
    /// sched:sched_process_exit: a thread's fault record still open when
    /// it exits is sent (a failed migration's fault can end without
    /// task_numa_fault).
    ThreadExit,
    /// Reclaim's demotion, per folio: the allocation callback
    /// `migrate_pages()` calls for each folio it moves down a tier.
    Demote,
    /// The end of one reclaim batch's demotion, with the pages it moved.
    DemoteBatch,
    /// A promotion's new folio on the top tier: the allocation callback
    /// the misplaced migration calls for the folio it moves up.
    PromoteDst,
}

impl Hook {
    pub const ALL: [Hook; 16] = [
        Hook::HintFault,
        Hook::Decision,
        Hook::DecisionExchange,
        Hook::ScanRange,
        Hook::Migrate,
        Hook::FaultAccount,
        Hook::ThpFault,
        Hook::ThpScan,
        Hook::VmaSkip,
        Hook::MigrateTracepoint,
        Hook::FaultCountReset,
        Hook::FaultCountDrop,
        Hook::ThreadExit,
        Hook::Demote,
        Hook::DemoteBatch,
        Hook::PromoteDst,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Hook::HintFault => "hint_fault",
            Hook::Decision => "decision",
            Hook::DecisionExchange => "decision_exchange",
            Hook::ScanRange => "scan_range",
            Hook::Migrate => "migrate",
            Hook::FaultAccount => "fault_account",
            Hook::ThpFault => "thp_fault",
            Hook::ThpScan => "thp_scan",
            Hook::VmaSkip => "vma_skip",
            Hook::MigrateTracepoint => "migrate_tracepoint",
            Hook::FaultCountReset => "fault_count_reset",
            Hook::FaultCountDrop => "fault_count_drop",
            Hook::ThreadExit => "thread_exit",
            Hook::Demote => "demote",
            Hook::DemoteBatch => "demote_batch",
            Hook::PromoteDst => "promote_dst",
        }
    }

    /// Whether numatrace's core measurement is incomplete without this hook.
    pub fn required(self) -> bool {
        matches!(
            self,
            Hook::HintFault | Hook::Decision | Hook::ScanRange | Hook::Migrate | Hook::FaultAccount
        )
    }

    /// Candidate kernel functions in order of preference. Tracepoint
    /// hooks have none.
    fn candidates(self) -> &'static [Candidate] {
        // A struct literal, so that the arrays below are promoted to statics.
        macro_rules! c {
            ($func:expr, $layout:expr, $reads:expr $(,)?) => {
                Candidate {
                    func: $func,
                    layout: $layout,
                    reads: $reads,
                }
            };
        }
        match self {
            // No do_numa_page: see `design_without_program`.
            Hook::HintFault => &[
                c!("numa_migrate_check", "folio", &[(0, FOLIO), (2, ULONG)]),
                c!("numa_migrate_prep", "page", &[(0, PAGE), (2, ULONG)]),
            ],
            Hook::Decision => &[c!(
                "should_numa_migrate_memory",
                "folio",
                &[(2, INT), (3, INT)],
            )],
            Hook::DecisionExchange => &[
                c!("folio_xchg_last_cpupid", "folio", &[(0, FOLIO), (1, INT)]),
                c!("page_cpupid_xchg_last", "page", &[(0, PAGE), (1, INT)]),
            ],
            // change_pte_range runs once per page table (<= 2 MiB) for every
            // mprotect too; the programs keep the calls with MM_CP_PROT_NUMA.
            Hook::ScanRange => &[
                c!(
                    "change_pte_range",
                    PTE_RANGE,
                    &[(3, ULONG), (4, ULONG), (6, ULONG)],
                ),
                c!(
                    "change_prot_numa",
                    "vma,start,end",
                    &[(1, ULONG), (2, ULONG)]
                ),
            ],
            Hook::Migrate => &[
                c!("migrate_misplaced_folio", "folio", &[(0, FOLIO)]),
                c!("migrate_misplaced_page", "page", &[(0, PAGE)]),
            ],
            Hook::FaultAccount => &[c!(
                "task_numa_fault",
                "cpupid,node,pages,flags",
                &[(1, INT), (2, INT), (3, INT)],
            )],
            Hook::ThpFault => &[c!("do_huge_pmd_numa_page", "vmf", &[])],
            Hook::ThpScan => &[c!("change_huge_pmd", "pmd", &[])],
            Hook::FaultCountReset => &[c!("init_numa_balancing", "clone_flags,task", &[(1, TASK)])],
            Hook::FaultCountDrop => &[c!("__mmdrop", "mm", &[(0, MM)])],
            // Renamed over the years: alloc_demote_page (6.1),
            // alloc_demote_folio (6.5), alloc_migrate_folio (6.11, shared
            // with DAMON's migrations), alloc_demote_folio again (7.x).
            Hook::Demote => &[
                c!("alloc_demote_folio", "folio", &[(0, FOLIO)]),
                c!("alloc_migrate_folio", "folio", &[(0, FOLIO)]),
                c!("alloc_demote_page", "page", &[(0, PAGE)]),
            ],
            Hook::DemoteBatch => &[c!("demote_folio_list", "folios,pgdat", &[])],
            // Only its result is read: the argument's type does not matter.
            Hook::PromoteDst => &[
                c!("alloc_misplaced_dst_folio", "folio", &[]),
                c!("alloc_misplaced_dst_page", "page", &[]),
            ],
            Hook::VmaSkip | Hook::MigrateTracepoint | Hook::ThreadExit => &[],
        }
    }

    /// The function the design (the fault-count RFC's patches) puts this
    /// hook in, where it names one.
    pub fn design(self) -> Option<&'static str> {
        match self {
            Hook::HintFault => Some("do_numa_page"),
            Hook::Decision => Some("should_numa_migrate_memory"),
            Hook::ScanRange => Some("change_pte_range"),
            Hook::Migrate => Some("migrate_misplaced_folio"),
            _ => None,
        }
    }

    fn tracepoint(self) -> Option<(&'static str, &'static str)> {
        match self {
            Hook::VmaSkip => Some(("sched", "sched_skip_vma_numa")),
            Hook::MigrateTracepoint => Some(("migrate", "mm_migrate_pages")),
            Hook::ThreadExit => Some(("sched", "sched_process_exit")),
            _ => None,
        }
    }

    /// fentry or fexit: fexit where the return value is the point.
    fn wants_return(self) -> bool {
        matches!(
            self,
            Hook::Decision
                | Hook::ScanRange
                | Hook::Migrate
                | Hook::Demote
                | Hook::DemoteBatch
                | Hook::PromoteDst
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mechanism {
    Fentry,
    Fexit,
    Kprobe,
    Kretprobe,
    Tracepoint,
}

impl Mechanism {
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Fentry => "fentry",
            Mechanism::Fexit => "fexit",
            Mechanism::Kprobe => "kprobe",
            Mechanism::Kretprobe => "kretprobe",
            Mechanism::Tracepoint => "tracepoint",
        }
    }

    /// The fallback when tracing programs are refused.
    pub fn probe_fallback(self) -> Option<Mechanism> {
        match self {
            Mechanism::Fentry => Some(Mechanism::Kprobe),
            Mechanism::Fexit => Some(Mechanism::Kretprobe),
            _ => None,
        }
    }
}

/// What a kernel function looks like to numatrace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FuncFacts {
    /// Listed in /proc/kallsyms (not inlined away).
    pub in_kallsyms: bool,
    /// Listed in available_filter_functions (fentry and kprobes can attach).
    /// `None` when tracefs is unreadable.
    pub traceable: Option<bool>,
    /// Parameter types from BTF (e.g. `struct folio *`), `None` without BTF.
    pub btf_params: Option<Vec<String>>,
}

/// Everything the plan depends on, read once from the running kernel.
#[derive(Debug, Clone, Default)]
pub struct KernelFacts {
    pub has_btf: bool,
    /// The fault-count RFC's kernel (mm_struct.hint_faults in BTF).
    pub fault_count_kernel: bool,
    pub functions: BTreeMap<String, FuncFacts>,
    pub tracepoints: BTreeSet<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HookStatus {
    /// Chosen from the facts; not attached yet.
    Resolved,
    /// Attached (set by the loader).
    Attached,
    /// No candidate exists on this kernel.
    Missing,
    /// Candidates exist but every mechanism was refused (set by the loader).
    Refused,
    /// Not needed on this kernel (the detail says why): not attached.
    Unneeded,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct PlannedHook {
    pub hook: Hook,
    /// Kernel function, or `category:name` for a tracepoint.
    pub target: Option<String>,
    pub mechanism: Option<Mechanism>,
    /// Argument layout: `folio`/`page` variants and signature notes.
    pub layout: Option<String>,
    pub required: bool,
    pub status: HookStatus,
    /// Why this target (which candidates were absent), or why it failed.
    pub detail: String,
    /// The design's own function for this hook and why the plan does not
    /// use it, if it does not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub design: Option<DesignFunction>,
}

/// The function the design names for a hook, as this kernel offers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct DesignFunction {
    pub function: String,
    pub used: bool,
    /// Empty when used.
    pub why_not: String,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct AttachPlan {
    pub complete: bool,
    pub hooks: Vec<PlannedHook>,
}

impl AttachPlan {
    pub fn hook(&self, hook: Hook) -> Option<&PlannedHook> {
        self.hooks.iter().find(|h| h.hook == hook)
    }

    pub fn refresh_complete(&mut self) {
        self.complete = self
            .hooks
            .iter()
            .filter(|h| h.required)
            .all(|h| matches!(h.status, HookStatus::Resolved | HookStatus::Attached));
    }
}

/// One kernel function a hook can attach to.
struct Candidate {
    func: &'static str,
    layout: &'static str,
    /// (argument index, BTF type) of every argument the hook's programs
    /// read: where BTF gives another type, the programs would read the
    /// wrong thing, so the function is no candidate on that kernel.
    reads: &'static [(usize, &'static str)],
}

const FOLIO: &str = "struct folio *";
const PAGE: &str = "struct page *";
const ULONG: &str = "long unsigned int";
const INT: &str = "int";
const TASK: &str = "struct task_struct *";
const MM: &str = "struct mm_struct *";
/// ScanRange's layout on change_pte_range(tlb, vma, pmd, addr, end, newprot, cp_flags).
pub const PTE_RANGE: &str = "pmd,addr,end,cp_flags";
/// ThpScan's layout when it is a scan pass of its own (beside change_pte_range).
pub const PMD_PASS: &str = "pmd,addr,cp_flags";

/// Why `func` cannot be attached as a candidate reading `reads`, if it cannot.
fn unusable(func: &str, reads: &[(usize, &str)], facts: &KernelFacts) -> Option<String> {
    let f = facts.functions.get(func).cloned().unwrap_or_default();
    if !f.in_kallsyms {
        return Some(format!("{func} inlined/absent"));
    }
    if f.traceable == Some(false) {
        return Some(format!("{func} not traceable"));
    }
    let params = f.btf_params.as_ref()?;
    let wrong: Vec<String> = reads
        .iter()
        .filter(|(i, ty)| params.get(*i).map(String::as_str) != Some(*ty))
        .map(|(i, ty)| {
            let has = params.get(*i).map_or("nothing", String::as_str);
            format!("argument {i} is {has}, not {ty}")
        })
        .collect();
    (!wrong.is_empty()).then(|| format!("{func} has another signature ({})", wrong.join(", ")))
}

/// Design functions that are no candidate at all, with the reason.
fn design_without_program(func: &str) -> Option<&'static str> {
    (func == "do_numa_page").then_some(
        "its only argument is struct vm_fault * (the folio is looked up inside it); \
         numa_migrate_check, where the kernel counts numa_hint_faults, gets the folio as argument 0",
    )
}

/// The design's function for `hook` next to the chosen `target`.
fn design_function(
    hook: Hook,
    target: Option<&str>,
    facts: &KernelFacts,
) -> Option<DesignFunction> {
    let function = hook.design()?;
    let used = target == Some(function);
    let why_not = if used {
        String::new()
    } else if let Some(why) = unusable(function, &[], facts) {
        why
    } else if let Some(why) = design_without_program(function) {
        format!("{function} is traceable, but {why}")
    } else {
        let candidate = hook.candidates().iter().find(|c| c.func == function);
        candidate
            .and_then(|c| unusable(function, c.reads, facts))
            .unwrap_or_else(|| format!("{function} is traceable but not chosen"))
    };
    Some(DesignFunction {
        function: function.to_owned(),
        used,
        why_not,
    })
}

/// Refines a candidate's layout from its BTF parameters.
fn layout_for(hook: Hook, default: &str, facts: &FuncFacts) -> String {
    let Some(params) = &facts.btf_params else {
        return default.to_owned();
    };
    let first_struct = params
        .iter()
        .find_map(|p| p.strip_prefix("struct ").and_then(|s| s.strip_suffix(" *")))
        .unwrap_or("");
    match hook {
        // should_numa_migrate_memory(task, folio|page, src_nid, dst_cpu)
        Hook::Decision => match params.get(1).map(String::as_str) {
            Some("struct page *") => "page".into(),
            _ => "folio".into(),
        },
        // 6.12: (folio, vma, node); 7.x: (folio, node)
        Hook::Migrate => format!("{first_struct},args={}", params.len()),
        _ => default.to_owned(),
    }
}

fn tracepoint_hook(hook: Hook, full: String, facts: &KernelFacts) -> PlannedHook {
    let present = facts.tracepoints.contains(&full);
    PlannedHook {
        hook,
        target: present.then(|| full.clone()),
        mechanism: present.then_some(Mechanism::Tracepoint),
        layout: None,
        required: hook.required(),
        status: if present {
            HookStatus::Resolved
        } else {
            HookStatus::Missing
        },
        detail: if present {
            String::new()
        } else {
            format!("tracepoint {full} not present on this kernel")
        },
        design: None,
    }
}

/// The decision's exchange where it needs no program: kernels that
/// promote on time.
fn unneeded_exchange() -> PlannedHook {
    PlannedHook {
        hook: Hook::DecisionExchange,
        target: None,
        mechanism: None,
        layout: None,
        required: false,
        status: HookStatus::Unneeded,
        detail: "the kernel promotes on time: the decision's exchange is read from the folio \
                 before and after it; a program on folio_xchg_last_cpupid would also run for \
                 every slow-node folio the scanner protects"
            .to_owned(),
        design: None,
    }
}

fn function_hook(hook: Hook, facts: &KernelFacts) -> PlannedHook {
    if hook == Hook::DecisionExchange && !facts.fault_count_kernel {
        return unneeded_exchange();
    }
    let mut absent = Vec::new();
    let mut planned = PlannedHook {
        hook,
        target: None,
        mechanism: None,
        layout: None,
        required: hook.required(),
        status: HookStatus::Missing,
        detail: String::new(),
        design: None,
    };
    for c in hook.candidates() {
        if let Some(why) = unusable(c.func, c.reads, facts) {
            absent.push(why);
            continue;
        }
        let f = facts.functions.get(c.func).cloned().unwrap_or_default();
        planned.mechanism = Some(
            match (facts.has_btf && f.btf_params.is_some(), hook.wants_return()) {
                (true, true) => Mechanism::Fexit,
                (true, false) => Mechanism::Fentry,
                (false, true) => Mechanism::Kretprobe,
                (false, false) => Mechanism::Kprobe,
            },
        );
        planned.target = Some(c.func.to_owned());
        planned.layout = Some(layout_for(hook, c.layout, &f));
        planned.status = HookStatus::Resolved;
        break;
    }
    planned.detail = match (planned.target.is_some(), absent.is_empty()) {
        (true, true) => String::new(),
        (true, false) => format!("fallback: {}", absent.join(", ")),
        (false, _) => format!("no candidate on this kernel: {}", absent.join(", ")),
    };
    planned.design = design_function(hook, planned.target.as_deref(), facts);
    planned
}

/// With the scan pass per page table (change_pte_range), a transparent
/// huge page is scanned outside any pass, in change_huge_pmd: that call
/// becomes a pass of its own (its stamp would otherwise go unseen), read
/// as change_huge_pmd(tlb, vma, pmd, addr, newprot, cp_flags).
fn thp_scan_pass(plan: &mut AttachPlan, facts: &KernelFacts) {
    let per_pte = plan
        .hook(Hook::ScanRange)
        .is_some_and(|h| h.layout.as_deref() == Some(PTE_RANGE));
    let Some(thp) = plan.hooks.iter_mut().find(|h| h.hook == Hook::ThpScan) else {
        return;
    };
    let Some(target) = thp.target.clone() else {
        if per_pte {
            thp.detail = format!("{}; huge pages' scan stamps are not seen", thp.detail);
        }
        return;
    };
    if !per_pte {
        return;
    }
    if let Some(why) = unusable(&target, &[(3, ULONG), (5, ULONG)], facts) {
        *thp = PlannedHook {
            target: None,
            mechanism: None,
            layout: None,
            status: HookStatus::Missing,
            detail: format!("{why}; huge pages' scan stamps are not seen"),
            ..thp.clone()
        };
        return;
    }
    thp.layout = Some(PMD_PASS.to_owned());
    thp.mechanism = thp.mechanism.map(|m| match m {
        Mechanism::Fentry => Mechanism::Fexit,
        Mechanism::Kprobe => Mechanism::Kretprobe,
        other => other,
    });
    thp.detail = "a scan pass of its own: huge PMDs are scanned outside change_pte_range".into();
}

/// Without a migration's allocation callback, says what is lost.
fn unobservable_demotion(plan: &mut AttachPlan) {
    for (hook, lost) in [
        (
            Hook::Demote,
            "demotions are not seen per folio (only as vmstat's pgdemote_* counts)",
        ),
        (
            Hook::PromoteDst,
            "a promotion's new PFN is not seen: ping-pongs are linked by the folio's identity alone",
        ),
    ] {
        if let Some(h) = plan
            .hooks
            .iter_mut()
            .find(|h| h.hook == hook && h.target.is_none())
        {
            h.detail = format!("{}; {lost}", h.detail);
        }
    }
}

/// Chooses a target and mechanism per hook. Pure: same facts, same plan.
pub fn build(facts: &KernelFacts) -> AttachPlan {
    let hooks = Hook::ALL
        .iter()
        .map(|&hook| match hook.tracepoint() {
            Some((cat, name)) => tracepoint_hook(hook, format!("{cat}:{name}"), facts),
            None => function_hook(hook, facts),
        })
        .collect();
    let mut plan = AttachPlan {
        complete: false,
        hooks,
    };
    thp_scan_pass(&mut plan, facts);
    unobservable_demotion(&mut plan);
    plan.refresh_complete();
    plan
}

/// One program's kernel-side run statistics.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ProgramStat {
    pub name: String,
    pub run_count: u64,
    pub run_time_ns: u64,
    pub ns_per_run: f64,
    /// The program after the verifier (BPF bytecode) and as JIT-compiled
    /// machine code, in bytes.
    pub xlated_bytes: u32,
    pub jited_bytes: u32,
    /// Runs the kernel skipped: this program was already running on the
    /// CPU (preempted midway).
    pub runs_missed: u64,
}

/// What numatrace's programs add inside the NUMA scanner, the path the
/// kernel rate-limits itself on: it charges a task 32 times the runtime
/// of its scan (`p->node_stamp += 32 * diff` in task_numa_work), so
/// program time there delays the task's next scan 32-fold. From the
/// programs' run statistics (`--bpf-stats`): ns of program time, which
/// is instructions in the test bed's instruction-count mode; the
/// trampolines' own cost is not in them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct ScannerCost {
    /// PTEs the scanner protected.
    pub ptes: u64,
    /// The pass programs (a pass's entry and exit, the VMA skips) per
    /// protected PTE.
    pub pass_ns_per_pte: f64,
    /// The decision's exchange program (attached on the fault-count RFC's
    /// kernel only, 0 elsewhere), all its time per protected PTE: it runs
    /// for every slow-node folio the scanner protects as well as in hint
    /// faults, so this bounds the scanner's share.
    #[serde(default)]
    pub exchange_ns_per_pte: f64,
    /// The sum per protected PTE.
    pub ns_per_pte_at_most: f64,
}

impl ScannerCost {
    /// None without run statistics or without a protected PTE.
    pub fn of(programs: &[ProgramStat], ptes: u64) -> Option<Self> {
        use numa_ebpf_common::programs as p;
        const PASS: [&str; 11] = [
            p::FENTRY_SCAN_RANGE,
            p::FEXIT_SCAN_RANGE,
            p::KPROBE_SCAN_RANGE,
            p::KRETPROBE_SCAN_RANGE,
            p::FENTRY_SCAN_PTE,
            p::KPROBE_SCAN_PTE,
            p::FENTRY_THP_SCAN_PASS,
            p::FEXIT_THP_SCAN_PASS,
            p::KPROBE_THP_SCAN_PASS,
            p::KRETPROBE_THP_SCAN_PASS,
            p::TP_SKIP_VMA,
        ];
        const EXCHANGE: [&str; 2] = [p::FENTRY_DECISION_XCHG, p::KPROBE_DECISION_XCHG];
        if programs.is_empty() || ptes == 0 {
            return None;
        }
        let per_pte = |names: &[&str]| run_totals(programs, names).1 as f64 / ptes as f64;
        let (pass_ns_per_pte, exchange_ns_per_pte) = (per_pte(&PASS), per_pte(&EXCHANGE));
        Some(ScannerCost {
            ptes,
            pass_ns_per_pte,
            exchange_ns_per_pte,
            ns_per_pte_at_most: pass_ns_per_pte + exchange_ns_per_pte,
        })
    }
}

/// What numatrace's programs add to a hint fault, the path whose timing
/// decides promotion under a hot threshold: a fault made slower comes
/// later after its scan, and one past `hot_threshold_ms` is refused. From
/// the programs' run statistics (`--bpf-stats`), like [`ScannerCost`]:
/// ns of program time (instructions in the test bed's instruction-count
/// mode). Each run also passes a trampoline (or a kprobe), whose own cost
/// is not in the statistics: the runs per hint fault say how many.
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct FaultPathCost {
    /// Hint faults the kernel took while attached (numatrace's count).
    pub hint_faults: u64,
    /// The fault, decision, fault-end and migration programs' runs per
    /// hint fault (the migration programs also run for demotions, which
    /// makes this an upper bound).
    pub runs_per_hint_fault: f64,
    /// Their time per hint fault, an upper bound like the runs.
    pub ns_per_hint_fault_at_most: f64,
}

impl FaultPathCost {
    /// None without run statistics or without a hint fault.
    pub fn of(programs: &[ProgramStat], hint_faults: u64) -> Option<Self> {
        use numa_ebpf_common::programs as p;
        const FAULT_PATH: [&str; 15] = [
            p::FENTRY_HINT_FAULT,
            p::KPROBE_HINT_FAULT,
            p::FENTRY_THP_FAULT,
            p::KPROBE_THP_FAULT,
            p::FENTRY_DECISION,
            p::FEXIT_DECISION,
            p::KPROBE_DECISION,
            p::KRETPROBE_DECISION,
            p::FENTRY_FAULT_ACCOUNT,
            p::KPROBE_FAULT_ACCOUNT,
            p::FEXIT_MIGRATE,
            p::KRETPROBE_MIGRATE,
            p::FEXIT_PROMOTE_DST,
            p::KRETPROBE_PROMOTE_DST,
            p::TP_MIGRATE_PAGES,
        ];
        if programs.is_empty() || hint_faults == 0 {
            return None;
        }
        let (runs, ns) = run_totals(programs, &FAULT_PATH);
        Some(FaultPathCost {
            hint_faults,
            runs_per_hint_fault: runs as f64 / hint_faults as f64,
            ns_per_hint_fault_at_most: ns as f64 / hint_faults as f64,
        })
    }
}

/// Runs and run time of the programs named.
fn run_totals(programs: &[ProgramStat], names: &[&str]) -> (u64, u64) {
    programs
        .iter()
        .filter(|s| names.contains(&s.name.as_str()))
        .fold((0, 0), |(r, t), s| (r + s.run_count, t + s.run_time_ns))
}

#[cfg(test)]
mod tests;
