//! `numatrace doctor --json` on the test bed.
use std::path::Path;

use anyhow::{bail, ensure, Context, Result};
use serde_json::Value;

use crate::kernels::Series;
use crate::results::u;

pub(super) const SCRIPT: &str = include_str!("doctor.sh");

/// `numatrace doctor --json` sees the test bed as it is: everything attaches,
/// two memory tiers with node 1 below node 0, and the kernel's own NUMA
/// functions as hook targets.
pub(super) fn check(dir: &Path, _console: &str, series: Series) -> Result<()> {
    let rc = std::fs::read_to_string(dir.join("doctor.rc")).context("no doctor.rc")?;
    let json_text = std::fs::read_to_string(dir.join("doctor.json")).context("no doctor.json")?;
    ensure!(
        rc.trim() == "0",
        "numatrace doctor --json exited with {}",
        rc.trim()
    );
    let doc: Value = serde_json::from_str(&json_text)
        .with_context(|| format!("doctor.json is not JSON: {}", snippet(&json_text)))?;
    check_json(&doc, series)
}

fn check_json(doc: &Value, series: Series) -> Result<()> {
    let failing: Vec<String> = doc["checks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["status"] == "fail")
        .map(|c| format!("{}: {}", c["name"], c["detail"]))
        .collect();
    ensure!(
        doc["ok"] == Value::Bool(true),
        "\"ok\" is {} (failing checks: {})",
        doc["ok"],
        failing.join("; ")
    );
    let reads = doc["checks"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["name"] == "snapshot_reads");
    ensure!(
        reads.is_some_and(|c| c["status"] == "ok"),
        "snapshots do not read per-CPU maps in one batch lookup each: {reads:?}"
    );
    ensure!(
        doc["attach_plan"]["complete"] == Value::Bool(true),
        "attach_plan.complete is {}",
        doc["attach_plan"]["complete"]
    );

    let tiers = doc["memory_tiers"]
        .as_array()
        .context("memory_tiers is not an array")?;
    ensure!(
        tiers.len() >= 2,
        "memory_tiers has {} entries, want >= 2: {}",
        tiers.len(),
        doc["memory_tiers"]
    );
    let tier_of = |node: u64| {
        tiers.iter().find_map(|t| {
            let nodes = t["nodes"].as_array()?;
            nodes
                .iter()
                .any(|n| n.as_u64() == Some(node))
                .then(|| t["id"].as_u64())?
        })
    };
    match (tier_of(0), tier_of(1)) {
        (Some(t0), Some(t1)) if t1 > t0 => {}
        (t0, t1) => bail!(
            "node 1 (tier {t1:?}) is not in a lower tier than node 0 (tier {t0:?}): {}",
            doc["memory_tiers"]
        ),
    }

    let hooks = doc["attach_plan"]["hooks"]
        .as_array()
        .context("attach_plan.hooks is not an array")?;
    let targets: Vec<&str> = hooks.iter().filter_map(|h| h["target"].as_str()).collect();
    // The design's change_pte_range where the kernel keeps it a function;
    // init_numa_balancing and __mmdrop: the fault-count patch's counter
    // resets and mm teardowns.
    let expected: &[&str] = match series {
        Series::V6_1 => &[
            "numa_migrate_prep",
            "migrate_misplaced_page",
            "change_prot_numa",
            "init_numa_balancing",
            "__mmdrop",
        ],
        Series::V6_12 | Series::V6_12Rfc => &[
            "numa_migrate_check",
            "migrate_misplaced_folio",
            "change_prot_numa",
            "init_numa_balancing",
            "__mmdrop",
        ],
        Series::V7 => &[
            "numa_migrate_check",
            "migrate_misplaced_folio",
            "change_pte_range",
            "init_numa_balancing",
            "__mmdrop",
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
    check_folio_map(&doc["folio_map"])
}

/// Every program loads with the mechanism the plan chose. A hook that fell
/// back because the kernel refused numatrace's own program (a verifier
/// rejection) is a bug in the program, and the fallback costs more per run.
fn check_none_refused(hooks: &[Value]) -> Result<()> {
    let refused: Vec<String> = hooks
        .iter()
        .filter_map(|h| {
            let detail = h["detail"].as_str()?;
            detail.contains("degraded to").then(|| {
                let first: String = detail.chars().take(200).collect();
                format!("{}: {first}", h["hook"])
            })
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
fn check_folio_map(m: &Value) -> Result<()> {
    let rate = u(m, &["sampling", "rate"])?;
    let followed = u(m, &["sampling", "followed_pfns"])?;
    let slow = u(m, &["sampling", "slow_pfns"])?;
    let slots = u(m, &["plan", "slots"])?;
    let budget = u(m, &["sampling", "map_budget_bytes"])?;
    let maps = m["maps"]
        .as_array()
        .context("folio_map.maps is not an array")?;
    let bytes_of = |name: &str| {
        maps.iter()
            .find(|r| r[0] == name)
            .and_then(|r| r[1].as_u64())
    };
    let stamps = bytes_of("STAMPS").context("no STAMPS in folio_map.maps")?;
    let total: u64 = maps.iter().filter_map(|r| r[1].as_u64()).sum();
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
fn check_design(hooks: &[Value]) -> Result<()> {
    let mut named = 0;
    for h in hooks {
        let design = &h["design"];
        if design.is_null() {
            continue;
        }
        named += 1;
        let function = design["function"].as_str().unwrap_or("");
        let used = design["used"].as_bool();
        let why_not = design["why_not"].as_str().unwrap_or("");
        match used {
            Some(true) => ensure!(
                h["target"].as_str() == Some(function),
                "{}: design function {function} marked used, but the target is {}",
                h["hook"],
                h["target"]
            ),
            Some(false) => ensure!(
                !why_not.is_empty(),
                "{}: design function {function} not used and no reason given",
                h["hook"]
            ),
            None => bail!("{}: design entry without `used`: {design}", h["hook"]),
        }
    }
    ensure!(
        named == 4,
        "{named} hooks name a design function, want 4 (hint_fault, decision, scan_range, migrate)"
    );
    Ok(())
}

fn snippet(text: &str) -> String {
    let s: String = text.chars().take(300).collect();
    if s.len() < text.len() {
        format!("{s}...")
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn doctor(ok: bool, tiers: Value, targets: &[&str]) -> Value {
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
            "init_numa_balancing" | "__mmdrop" => Value::Null,
            used => json!({"function": used, "used": true, "why_not": ""}),
        };
        let hooks: Vec<Value> = targets
            .iter()
            .map(|t| {
                json!({"hook": "h", "target": t, "mechanism": "fentry",
                "layout": null, "required": true, "status": "attached", "detail": "",
                "design": design(t)})
            })
            .collect();
        json!({
            "ok": ok,
            "kernel_release": "6.12.117+deb12-amd64",
            "checks": [{"name": "snapshot_reads", "status": "ok", "detail": "", "remedy": ""}],
            "attach_plan": {"complete": true, "hooks": hooks},
            "memory_tiers": tiers,
            "numa_balancing": 2,
            "folio_map": folio_map(1, 262_144 * 32),
        })
    }

    /// The folio map of the test bed's 1 GiB slow node at `rate`, with the
    /// kernel's figure for `STAMPS`.
    fn folio_map(rate: u64, stamps: u64) -> Value {
        let slots = 262_144 / rate;
        json!({
            "sampling": {"rate": rate, "followed_pfns": slots, "slow_pfns": 262_144,
                "map_budget_bytes": 256u64 << 20},
            "plan": {"slots": slots},
            "maps": [["STAMPS", stamps], ["EVENTS", 16u64 << 20]],
        })
    }

    fn two_tiers() -> Value {
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
        ];
        let page = [
            "numa_migrate_prep",
            "migrate_misplaced_page",
            "change_prot_numa",
            "should_numa_migrate_memory",
            "init_numa_balancing",
            "__mmdrop",
        ];
        let per_pte = [
            "numa_migrate_check",
            "migrate_misplaced_folio",
            "change_pte_range",
            "should_numa_migrate_memory",
            "init_numa_balancing",
            "__mmdrop",
        ];
        assert!(check_json(&doctor(true, two_tiers(), &folio), Series::V6_12).is_ok());
        assert!(check_json(&doctor(true, two_tiers(), &page), Series::V6_1).is_ok());
        assert!(check_json(&doctor(true, two_tiers(), &folio), Series::V6_1).is_err());
        assert!(check_json(&doctor(true, two_tiers(), &per_pte), Series::V7).is_ok());
        assert!(check_json(&doctor(true, two_tiers(), &folio), Series::V7).is_err());
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
        assert!(check_folio_map(&json!({})).is_err());
    }
}
