//! The scorecard: the kernel's promotions and each model's judged against
//! the accesses that really happened (a truth file, [`crate::truth`]).
//!
//! Two passes. The trace ([`Promotions`], a [`Sink`]) gives, per 4 KiB
//! slow-tier frame, when the kernel moved its page to the top tier (and to
//! which frame) and when each model would first have promoted it. The
//! truth file ([`Promotions::score`], [`judge`]) then gives each page's
//! accesses per window: at its slow frame until the kernel moved it, at
//! its top-tier frame after.
//!
//! A page is *hot* in a window when it has at least a rule's number of
//! accesses there, and hot *on the slow tier* when it began that window
//! there (at its new frame, the accesses in the window of its promotion
//! count: a page promoted on its first access has no other). Per policy
//! and rule, over the horizon `T`:
//! - precision: of the pages it promoted, the share hot in a window
//!   starting within `T` after the promotion;
//! - recall: of the pages hot on the slow tier, the share it promoted no
//!   later than `T` after their first hot window;
//! - burst promotions: promoted pages hot within `T` before the promotion
//!   and not within `T` after;
//! - time to promotion: from a page's first hot window to its promotion;
//! - slow-tier access share: the accesses served by the slow tier over all
//!   user accesses. Measured for the kernel (by the frames the truth
//!   names); projected for a model, which serves a page's accesses from
//!   DRAM from the first window that starts after it would have promoted
//!   it (and those the page had at its DRAM frame, when it would have
//!   promoted it no later than the kernel did), and from the slow tier
//!   before, wherever the kernel put the page.
//!
//! The truth is read over the trace's span (from its start to its last
//! event or counter snapshot): a frame holds other pages before and after. Promotions and hot
//! pages whose horizon reaches past that are not judged (counted apart),
//! nor promotions before its first window.
mod judge;
#[cfg(test)]
mod tests;

use std::collections::HashMap;

use anyhow::{Context, Result};
use numa_ebpf_common::{DemoteEvent, FaultEvent};

use crate::{
    decode::{Event, Snapshot},
    mapplan::MapPlan,
    model::{
        policy::{params_text, Policy, PolicyBank},
        shadow::FaultVerdicts,
    },
    sink::Sink,
    trace::Header,
};

pub use judge::{PolicyScore, RuleScores, Scorecard, SlowShare};

/// Hot rules at most (`--hot-accesses`).
pub const MAX_RULES: usize = 4;

/// Memory the per-page state may take, whatever the trace or truth holds:
/// the page count it allows is stated in the scorecard, and pages past it
/// are counted, not followed.
pub const PAGE_BUDGET_BYTES: usize = 256 << 20;

/// Not promoted (yet).
const NEVER: u64 = u64::MAX;

/// What makes a page hot, and how far ahead a promotion is judged.
#[derive(Debug, Clone, PartialEq)]
pub struct Rules {
    /// Accesses in one truth window that make a page hot there: one rule
    /// per value, 1 to [`MAX_RULES`] of them.
    pub hot_accesses: Vec<u32>,
    pub horizon_ns: u64,
}

/// One slow-tier page (a 4 KiB frame and the page the trace found there).
struct Page {
    /// When each policy (the kernel first) promoted it, [`NEVER`] if not.
    promoted_ns: Box<[u64]>,
    /// The kernel's move: the top-tier frame, and when.
    moved: Option<(u64, u64)>,
    /// When reclaim demoted it from that frame ([`NEVER`]: it stayed).
    left_ns: u64,
    /// Per rule: the start of the first window it was hot in on the slow
    /// tier.
    first_hot_ns: [u64; MAX_RULES],
    /// Per policy and rule: [`AFTER`] and [`BEFORE`].
    hot_near: Box<[u8]>,
}

/// Hot in a window starting within the horizon after the promotion.
const AFTER: u8 = 1;
/// Hot in a window starting within the horizon before it.
const BEFORE: u8 = 2;

impl Page {
    fn new(policies: usize) -> Page {
        Page {
            promoted_ns: vec![NEVER; policies].into_boxed_slice(),
            moved: None,
            left_ns: NEVER,
            first_hot_ns: [NEVER; MAX_RULES],
            hot_near: vec![0; policies * MAX_RULES].into_boxed_slice(),
        }
    }

    /// Bytes one page takes with `policies`, its map entry included.
    fn bytes(policies: usize) -> usize {
        std::mem::size_of::<(u64, Page)>() + policies * (8 + MAX_RULES) + 16
    }
}

/// The models' names, with their parameters where two share a name (a
/// sweep's).
fn labels(models: &[Box<dyn Policy>]) -> Vec<String> {
    let names: Vec<String> = models.iter().map(|m| m.name()).collect();
    models
        .iter()
        .zip(&names)
        .map(|(m, name)| {
            if names.iter().filter(|n| *n == name).count() == 1 {
                return name.clone();
            }
            format!("{name} {}", params_text(&m.params(), ","))
        })
        .collect()
}

/// The first pass: every policy's promotions, by slow-tier frame.
pub struct Promotions {
    verdicts: FaultVerdicts,
    answers: Vec<Option<bool>>,
    names: Vec<String>,
    plan: MapPlan,
    pages: HashMap<u64, Page>,
    /// The kernel's promotions by their top-tier frame: the slow frame.
    at_top: HashMap<u64, u64>,
    max_pages: usize,
    /// Pages not followed because [`PAGE_BUDGET_BYTES`] was reached.
    untracked: u64,
    /// Faults on a frame after the kernel moved its page away (another
    /// page there): not followed.
    reused_frames: u64,
    /// The trace's span (its start, its last event or counter snapshot):
    /// the truth is read over it only, as a frame may hold other pages
    /// before and after.
    started_ns: u64,
    last_ns: u64,
}

impl Promotions {
    /// The kernel's promotions and `models`' over the trace of `header`,
    /// which must name the slow tier's frames (its folio map's plan).
    pub fn new(header: &Header, models: Vec<Box<dyn Policy>>) -> Result<Promotions> {
        let plan = header.map_plan.clone().context(
            "the trace names no slow-tier frames (it predates the folio map's plan): \
             the scorecard needs them to tell a slow-tier access from a DRAM one; \
             record the workload again with this numatrace",
        )?;
        let mut p = Promotions::with_plan(plan, models);
        p.started_ns = header.started_mono_ns;
        Ok(p)
    }

    fn with_plan(plan: MapPlan, models: Vec<Box<dyn Policy>>) -> Promotions {
        let names: Vec<String> = std::iter::once("kernel".to_owned())
            .chain(labels(&models))
            .collect();
        let verdicts = FaultVerdicts::new(models);
        let max_pages = PAGE_BUDGET_BYTES / Page::bytes(names.len());
        Promotions {
            verdicts,
            answers: Vec::new(),
            names,
            plan,
            pages: HashMap::new(),
            at_top: HashMap::new(),
            max_pages,
            untracked: 0,
            reused_frames: 0,
            started_ns: 0,
            last_ns: 0,
        }
    }

    fn is_slow(&self, pfn: u64) -> bool {
        self.plan
            .spans
            .iter()
            .any(|s| (s.start..s.end).contains(&pfn))
    }

    /// The page at slow frame `pfn`, made when there is room and the
    /// frame is in the trace's sample of the slow tier.
    fn page(&mut self, pfn: u64) -> Option<&mut Page> {
        if !self.pages.contains_key(&pfn) {
            self.plan.slot_of(pfn)?;
            if self.pages.len() >= self.max_pages {
                self.untracked += 1;
                return None;
            }
            self.pages.insert(pfn, Page::new(self.names.len()));
        }
        self.pages.get_mut(&pfn)
    }

    fn fault(&mut self, f: &FaultEvent) {
        self.verdicts.fault(f, &mut self.answers);
        // The faults the models compete on: the kernel's slow-tier decisions
        // on the folios the trace follows.
        if f.src_pfn == 0 || !(PolicyBank::asks(f) && PolicyBank::judges(f)) {
            return;
        }
        let moved = f.migrated() && f.dst_pfn != 0;
        let answers = std::mem::take(&mut self.answers);
        for i in 0..f.pages() {
            let ts = f.ts_ns;
            let Some(page) = self.page(f.src_pfn + i) else {
                continue;
            };
            if page.moved.is_some_and(|(_, at)| at < ts) {
                self.reused_frames += 1;
                continue;
            }
            let newly = moved && page.moved.is_none();
            if newly {
                page.promoted_ns[0] = ts;
                page.moved = Some((f.dst_pfn + i, ts));
            }
            for (t, a) in page.promoted_ns[1..].iter_mut().zip(&answers) {
                if *a == Some(true) && *t == NEVER {
                    *t = ts;
                }
            }
            if newly {
                self.at_top.insert(f.dst_pfn + i, f.src_pfn + i);
            }
        }
        self.answers = answers;
    }
}

impl Promotions {
    /// A promoted page demoted from its top-tier frame: the frame's later
    /// accesses are another page's (where it went is another slow frame).
    fn demotion(&mut self, d: &DemoteEvent) {
        for i in 0..u64::from(d.nr_pages.max(1)) {
            let Some(&slow) = self.at_top.get(&(d.src_pfn + i)) else {
                continue;
            };
            if let Some(page) = self.pages.get_mut(&slow) {
                if page.left_ns == NEVER && page.moved.is_some_and(|(_, at)| at <= d.ts_ns) {
                    page.left_ns = d.ts_ns;
                }
            }
        }
    }
}

impl Sink for Promotions {
    fn event(&mut self, ev: &Event) -> Result<()> {
        self.started_ns = self.started_ns.min(ev.ts_ns());
        self.last_ns = self.last_ns.max(ev.ts_ns());
        match ev {
            Event::Scan(s) => self.verdicts.scan(s),
            Event::Fault(f) => self.fault(f),
            Event::Demote(d) => self.demotion(d),
            Event::Skip(_) => {}
            Event::Damon(_) => {}
        }
        Ok(())
    }

    /// Counter snapshots mark the trace's time where no event falls (the
    /// last one is taken as the recording stops).
    fn snapshot(&mut self, s: &Snapshot) -> Result<()> {
        self.last_ns = self.last_ns.max(s.ts_ns);
        Ok(())
    }
}
