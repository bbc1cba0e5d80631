//! What `numatrace doctor --json` reports: each prerequisite's outcome with
//! its remedy, the attach plan, the mechanism trials and the per-folio
//! state as loaded. The probe library fills it; its readers (the VM tests'
//! checks among them) deserialize this type, so a field renamed here fails
//! to compile there.
use std::{borrow::Cow, collections::BTreeMap};

use serde::{Deserialize, Serialize};

use crate::{
    mapplan::MapPlan,
    params::KernelHotness,
    plan::AttachPlan,
    sampling::Sampling,
    topology::{MemoryTier, Node, Tunables},
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Ok,
    Warn,
    Fail,
}

/// One prerequisite's outcome, as `doctor` lists it and the preflight of
/// every attaching command decides on it: what is wrong and how to fix it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Check {
    pub name: Cow<'static, str>,
    pub status: Status,
    pub detail: String,
    pub remedy: String,
}

/// Result of one mechanism trial.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Trial {
    pub mechanism: Cow<'static, str>,
    pub target: String,
    pub ok: bool,
    /// Times the trial program ran while we triggered it.
    pub hits: u64,
    pub detail: String,
}

/// Mechanism name -> "ok" or "refused: <why>".
pub type Mechanisms = BTreeMap<Cow<'static, str>, String>;

#[derive(Debug, Serialize, Deserialize)]
pub struct Report {
    pub ok: bool,
    pub kernel_release: String,
    pub checks: Vec<Check>,
    pub attach_plan: AttachPlan,
    pub mechanisms: Mechanisms,
    pub trials: Vec<Trial>,
    pub memory_tiers: Vec<MemoryTier>,
    pub nodes: Vec<Node>,
    pub numa_balancing: Option<u32>,
    pub tunables: Tunables,
    /// What the kernel's promotion threshold measures.
    pub kernel_hotness: KernelHotness,
    /// The per-folio state under the default budget, as loaded (None
    /// without root or when the object did not load).
    pub folio_map: Option<FolioMap>,
}

impl Report {
    /// The check called `name`, if doctor made it.
    pub fn check(&self, name: &str) -> Option<&Check> {
        self.checks.iter().find(|c| c.name == name)
    }
}

/// How per-folio state is kept on this host: the plan under the budget,
/// and the kernel's memory figure for each map once loaded.
#[derive(Debug, Serialize, Deserialize)]
pub struct FolioMap {
    pub sampling: Sampling,
    pub plan: MapPlan,
    /// (map, bytes) from each map's fdinfo `memlock`.
    pub maps: Vec<(String, u64)>,
    /// Where folio addresses become PFNs: `vmemmap_base`'s address, or 0
    /// for the fixed layout.
    pub sym_vmemmap_base: u64,
    pub page_struct_size: u32,
}

impl FolioMap {
    /// The kernel's figure for map `name`.
    pub fn map_bytes(&self, name: &str) -> Option<u64> {
        self.maps.iter().find(|(n, _)| n == name).map(|&(_, b)| b)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
/// A BPF program or map loaded in the kernel (`doctor --loaded`).
pub struct Object {
    pub id: u32,
    pub name: String,
    /// The name is one of numatrace's programs or maps.
    pub numatrace: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Link {
    pub id: u32,
    pub program_id: u32,
    /// The link attaches one of numatrace's programs.
    pub numatrace: bool,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Loaded {
    pub programs: Vec<Object>,
    pub maps: Vec<Object>,
    pub links: Vec<Link>,
}

impl Loaded {
    /// numatrace's programs, maps and links.
    pub fn numatrace_counts(&self) -> (usize, usize, usize) {
        (
            self.programs.iter().filter(|o| o.numatrace).count(),
            self.maps.iter().filter(|o| o.numatrace).count(),
            self.links.iter().filter(|l| l.numatrace).count(),
        )
    }
}

/// `doctor --loaded`'s text: the counts, then one line per object, marked
/// when it is numatrace's. Kernel object names are letters, digits, `_`
/// and `.` only (the kernel refuses others), so they print as they are.
impl std::fmt::Display for Loaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (p, m, l) = self.numatrace_counts();
        writeln!(
            f,
            "BPF objects loaded: {} programs, {} maps, {} links; numatrace's: {p} programs, {m} maps, {l} links",
            self.programs.len(),
            self.maps.len(),
            self.links.len()
        )?;
        let mark = |ours: bool| if ours { "numatrace" } else { "" };
        for o in &self.programs {
            writeln!(
                f,
                "  prog {:>6}  {:<16} {}",
                o.id,
                o.name,
                mark(o.numatrace)
            )?;
        }
        for o in &self.maps {
            writeln!(
                f,
                "  map  {:>6}  {:<16} {}",
                o.id,
                o.name,
                mark(o.numatrace)
            )?;
        }
        for k in &self.links {
            writeln!(
                f,
                "  link {:>6}  prog {:<11} {}",
                k.id,
                k.program_id,
                mark(k.numatrace)
            )?;
        }
        Ok(())
    }
}
