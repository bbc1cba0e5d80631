//! `numatrace doctor --json` on the test bed.
use std::path::Path;

use anyhow::{bail, ensure, Context, Result};
use numa_core::doctor::{FolioMap, Report, Status};
use numa_core::plan::PlannedHook;

use crate::kernels::Series;
use crate::results::read_report;

pub(super) const SCRIPT: &str = include_str!("doctor.sh");

/// `numatrace doctor --json` sees the test bed as it is: everything attaches,
/// two memory tiers with node 1 below node 0, and the kernel's own NUMA
/// functions as hook targets.
pub(super) fn check(dir: &Path, _console: &str, series: Series) -> Result<()> {
    let rc = std::fs::read_to_string(dir.join("doctor.rc")).context("no doctor.rc")?;
    ensure!(
        rc.trim() == "0",
        "numatrace doctor --json exited with {}",
        rc.trim()
    );
    check_report(&read_report(dir, "doctor.json")?, series)
}

fn check_report(doc: &Report, series: Series) -> Result<()> {
    let failing: Vec<String> = doc
        .checks
        .iter()
        .filter(|c| c.status == Status::Fail)
        .map(|c| format!("{}: {}", c.name, c.detail))
        .collect();
    ensure!(
        doc.ok,
        "\"ok\" is false (failing checks: {})",
        failing.join("; ")
    );
    let reads = doc.check("snapshot_reads");
    ensure!(
        reads.is_some_and(|c| c.status == Status::Ok),
        "snapshots do not read per-CPU maps in one batch lookup each: {reads:?}"
    );
    ensure!(doc.attach_plan.complete, "attach_plan.complete is false");

    let tiers = &doc.memory_tiers;
    ensure!(
        tiers.len() >= 2,
        "memory_tiers has {} entries, want >= 2: {tiers:?}",
        tiers.len()
    );
    let tier_of = |node: u32| tiers.iter().find(|t| t.nodes.contains(&node)).map(|t| t.id);
    match (tier_of(0), tier_of(1)) {
        (Some(t0), Some(t1)) if t1 > t0 => {}
        (t0, t1) => bail!(
            "node 1 (tier {t1:?}) is not in a lower tier than node 0 (tier {t0:?}): {tiers:?}"
        ),
    }

    let hooks = &doc.attach_plan.hooks;
    let targets: Vec<&str> = hooks.iter().filter_map(|h| h.target.as_deref()).collect();
    // The design's change_pte_range where the kernel keeps it a function;
    // init_numa_balancing and __mmdrop: the fault-count patch's counter
    // resets and mm teardowns; reclaim's demotion callback under its name
    // on each kernel, and the promotion's allocation callback.
    let expected: &[&str] = match series {
        Series::V6_1 => &[
            "numa_migrate_prep",
            "migrate_misplaced_page",
            "change_prot_numa",
            "init_numa_balancing",
            "__mmdrop",
            "alloc_demote_page",
            "alloc_misplaced_dst_page",
        ],
        Series::V6_12 | Series::V6_12Rfc => &[
            "numa_migrate_check",
            "migrate_misplaced_folio",
            "change_prot_numa",
            "init_numa_balancing",
            "__mmdrop",
            "alloc_migrate_folio",
            "alloc_misplaced_dst_folio",
        ],
        Series::V7 => &[
            "numa_migrate_check",
            "migrate_misplaced_folio",
            "change_pte_range",
            "init_numa_balancing",
            "__mmdrop",
            "alloc_demote_folio",
            "alloc_misplaced_dst_folio",
        ],
    };
    for want in expected {
        ensure!(
            targets.contains(want),
            "no hook targets {want} on {series} (targets: {})",
            targets.join(", ")
        );
    }
    check_design(hooks)?;
    check_none_refused(hooks)?;
    check_memcg_path(hooks, series)?;
    check_folio_map(
        doc.folio_map
            .as_ref()
            .context("doctor.json has no folio_map")?,
    )
}

/// The demotion hook reads the folio's memory cgroup the way the kernel
/// keeps it: through the object cgroup from 7.1, from the memcg before.
fn check_memcg_path(hooks: &[PlannedHook], series: Series) -> Result<()> {
    let demote = hooks
        .iter()
        .find(|h| h.hook == numa_core::plan::Hook::Demote)
        .context("no demotion hook in the plan")?;
    let want = match series {
        Series::V7 => "-> obj_cgroup.memcg ->",
        _ => "-> mem_cgroup.css.cgroup ->",
    };
    ensure!(
        demote.detail.contains(want),
        "the demotion hook on {series} does not read the memory cgroup {want}: {:?}",
        demote.detail
    );
    Ok(())
}

/// Every program loads with the mechanism the plan chose. A hook that fell
/// back because the kernel refused numatrace's own program (a verifier
/// rejection) is a bug in the program, and the fallback costs more per run.
fn check_none_refused(hooks: &[PlannedHook]) -> Result<()> {
    let refused: Vec<String> = hooks
        .iter()
        .filter(|h| h.detail.contains("degraded to"))
        .map(|h| {
            let first: String = h.detail.chars().take(200).collect();
            format!("{}: {first}", h.hook.name())
        })
        .collect();
    ensure!(
        refused.is_empty(),
        "the kernel refused programs and their hooks fell back: {}",
        refused.join("; ")
    );
    Ok(())
}

/// The slow node's 1 GiB is followed whole under the default budget, and
/// the kernel's own figure for the stamp array is its slots' bytes: the
/// kernel memory per GiB of slow memory followed, printed as a benchmark.
fn check_folio_map(m: &FolioMap) -> Result<()> {
    let s = &m.sampling;
    let (rate, followed, slow, budget) = (s.rate, s.followed_pfns, s.slow_pfns, s.map_budget_bytes);
    let slots = m.plan.slots;
    let stamps = m
        .map_bytes("STAMPS")
        .context("no STAMPS in folio_map.maps")?;
    let total: u64 = m.maps.iter().map(|&(_, b)| b).sum();
    let gib = followed as f64 * 4096.0 / f64::from(1 << 30);
    println!(
        "    doctor: {slow} slow PFNs, 1 in {rate} followed; kernel memory: STAMPS {stamps} bytes ({:.2} MiB per GiB followed), all maps {:.1} MiB of a {:.0} MiB budget",
        stamps as f64 / gib / f64::from(1 << 20),
        total as f64 / f64::from(1 << 20),
        budget as f64 / f64::from(1 << 20)
    );
    ensure!(
        slow >= 1 << 18 && rate == 1 && followed == slow,
        "the 1 GiB slow node is not followed whole ({followed} of {slow} PFNs, rate {rate})"
    );
    // 6.4 on count an array's values (32 bytes a slot); earlier kernels'
    // memlock is an estimate that also counts the 4-byte key, rounded to 8.
    ensure!(
        stamps >= slots * 32 && stamps <= slots * 40 + (1 << 20),
        "STAMPS takes {stamps} bytes for {slots} slots of 32"
    );
    ensure!(
        total <= budget,
        "the maps take {total} bytes, over the {budget} budget"
    );
    Ok(())
}

/// Every hook the design names a function for says whether the plan uses
/// it and, if not, why.
fn check_design(hooks: &[PlannedHook]) -> Result<()> {
    let mut named = 0;
    for h in hooks {
        let Some(design) = &h.design else {
            continue;
        };
        named += 1;
        let function = &design.function;
        if design.used {
            ensure!(
                h.target.as_deref() == Some(function.as_str()),
                "{}: design function {function} marked used, but the target is {:?}",
                h.hook.name(),
                h.target
            );
        } else {
            ensure!(
                !design.why_not.is_empty(),
                "{}: design function {function} not used and no reason given",
                h.hook.name()
            );
        }
    }
    ensure!(
        named == 4,
        "{named} hooks name a design function, want 4 (hint_fault, decision, scan_range, migrate)"
    );
    Ok(())
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use serde_json::{json, Value};

    /// The report a doctor.json holding `v` reads as.
    fn report(v: Value) -> Report {
        serde_json::from_value(v).expect("doctor's report")
    }

    fn check_json(v: &Value, series: Series) -> Result<()> {
        check_report(&report(v.clone()), series)
    }

    /// A doctor.json: `ok`, the memory tiers and a hook on each target.
    pub(in crate::vmtest) fn doctor(ok: bool, tiers: Value, targets: &[&str]) -> Value {
        let design = |t: &str| match t {
            "numa_migrate_check" | "numa_migrate_prep" => {
                json!({"function": "do_numa_page", "used": false, "why_not": "do_numa_page inlined/absent"})
            }
            "change_prot_numa" => {
                json!({"function": "change_pte_range", "used": false, "why_not": "change_pte_range inlined/absent"})
            }
            "migrate_misplaced_page" => {
                json!({"function": "migrate_misplaced_folio", "used": false, "why_not": "migrate_misplaced_folio inlined/absent"})
            }
            // Hooks the design names no function for.
            "init_numa_balancing"
            | "__mmdrop"
            | "alloc_demote_page"
            | "alloc_migrate_folio"
            | "alloc_demote_folio"
            | "alloc_misplaced_dst_folio"
            | "alloc_misplaced_dst_page" => Value::Null,
            used => json!({"function": used, "used": true, "why_not": ""}),
        };
        let hooks: Vec<Value> = targets
            .iter()
            .map(|t| {
                // Reclaim's demotion callback, with the memory cgroup's
                // path of the kernel that has it under that name.
                let (hook, detail) = match *t {
                    "alloc_demote_folio" => ("demote", "memory cgroup: folio.memcg_data -> obj_cgroup.memcg -> css.cgroup -> kn.id"),
                    "alloc_demote_page" | "alloc_migrate_folio" => ("demote", "memory cgroup: folio.memcg_data -> mem_cgroup.css.cgroup -> kn.id"),
                    "alloc_misplaced_dst_folio" | "alloc_misplaced_dst_page" => ("promote_dst", ""),
                    _ => ("hint_fault", ""),
                };
                json!({"hook": hook, "target": t, "mechanism": "fentry",
                "layout": null, "required": true, "status": "attached", "detail": detail,
                "design": design(t)})
            })
            .collect();
        json!({
            "ok": ok,
            "kernel_release": "6.12.117+deb12-amd64",
            "checks": [{"name": "snapshot_reads", "status": "ok", "detail": "", "remedy": ""}],
            "attach_plan": {"complete": true, "hooks": hooks},
            "mechanisms": {"fentry": "ok"},
            "trials": [],
            "memory_tiers": tiers,
            "nodes": [],
            "numa_balancing": 2,
            "tunables": {},
            "kernel_hotness": "latency",
            "folio_map": folio_map_json(1, 262_144 * 32),
        })
    }

    /// The folio map of the test bed's 1 GiB slow node at `rate`, with the
    /// kernel's figure for `STAMPS`.
    fn folio_map(rate: u64, stamps: u64) -> FolioMap {
        serde_json::from_value(folio_map_json(rate, stamps)).expect("a folio map")
    }

    fn folio_map_json(rate: u64, stamps: u64) -> Value {
        let slots = 262_144 / rate;
        json!({
            "sampling": {"rate": rate, "followed_pfns": slots, "slow_pfns": 262_144,
                "map_budget_bytes": 256u64 << 20, "map_bytes": 0, "stamp_bytes": 0,
                "coverage": 1.0, "folios": 0},
            "plan": {"slots": slots, "budget_bytes": 256u64 << 20, "fixed_bytes": 0,
                "slot_bytes": 32, "spans": [], "shift": 0},
            "maps": [["STAMPS", stamps], ["EVENTS", 16u64 << 20]],
            "sym_vmemmap_base": 0,
            "page_struct_size": 64,
        })
    }

    pub(in crate::vmtest) fn two_tiers() -> Value {
        json!([
            {"tier": "memory_tier4", "id": 4, "nodes": [0]},
            {"tier": "memory_tier22", "id": 22, "nodes": [1]},
        ])
    }

    #[test]
    fn doctor_json_checks() {
        let folio = [
            "numa_migrate_check",
            "migrate_misplaced_folio",
            "change_prot_numa",
            "should_numa_migrate_memory",
            "init_numa_balancing",
            "__mmdrop",
            "alloc_migrate_folio",
            "alloc_misplaced_dst_folio",
        ];
        let page = [
            "numa_migrate_prep",
            "migrate_misplaced_page",
            "change_prot_numa",
            "should_numa_migrate_memory",
            "init_numa_balancing",
            "__mmdrop",
            "alloc_demote_page",
            "alloc_misplaced_dst_page",
        ];
        let per_pte = [
            "numa_migrate_check",
            "migrate_misplaced_folio",
            "change_pte_range",
            "should_numa_migrate_memory",
            "init_numa_balancing",
            "__mmdrop",
            "alloc_demote_folio",
            "alloc_misplaced_dst_folio",
        ];
        assert!(check_json(&doctor(true, two_tiers(), &folio), Series::V6_12).is_ok());
        assert!(check_json(&doctor(true, two_tiers(), &page), Series::V6_1).is_ok());
        assert!(check_json(&doctor(true, two_tiers(), &folio), Series::V6_1).is_err());
        assert!(check_json(&doctor(true, two_tiers(), &per_pte), Series::V7).is_ok());
        assert!(check_json(&doctor(true, two_tiers(), &folio), Series::V7).is_err());
        // 7.x read through the memcg itself: the object cgroup misread.
        let mut misread = doctor(true, two_tiers(), &per_pte);
        misread["attach_plan"]["hooks"][6]["detail"] =
            json!("memory cgroup: folio.memcg_data -> mem_cgroup.css.cgroup -> kn.id");
        assert!(check_json(&misread, Series::V7).is_err());
        // A design function left unused without a reason.
        let mut silent = doctor(true, two_tiers(), &per_pte);
        silent["attach_plan"]["hooks"][0]["design"]["why_not"] = json!("");
        assert!(check_json(&silent, Series::V7).is_err());
        // Snapshots read slot by slot: the batch lookup was refused.
        let mut slotwise = doctor(true, two_tiers(), &per_pte);
        slotwise["checks"][0]["status"] = json!("warn");
        assert!(check_json(&slotwise, Series::V7).is_err());
        // A program the verifier refused, its hook on the fallback.
        let mut refused = doctor(true, two_tiers(), &folio);
        refused["attach_plan"]["hooks"][0]["detail"] =
            json!("fentry refused: fentry fentry_hint_fault: ...; degraded to kprobe");
        assert!(check_json(&refused, Series::V6_12).is_err());
        assert!(check_json(&doctor(false, two_tiers(), &folio), Series::V6_12).is_err());
        let one_tier = json!([{"tier": "memory_tier4", "id": 4, "nodes": [0, 1]}]);
        assert!(check_json(&doctor(true, one_tier, &folio), Series::V6_12).is_err());
        let inverted = json!([
            {"tier": "memory_tier4", "id": 4, "nodes": [1]},
            {"tier": "memory_tier22", "id": 22, "nodes": [0]},
        ]);
        assert!(check_json(&doctor(true, inverted, &folio), Series::V6_12).is_err());
    }

    #[test]
    fn the_folio_map_follows_the_slow_node_whole_in_its_slots_bytes() {
        assert!(check_folio_map(&folio_map(1, 262_144 * 32)).is_ok());
        // 6.1 counts the key too.
        assert!(check_folio_map(&folio_map(1, 262_144 * 40)).is_ok());
        assert!(check_folio_map(&folio_map(8, 32_768 * 32)).is_err());
        assert!(check_folio_map(&folio_map(1, 262_144 * 100)).is_err());
        assert!(check_folio_map(&folio_map(1, 1 << 40)).is_err());
        assert!(serde_json::from_value::<FolioMap>(json!({})).is_err());
    }
}
