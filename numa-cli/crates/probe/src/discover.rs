//! Reads [`KernelFacts`] from the running kernel: BTF (function prototypes),
//! /proc/kallsyms (what survived inlining), available_filter_functions (what
//! ftrace can attach to) and tracefs events.
use std::{collections::BTreeSet, fs, path::Path};

use btf_rs::{Btf, BtfType, Type};

use numa_core::plan::{FuncFacts, KernelFacts};

pub const BTF_VMLINUX: &str = "/sys/kernel/btf/vmlinux";
const TRACEFS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// Every function any hook may use (kept in one place so discovery reads
/// only what the plan can ask about).
pub const FUNCTIONS: &[&str] = &[
    "do_numa_page",
    "numa_migrate_check",
    "numa_migrate_prep",
    "should_numa_migrate_memory",
    "folio_xchg_last_cpupid",
    "page_cpupid_xchg_last",
    "change_prot_numa",
    "change_pte_range",
    "migrate_misplaced_folio",
    "migrate_misplaced_page",
    "task_numa_fault",
    "do_huge_pmd_numa_page",
    "change_huge_pmd",
    "init_numa_balancing",
    "__mmdrop",
    "alloc_demote_folio",
    "alloc_migrate_folio",
    "alloc_demote_page",
    "alloc_misplaced_dst_folio",
    "alloc_misplaced_dst_page",
    "demote_folio_list",
];

pub const TRACEPOINTS: &[&str] = &[
    "sched:sched_skip_vma_numa",
    "migrate:mm_migrate_pages",
    "sched:sched_process_exit",
];

/// The tracefs mount, if any.
pub fn tracefs() -> Option<&'static str> {
    tracefs_at(Path::new("/"))
}

/// The tracefs mount of the system whose files are under `root`.
pub fn tracefs_at(root: &Path) -> Option<&'static str> {
    TRACEFS.into_iter().find(|p| {
        let dir = root.join(p.trim_start_matches('/'));
        dir.join("available_events").exists() || dir.join("events").is_dir()
    })
}

/// Renders a BTF type as C would spell it, enough to tell `struct folio *`
/// from `struct page *`.
fn type_name(btf: &Btf, ty: &Type, depth: u32) -> String {
    if depth > 8 {
        return "?".into();
    }
    let named = |t: &dyn BtfType| btf.resolve_name(t).unwrap_or_default();
    match ty {
        Type::Void => "void".into(),
        Type::Ptr(p) => match btf.resolve_chained_type(p) {
            Ok(inner) => format!("{} *", type_name(btf, &inner, depth + 1)),
            Err(_) => "void *".into(),
        },
        Type::Struct(s) => format!("struct {}", named(s)),
        Type::Union(u) => format!("union {}", named(u)),
        Type::Fwd(f) => format!("struct {}", named(f)),
        Type::Const(c) | Type::Volatile(c) | Type::Restrict(c) => match btf.resolve_chained_type(c)
        {
            Ok(inner) => type_name(btf, &inner, depth + 1),
            Err(_) => "?".into(),
        },
        other => other
            .as_btf_type()
            .map(named)
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| other.name().to_owned()),
    }
}

fn btf_params(btf: &Btf, func: &str) -> Option<Vec<String>> {
    let types = btf.resolve_types_by_name(func).ok()?;
    let f = types.iter().find_map(|t| match t {
        Type::Func(f) => Some(f),
        _ => None,
    })?;
    let Ok(Type::FuncProto(proto)) = btf.resolve_chained_type(f) else {
        return None;
    };
    Some(
        proto
            .parameters
            .iter()
            .map(|p| {
                btf.resolve_chained_type(p)
                    .map(|t| type_name(btf, &t, 0))
                    .unwrap_or_else(|_| "?".into())
            })
            .collect(),
    )
}

/// Symbols of interest present in /proc/kallsyms.
fn kallsyms(wanted: &[&str]) -> BTreeSet<String> {
    let text = fs::read_to_string("/proc/kallsyms").unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let (_addr, kind, name) = (it.next()?, it.next()?, it.next()?);
            (matches!(kind, "t" | "T") && wanted.contains(&name)).then(|| name.to_owned())
        })
        .collect()
}

fn traceable(wanted: &[&str]) -> Option<BTreeSet<String>> {
    let text = fs::read_to_string(Path::new(tracefs()?).join("available_filter_functions")).ok()?;
    Some(
        text.lines()
            .filter_map(|l| l.split_whitespace().next())
            .filter(|n| wanted.contains(n))
            .map(str::to_owned)
            .collect(),
    )
}

pub fn discover() -> KernelFacts {
    let btf = Btf::from_file(BTF_VMLINUX).ok();
    let syms = kallsyms(FUNCTIONS);
    let trace = traceable(FUNCTIONS);
    let functions = FUNCTIONS
        .iter()
        .map(|&name| {
            let facts = FuncFacts {
                in_kallsyms: syms.contains(name),
                traceable: trace.as_ref().map(|t| t.contains(name)),
                btf_params: btf.as_ref().and_then(|b| btf_params(b, name)),
            };
            (name.to_owned(), facts)
        })
        .collect();
    let tracepoints = tracefs()
        .map(|root| {
            TRACEPOINTS
                .iter()
                .filter(|tp| {
                    let (cat, name) = tp.split_once(':').unwrap_or(("", tp));
                    Path::new(root).join("events").join(cat).join(name).is_dir()
                })
                .map(|s| (*s).to_owned())
                .collect()
        })
        .unwrap_or_default();
    KernelFacts {
        has_btf: btf.is_some(),
        fault_count_kernel: super::params::is_fault_count_kernel(btf.as_ref()),
        functions,
        tracepoints,
    }
}
