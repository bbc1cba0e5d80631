//! Resolves [`KernelParams`] on the running kernel: addresses of kernel
//! variables (kallsyms), struct field offsets (BTF), the cpupid layout,
//! top-tier nodes and tracepoint field offsets (tracefs).
use std::{collections::BTreeMap, fs, path::Path};

use btf_rs::{Btf, Type};
pub use numa_core::params::{
    cpupid_layout, flags_layout, parse_tp_format, toptier_mask, KernelHotness, KernelParams,
};
use numa_host::system;

use crate::discover;

/// Addresses of kernel variables from /proc/kallsyms (0 when hidden by
/// kptr_restrict). The symbol type is not checked: 7.x lists the NUMA
/// balancing sysctls (`sysctl_numa_balancing_hot_threshold`) as `T`, and
/// the names asked for are variables on every kernel.
fn data_symbols(names: &[&str]) -> BTreeMap<String, u64> {
    let text = fs::read_to_string("/proc/kallsyms").unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let (addr, _kind, name) = (it.next()?, it.next()?, it.next()?);
            if !names.contains(&name) {
                return None;
            }
            let addr = u64::from_str_radix(addr, 16).ok().filter(|a| *a != 0)?;
            Some((name.to_owned(), addr))
        })
        .collect()
}

/// The byte offset of `member` in `strukt`, looking into anonymous struct
/// and union members (`vm_fault`'s `address` sits in one).
fn member_offset(btf: &Btf, strukt: &str, member: &str) -> Option<u32> {
    btf.resolve_types_by_name(strukt)
        .ok()?
        .iter()
        .find_map(|t| offset_in(btf, t, member, 0))
}

fn offset_in(btf: &Btf, ty: &Type, member: &str, depth: u32) -> Option<u32> {
    let (Type::Struct(s) | Type::Union(s)) = ty else {
        return None;
    };
    s.members.iter().find_map(|m| {
        if m.bitfield_size().unwrap_or(0) != 0 {
            return None;
        }
        let name = btf.resolve_name(m).ok()?;
        if name == member {
            return Some(m.bit_offset() / 8);
        }
        if !name.is_empty() || depth >= 4 {
            return None;
        }
        let inner = unqualified(btf, btf.resolve_chained_type(m).ok()?)?;
        offset_in(btf, &inner, member, depth + 1).map(|o| o + m.bit_offset() / 8)
    })
}

/// `ty` without its qualifiers and typedefs: `vm_fault`'s anonymous
/// struct is a `const` one.
fn unqualified(btf: &Btf, mut ty: Type) -> Option<Type> {
    for _ in 0..8 {
        ty = match &ty {
            Type::Const(t) => btf.resolve_chained_type(t).ok()?,
            Type::Volatile(t) => btf.resolve_chained_type(t).ok()?,
            Type::Restrict(t) => btf.resolve_chained_type(t).ok()?,
            Type::Typedef(t) => btf.resolve_chained_type(t).ok()?,
            Type::TypeTag(t) => btf.resolve_chained_type(t).ok()?,
            _ => return Some(ty),
        };
    }
    None
}

/// sizeof(struct `name`).
fn struct_size(btf: &Btf, name: &str) -> Option<u32> {
    btf.resolve_types_by_name(name)
        .ok()?
        .iter()
        .find_map(|t| match t {
            Type::Struct(s) => Some(s.size() as u32),
            _ => None,
        })
}

/// The value of `name` in `enum enum_name`.
fn enum_value(btf: &Btf, enum_name: &str, name: &str) -> Option<u32> {
    btf.resolve_types_by_name(enum_name)
        .ok()?
        .iter()
        .find_map(|t| match t {
            Type::Enum(e) => e
                .members
                .iter()
                .find(|m| btf.resolve_name(*m).ok().as_deref() == Some(name))
                .map(|m| m.val()),
            _ => None,
        })
}

/// The byte of a large folio that holds its order: `_folio_order` (6.1),
/// the low byte of `_flags_1` (6.12+, little-endian).
fn folio_order_offset(btf: &Btf) -> Option<u32> {
    member_offset(btf, "folio", "_folio_order").or_else(|| member_offset(btf, "folio", "_flags_1"))
}

/// pglist_data.vm_stat[PGPROMOTE_CANDIDATE] (`atomic_long_t`, 8 bytes).
fn promote_candidate_offset(btf: &Btf) -> Option<u32> {
    let base = member_offset(btf, "pglist_data", "vm_stat")?;
    let idx = enum_value(btf, "node_stat_item", "PGPROMOTE_CANDIDATE")?;
    base.checked_add(idx.checked_mul(8)?)
}

/// per_cpu_nodestat.vm_node_stat_diff[PGPROMOTE_CANDIDATE]: one s8 per item.
fn candidate_diff_offset(btf: &Btf) -> Option<u32> {
    let base = member_offset(btf, "per_cpu_nodestat", "vm_node_stat_diff")?;
    base.checked_add(enum_value(btf, "node_stat_item", "PGPROMOTE_CANDIDATE")?)
}

/// Where the kernel keeps a folio's access time: page._last_cpupid when
/// BTF has it (LAST_CPUPID_NOT_IN_PAGE_FLAGS), else a field of page->flags
/// placed by MAX_NUMNODES (zonelist._zonerefs holds MAX_NUMNODES *
/// MAX_NR_ZONES + 1 entries) and MAX_NR_ZONES. The probes check it at
/// every decision (the node field, and the exchange's value found there).
fn access_layout(btf: &Btf, params: &mut KernelParams) {
    if let Some(off) = member_offset(btf, "page", "_last_cpupid") {
        params.off_last_cpupid = off;
        return;
    }
    let zones = enum_value(btf, "zone_type", "__MAX_NR_ZONES").unwrap_or(0);
    let Some(refs) = array_len(btf, "zonelist", "_zonerefs") else {
        return;
    };
    if zones == 0 || refs == 0 || (refs - 1) % zones != 0 {
        return;
    }
    if let Some((access, nodes)) = flags_layout((refs - 1) / zones, zones, params.cpupid_mask) {
        params.access_pgshift = access;
        params.nodes_pgshift = nodes;
    }
}

/// The length of array `member` of `strukt`.
fn array_len(btf: &Btf, strukt: &str, member: &str) -> Option<u32> {
    btf.resolve_types_by_name(strukt)
        .ok()?
        .iter()
        .find_map(|t| match t {
            Type::Struct(s) => s.members.iter().find_map(|m| {
                if btf.resolve_name(m).ok()? != member {
                    return None;
                }
                match unqualified(btf, btf.resolve_chained_type(m).ok()?)? {
                    Type::Array(a) => u32::try_from(a.len()).ok(),
                    _ => None,
                }
            }),
            _ => None,
        })
}

/// The fault-count RFC's kernel: its per-process hint-fault counter in BTF
/// and its threshold variable in kallsyms. Returns the offset of
/// mm_struct.hint_faults, which the BPF side reads through current->mm.
fn fault_count_kernel(btf: Option<&Btf>, threshold_sym: Option<u64>) -> Option<u32> {
    threshold_sym?;
    member_offset(btf?, "mm_struct", "hint_faults")
}

/// Whether the running kernel is the fault-count RFC's, with its BTF
/// already parsed (the attach plan's fact).
pub fn is_fault_count_kernel(btf: Option<&Btf>) -> bool {
    let sym = data_symbols(&["sysctl_numa_balancing_fault_count_threshold"])
        .into_values()
        .next();
    fault_count_kernel(btf, sym).is_some()
}

/// Which threshold the running kernel promotes on, and the evidence: the
/// fault-count RFC's kernel has `mm_struct.hint_faults` in its BTF and
/// `sysctl_numa_balancing_fault_count_threshold` in kallsyms.
pub fn kernel_hotness() -> (KernelHotness, String) {
    let btf = Btf::from_file(discover::BTF_VMLINUX).ok();
    let in_btf = btf
        .as_ref()
        .and_then(|b| member_offset(b, "mm_struct", "hint_faults"))
        .is_some();
    let sym = data_symbols(&["sysctl_numa_balancing_fault_count_threshold"])
        .into_values()
        .next();
    match (in_btf, sym) {
        (true, Some(_)) => (
            KernelHotness::FaultCount,
            "mm_struct.hint_faults in BTF, sysctl_numa_balancing_fault_count_threshold in kallsyms"
                .to_owned(),
        ),
        (true, None) => (
            KernelHotness::Latency,
            "mm_struct.hint_faults in BTF but no sysctl_numa_balancing_fault_count_threshold \
             in kallsyms (kptr_restrict?)"
                .to_owned(),
        ),
        (false, _) if btf.is_none() => (KernelHotness::Latency, "no BTF".to_owned()),
        (false, _) => (
            KernelHotness::Latency,
            "no mm_struct.hint_faults in BTF".to_owned(),
        ),
    }
}

/// The running kernel's HZ: CONFIG_HZ of its installed config, else
/// measured from /proc/timer_list's jiffies over 200 ms (readable by root
/// alone); 0 when neither can be had.
pub fn kernel_hz() -> u32 {
    let release = system::kernel_release();
    let config = fs::read_to_string(format!("/boot/config-{release}")).ok();
    if let Some(hz) = config.as_deref().and_then(numa_core::params::hz_of_config) {
        return hz;
    }
    let sample = || {
        fs::read_to_string("/proc/timer_list")
            .ok()
            .as_deref()
            .and_then(numa_core::params::timer_list_sample)
    };
    let Some((t0, j0)) = sample() else {
        return 0;
    };
    std::thread::sleep(std::time::Duration::from_millis(200));
    let Some((t1, j1)) = sample() else {
        return 0;
    };
    numa_core::params::hz_of_rate(j1.wrapping_sub(j0), t1.saturating_sub(t0)).unwrap_or(0)
}

/// The top-tier node mask of the running system.
pub fn resolve_toptier() -> u64 {
    toptier_mask(&system::memory_tiers(), &system::nodes())
}

/// Where the kernel keeps what the programs read: struct members, enum
/// values and struct sizes from BTF (each 0 or None when absent).
fn btf_layout(b: &Btf, params: &mut KernelParams) {
    let member = |strukt, name| member_offset(b, strukt, name).unwrap_or(0);
    params.off_nbp_threshold = member("pglist_data", "nbp_threshold");
    params.off_task_mm = member("task_struct", "mm");
    params.off_task_comm = member("task_struct", "comm");
    params.off_task_flags = member("task_struct", "flags");
    params.pg_head_bit = enum_value(b, "pageflags", "PG_head");
    params.off_folio_order = folio_order_offset(b).unwrap_or(0);
    params.off_memcg_data = member("folio", "memcg_data");
    params.off_memcg_cgroup = member_offset(b, "mem_cgroup", "css")
        .zip(member_offset(b, "cgroup_subsys_state", "cgroup"))
        .and_then(|(css, cgroup)| css.checked_add(cgroup));
    // The object cgroup's `is_root` came with user folios charged to
    // object cgroups (7.1): from then memcg_data leads to the memcg
    // through obj_cgroup.memcg.
    params.off_objcg_memcg = member_offset(b, "obj_cgroup", "is_root")
        .and_then(|_| member_offset(b, "obj_cgroup", "memcg"));
    params.off_cgroup_kn = member("cgroup", "kn");
    params.off_kn_id = member("kernfs_node", "id");
    params.off_vmf_address = member("vm_fault", "address");
    params.off_promote_candidate = promote_candidate_offset(b).unwrap_or(0);
    params.off_pcp_nodestats = member("pglist_data", "per_cpu_nodestats");
    params.off_candidate_diff = candidate_diff_offset(b).unwrap_or(0);
    params.page_struct_size = struct_size(b, "page").unwrap_or(0);
    access_layout(b, params);
}

/// The mm_migrate_pages tracepoint's field offsets and reason names, from
/// its tracefs format.
fn migrate_tp_format(params: &mut KernelParams) {
    let Some(root) = discover::tracefs() else {
        return;
    };
    let path = Path::new(root).join("events/migrate/mm_migrate_pages/format");
    let Ok(text) = fs::read_to_string(path) else {
        return;
    };
    let (fields, reasons) = parse_tp_format(&text);
    if let (Some(s), Some(f), Some(r)) = (
        fields.get("succeeded"),
        fields.get("failed"),
        fields.get("reason"),
    ) {
        params.tp_migrate = Some((*s, *f, *r));
    }
    params.migrate_reasons = reasons;
}

pub fn resolve() -> KernelParams {
    let syms = data_symbols(&[
        "sysctl_numa_balancing_mode",
        "sysctl_numa_balancing_hot_threshold",
        "sysctl_numa_balancing_fault_count_threshold",
        "node_data",
        "vmemmap_base",
        "__per_cpu_offset",
    ]);
    let btf = Btf::from_file(discover::BTF_VMLINUX).ok();
    let kernel_max: u32 = fs::read_to_string("/sys/devices/system/cpu/kernel_max")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(8191);
    let (cpupid_mask, access_time_buckets) = cpupid_layout(kernel_max + 1);
    let nodes = system::nodes();
    let tiers = system::memory_tiers();
    let mut params = KernelParams {
        sym_nb_mode: syms.get("sysctl_numa_balancing_mode").copied().unwrap_or(0),
        sym_hot_threshold: syms
            .get("sysctl_numa_balancing_hot_threshold")
            .copied()
            .unwrap_or(0),
        sym_node_data: syms.get("node_data").copied().unwrap_or(0),
        sym_per_cpu_offset: syms.get("__per_cpu_offset").copied().unwrap_or(0),
        cpupid_mask,
        access_time_buckets,
        hz: kernel_hz(),
        toptier_mask: toptier_mask(&tiers, &nodes),
        nb_mode_at_load: system::numa_balancing().unwrap_or(0),
        cpu_node: nodes
            .iter()
            .flat_map(|n| n.cpus.iter().map(move |c| (*c, n.id)))
            .collect(),
        ..KernelParams::default()
    };
    params.sym_vmemmap_base = syms.get("vmemmap_base").copied().unwrap_or(0);
    if let Some(b) = btf.as_ref() {
        btf_layout(b, &mut params);
    }
    params.pfn_spans = numa_core::mapplan::parse_zoneinfo(
        &fs::read_to_string("/proc/zoneinfo").unwrap_or_default(),
    );
    let fc_sym = syms
        .get("sysctl_numa_balancing_fault_count_threshold")
        .copied();
    if let Some(hint_faults) = fault_count_kernel(btf.as_ref(), fc_sym) {
        // The patched decision compares with the sysctl alone
        // (no per-node nbp_threshold adjustment).
        params.hotness = KernelHotness::FaultCount;
        params.sym_hot_threshold = fc_sym.unwrap_or(0);
        params.off_nbp_threshold = 0;
        params.off_mm_hint_faults = hint_faults;
    }
    migrate_tp_format(&mut params);
    params
}
