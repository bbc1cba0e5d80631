//! The attach plan: for each logical hook, which kernel function or
//! tracepoint numatrace uses, with which mechanism and argument layout.
//!
//! Built by a pure function from [`KernelFacts`] (what the running kernel
//! offers), so the per-version choices are unit-tested with facts recorded
//! from real kernels. `discover` reads those facts from the running system.
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
    /// The scanner's per-folio stamp (the last_cpupid exchange).
    ScanStamp,
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
    PcReset,
    /// __mmdrop: an mm (and its fault-count counter) is freed.
    PcDrop,
}

impl Hook {
    pub const ALL: [Hook; 12] = [
        Hook::HintFault,
        Hook::Decision,
        Hook::ScanStamp,
        Hook::ScanRange,
        Hook::Migrate,
        Hook::FaultAccount,
        Hook::ThpFault,
        Hook::ThpScan,
        Hook::VmaSkip,
        Hook::MigrateTracepoint,
        Hook::PcReset,
        Hook::PcDrop,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Hook::HintFault => "hint_fault",
            Hook::Decision => "decision",
            Hook::ScanStamp => "scan_stamp",
            Hook::ScanRange => "scan_range",
            Hook::Migrate => "migrate",
            Hook::FaultAccount => "fault_account",
            Hook::ThpFault => "thp_fault",
            Hook::ThpScan => "thp_scan",
            Hook::VmaSkip => "vma_skip",
            Hook::MigrateTracepoint => "migrate_tracepoint",
            Hook::PcReset => "pc_reset",
            Hook::PcDrop => "pc_drop",
        }
    }

    /// Whether numatrace's core measurement is incomplete without this hook.
    pub fn required(self) -> bool {
        matches!(
            self,
            Hook::HintFault
                | Hook::Decision
                | Hook::ScanStamp
                | Hook::ScanRange
                | Hook::Migrate
                | Hook::FaultAccount
        )
    }

    /// Candidate kernel functions in order of preference, with the layout
    /// name each implies. Tracepoint hooks return `[]`.
    fn functions(self) -> &'static [(&'static str, &'static str)] {
        match self {
            // do_numa_page is inlined on every kernel we know (ARCHITECTURE.md,
            // "Hooks per kernel");
            // it stays first so a kernel that keeps it gets the direct hook.
            Hook::HintFault => &[
                ("do_numa_page", "vmf"),
                ("numa_migrate_check", "folio"),
                ("numa_migrate_prep", "page"),
            ],
            Hook::Decision => &[("should_numa_migrate_memory", "folio")],
            Hook::ScanStamp => &[
                ("folio_xchg_last_cpupid", "folio"),
                ("page_cpupid_xchg_last", "page"),
            ],
            Hook::ScanRange => &[("change_prot_numa", "vma,start,end")],
            Hook::Migrate => &[
                ("migrate_misplaced_folio", "folio"),
                ("migrate_misplaced_page", "page"),
            ],
            Hook::FaultAccount => &[("task_numa_fault", "cpupid,node,pages,flags")],
            Hook::ThpFault => &[("do_huge_pmd_numa_page", "vmf")],
            Hook::ThpScan => &[("change_huge_pmd", "pmd")],
            Hook::PcReset => &[("init_numa_balancing", "clone_flags,task")],
            Hook::PcDrop => &[("__mmdrop", "mm")],
            Hook::VmaSkip | Hook::MigrateTracepoint => &[],
        }
    }

    fn tracepoint(self) -> Option<(&'static str, &'static str)> {
        match self {
            Hook::VmaSkip => Some(("sched", "sched_skip_vma_numa")),
            Hook::MigrateTracepoint => Some(("migrate", "mm_migrate_pages")),
            _ => None,
        }
    }

    /// fentry or fexit: fexit where the return value is the point.
    fn wants_return(self) -> bool {
        matches!(self, Hook::Decision | Hook::ScanRange | Hook::Migrate)
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

/// Chooses a target and mechanism per hook. Pure: same facts, same plan.
pub fn build(facts: &KernelFacts) -> AttachPlan {
    let hooks = Hook::ALL
        .iter()
        .map(|&hook| {
            if let Some((cat, name)) = hook.tracepoint() {
                let full = format!("{cat}:{name}");
                let present = facts.tracepoints.contains(&full);
                return PlannedHook {
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
                };
            }
            let mut absent = Vec::new();
            for &(func, layout) in hook.functions() {
                let f = facts.functions.get(func).cloned().unwrap_or_default();
                if !f.in_kallsyms || f.traceable == Some(false) {
                    absent.push(if f.in_kallsyms {
                        format!("{func} not traceable")
                    } else {
                        format!("{func} inlined/absent")
                    });
                    continue;
                }
                let mechanism = match (facts.has_btf && f.btf_params.is_some(), hook.wants_return())
                {
                    (true, true) => Mechanism::Fexit,
                    (true, false) => Mechanism::Fentry,
                    (false, true) => Mechanism::Kretprobe,
                    (false, false) => Mechanism::Kprobe,
                };
                return PlannedHook {
                    hook,
                    target: Some(func.to_owned()),
                    mechanism: Some(mechanism),
                    layout: Some(layout_for(hook, layout, &f)),
                    required: hook.required(),
                    status: HookStatus::Resolved,
                    detail: if absent.is_empty() {
                        String::new()
                    } else {
                        format!("fallback: {}", absent.join(", "))
                    },
                };
            }
            PlannedHook {
                hook,
                target: None,
                mechanism: None,
                layout: None,
                required: hook.required(),
                status: HookStatus::Missing,
                detail: format!("no candidate on this kernel: {}", absent.join(", ")),
            }
        })
        .collect();
    let mut plan = AttachPlan {
        complete: false,
        hooks,
    };
    plan.refresh_complete();
    plan
}

/// One program's kernel-side run statistics.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ProgramStat {
    pub name: String,
    pub run_count: u64,
    pub run_time_ns: u64,
    pub ns_per_run: f64,
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Facts as read from Debian's 6.1.192 and 6.12.117 images (kallsyms and
    /// available_filter_functions).
    pub(crate) fn facts(version: &str) -> KernelFacts {
        let folio = |n: &[&str]| FuncFacts {
            in_kallsyms: true,
            traceable: Some(true),
            btf_params: Some(n.iter().map(|s| (*s).to_owned()).collect()),
        };
        let mut functions = BTreeMap::new();
        let mut add = |name: &str, params: &[&str]| {
            functions.insert(name.to_owned(), folio(params));
        };
        let task = "struct task_struct *";
        match version {
            "6.1" => {
                add("numa_migrate_prep", &["struct page *"]);
                add(
                    "should_numa_migrate_memory",
                    &[task, "struct page *", "int", "int"],
                );
                add("page_cpupid_xchg_last", &["struct page *", "int"]);
                add(
                    "migrate_misplaced_page",
                    &["struct page *", "struct vm_area_struct *", "int"],
                );
            }
            _ => {
                add("numa_migrate_check", &["struct folio *"]);
                add(
                    "should_numa_migrate_memory",
                    &[task, "struct folio *", "int", "int"],
                );
                add("folio_xchg_last_cpupid", &["struct folio *", "int"]);
                if version == "7.2" {
                    add("migrate_misplaced_folio", &["struct folio *", "int"]);
                } else {
                    add(
                        "migrate_misplaced_folio",
                        &["struct folio *", "struct vm_area_struct *", "int"],
                    );
                }
            }
        }
        for f in [
            "change_prot_numa",
            "task_numa_fault",
            "do_huge_pmd_numa_page",
            "change_huge_pmd",
            "init_numa_balancing",
            "__mmdrop",
        ] {
            add(f, &["int"]);
        }
        let mut tracepoints = BTreeSet::from(["migrate:mm_migrate_pages".to_owned()]);
        if version != "6.1" {
            tracepoints.insert("sched:sched_skip_vma_numa".to_owned());
        }
        KernelFacts {
            has_btf: true,
            functions,
            tracepoints,
        }
    }

    fn target(plan: &AttachPlan, hook: Hook) -> (String, String, String) {
        let h = plan.hook(hook).expect("hook in plan");
        (
            h.target.clone().unwrap_or_default(),
            h.mechanism.map(Mechanism::name).unwrap_or("-").to_owned(),
            h.layout.clone().unwrap_or_default(),
        )
    }

    #[test]
    fn debian_6_1_uses_page_variants() {
        let plan = build(&facts("6.1"));
        assert!(plan.complete);
        assert_eq!(target(&plan, Hook::HintFault).0, "numa_migrate_prep");
        assert_eq!(
            target(&plan, Hook::Decision),
            (
                "should_numa_migrate_memory".into(),
                "fexit".into(),
                "page".into()
            )
        );
        assert_eq!(target(&plan, Hook::Migrate).0, "migrate_misplaced_page");
        assert_eq!(target(&plan, Hook::ScanStamp).0, "page_cpupid_xchg_last");
        assert_eq!(
            plan.hook(Hook::VmaSkip).map(|h| h.status),
            Some(HookStatus::Missing)
        );
        let detail = &plan.hook(Hook::HintFault).expect("hint").detail;
        assert!(detail.contains("do_numa_page inlined"), "{detail}");
    }

    #[test]
    fn debian_6_12_uses_folio_variants() {
        let plan = build(&facts("6.12"));
        assert!(plan.complete);
        assert_eq!(
            target(&plan, Hook::HintFault),
            ("numa_migrate_check".into(), "fentry".into(), "folio".into())
        );
        assert_eq!(
            target(&plan, Hook::Migrate),
            (
                "migrate_misplaced_folio".into(),
                "fexit".into(),
                "folio,args=3".into()
            )
        );
        assert_eq!(target(&plan, Hook::VmaSkip).1, "tracepoint");
    }

    #[test]
    fn migrate_signature_of_7_2() {
        let plan = build(&facts("7.2"));
        assert_eq!(target(&plan, Hook::Migrate).2, "folio,args=2");
    }

    #[test]
    fn missing_required_hook_makes_plan_incomplete() {
        let mut f = facts("6.12");
        f.functions.remove("should_numa_migrate_memory");
        let plan = build(&f);
        assert!(!plan.complete);
        let h = plan.hook(Hook::Decision).expect("decision");
        assert_eq!(h.status, HookStatus::Missing);
        assert!(h
            .detail
            .contains("should_numa_migrate_memory inlined/absent"));
    }

    #[test]
    fn no_btf_falls_back_to_kprobes() {
        let mut f = facts("6.12");
        f.has_btf = false;
        let plan = build(&f);
        assert_eq!(target(&plan, Hook::HintFault).1, "kprobe");
        assert_eq!(target(&plan, Hook::Decision).1, "kretprobe");
    }
}
