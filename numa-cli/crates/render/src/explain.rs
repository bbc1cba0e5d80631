//! `numatrace explain`: one page's life in a trace, in time order: the
//! scan passes over it, its hint faults (latency since its scan, the
//! fault-count delta, the kernel's decision and every model's), its
//! migrations and its demotions.
//!
//! Two passes over the trace. The first finds the identities (the
//! `mapping` and `index` a slow-tier folio's fault records carry, which
//! migration keeps) of the folios that held the page; the second gathers
//! the timeline, demotions found by those identities, so a demotion
//! before the page's first recorded fault is found too.
use std::collections::BTreeSet;
use std::fmt::Write as _;

use anyhow::Result;
use numa_core::decode::{comm, Event};
use numa_core::model::policy::{build_all, KernelDefaults, ModelDefaults};
use numa_core::model::shadow::FaultVerdicts;
use numa_core::printable::printable;
use numa_core::sink::Sink;
use numa_core::trace::Header;
use numa_ebpf_common::{DemoteEvent, FaultEvent, HistEntry, ScanEvent};
use serde::Serialize;

/// Entries kept: the page's first this many events; the rest are counted.
pub const MAX_ENTRIES: usize = 10_000;

/// Identities of the page's folios kept: a page re-allocated this often
/// is past reading as one timeline anyway.
const MAX_IDENTITIES: usize = 1024;

const PAGE: u64 = 4096;

/// The page asked about.
#[derive(Debug, Clone, Copy)]
pub struct Target {
    pub pid: u32,
    /// Page aligned.
    pub addr: u64,
}

impl Target {
    pub fn new(pid: u32, addr: u64) -> Target {
        Target {
            pid,
            addr: addr & !(PAGE - 1),
        }
    }

    /// The fault was on this process's folio that holds the page: a large
    /// folio covers its naturally aligned span.
    fn holds(&self, f: &FaultEvent) -> bool {
        let span = f.pages().max(1).next_power_of_two() * PAGE;
        f.tgid() == self.pid && f.addr & !(span - 1) == self.addr & !(span - 1)
    }

    fn scans(&self, s: &ScanEvent) -> bool {
        s.tgid() == self.pid && (s.start..s.end).contains(&self.addr)
    }
}

/// The first pass: the identities of the folios that held the page.
pub struct Identities {
    target: Target,
    pub found: BTreeSet<(u64, u64)>,
}

impl Identities {
    pub fn new(target: Target) -> Identities {
        Identities {
            target,
            found: BTreeSet::new(),
        }
    }
}

impl Sink for Identities {
    fn event(&mut self, ev: &Event) -> Result<()> {
        if let Event::Fault(f) = ev {
            if self.target.holds(f) && f.mapping != 0 && self.found.len() < MAX_IDENTITIES {
                self.found.insert((f.mapping, f.index));
            }
        }
        Ok(())
    }
}

/// One event of the timeline.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Entry {
    /// A pass of the scanner over the range that holds the page.
    Scan {
        ts_ns: u64,
        start: u64,
        end: u64,
        ptes_updated: u64,
    },
    HintFault {
        ts_ns: u64,
        comm: String,
        pages: u64,
        src_nid: i32,
        dst_nid: i32,
        /// Since the scan that protected the folio (numatrace's), and the
        /// kernel's own figure with the threshold it compared.
        latency_ms: Option<f64>,
        kernel_latency_ms: Option<u32>,
        threshold_ms: Option<u32>,
        /// Hint faults of the process between that scan and this fault.
        fault_count_delta: Option<u64>,
        /// The kernel's decision (outcome name).
        kernel: &'static str,
        /// Whether the migration was tried and whether it succeeded.
        migrated: Option<bool>,
        /// The folio's PFN, and the one its migration allocated (0: not known).
        src_pfn: u64,
        dst_pfn: u64,
        /// Each model's answer, in `Timeline::models`' order (`None`: not
        /// a tiering decision).
        models: Vec<Option<bool>>,
    },
    Demotion {
        ts_ns: u64,
        reclaimer: &'static str,
        src_nid: i32,
        dst_nid: i32,
        src_pfn: u64,
        dst_pfn: u64,
        pages: u32,
    },
}

/// The second pass: the page's events.
#[derive(Serialize)]
pub struct Timeline {
    pub pid: u32,
    pub addr: u64,
    /// The trace's start, CLOCK_MONOTONIC ns: entries' times are shown
    /// relative to it.
    pub started_ns: u64,
    pub models: Vec<String>,
    pub entries: Vec<Entry>,
    /// Events past [`MAX_ENTRIES`].
    pub omitted: u64,
    #[serde(skip)]
    target: Target,
    #[serde(skip)]
    identities: BTreeSet<(u64, u64)>,
    #[serde(skip)]
    verdicts: FaultVerdicts,
    #[serde(skip)]
    answers: Vec<Option<bool>>,
}

impl Timeline {
    /// Models as `dump` asks them: every one, at its defaults, with the
    /// kernel's settings from the trace's header.
    pub fn new(target: Target, identities: Identities, header: &Header) -> Result<Timeline> {
        let k = KernelDefaults::from_host(&header.tunables, header.params.as_ref());
        let verdicts = FaultVerdicts::new(build_all(&[], &ModelDefaults::default(), &k)?);
        Ok(Timeline {
            pid: target.pid,
            addr: target.addr,
            started_ns: header.started_mono_ns,
            models: verdicts.names(),
            entries: Vec::new(),
            omitted: 0,
            target,
            identities: identities.found,
            verdicts,
            answers: Vec::new(),
        })
    }

    fn push(&mut self, e: Entry) {
        if self.entries.len() < MAX_ENTRIES {
            self.entries.push(e);
        } else {
            self.omitted += 1;
        }
    }

    fn fault(&mut self, f: &FaultEvent) {
        // Every fault goes to the models (their state is the process's
        // history); only this page's are shown.
        self.verdicts.fault(f, &mut self.answers);
        if !self.target.holds(f) {
            return;
        }
        let stamp = HistEntry::of(f);
        let entry = Entry::HintFault {
            ts_ns: f.ts_ns,
            comm: printable(&comm(&f.comm)).into_owned(),
            pages: f.pages(),
            src_nid: f.src_nid,
            dst_nid: f.dst_nid,
            latency_ms: stamp.map(|h| h.latency_ns as f64 / 1e6),
            kernel_latency_ms: f.has_kernel_latency().then_some(f.kernel_latency_ms),
            threshold_ms: f.has_kernel_latency().then_some(f.threshold_ms),
            fault_count_delta: stamp.filter(|h| h.own_mm).map(|h| h.delta),
            kernel: f.typed_outcome().name(),
            migrated: f.migrate_tried().then(|| f.migrated()),
            src_pfn: f.src_pfn,
            dst_pfn: f.dst_pfn,
            models: self.answers.clone(),
        };
        self.push(entry);
    }

    fn demotion(&mut self, d: &DemoteEvent) {
        if d.mapping == 0 || !self.identities.contains(&(d.mapping, d.index)) {
            return;
        }
        self.push(Entry::Demotion {
            ts_ns: d.ts_ns,
            reclaimer: d.reclaimer_name(),
            src_nid: d.src_nid,
            dst_nid: d.dst_nid,
            src_pfn: d.src_pfn,
            dst_pfn: d.dst_pfn,
            pages: d.nr_pages,
        });
    }

    /// The timeline as text, one line per entry.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "pid {} page {:#x}: {} events{}",
            self.pid,
            self.addr,
            self.entries.len(),
            if self.omitted > 0 {
                format!(" (and {} more not shown)", self.omitted)
            } else {
                String::new()
            }
        );
        let _ = writeln!(out, "models: {}", self.models.join(", "));
        for e in &self.entries {
            let _ = writeln!(out, "{}", self.line(e));
        }
        if self.entries.is_empty() {
            let _ = writeln!(
                out,
                "nothing in this trace touched that page of that process \
                 (check --pid and --addr against `numatrace dump`)"
            );
        }
        out
    }

    fn secs(&self, ts_ns: u64) -> f64 {
        ts_ns.saturating_sub(self.started_ns) as f64 / 1e9
    }

    fn line(&self, e: &Entry) -> String {
        match e {
            Entry::Scan {
                ts_ns,
                start,
                end,
                ptes_updated,
            } => format!(
                "{:>12.3}  scan pass over {start:#x}-{end:#x}: {ptes_updated} PTEs protected",
                self.secs(*ts_ns)
            ),
            Entry::HintFault {
                ts_ns,
                comm,
                pages,
                src_nid,
                dst_nid,
                latency_ms,
                kernel_latency_ms,
                threshold_ms,
                fault_count_delta,
                kernel,
                migrated,
                src_pfn,
                dst_pfn,
                models,
            } => {
                let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
                let verdicts: Vec<String> = self
                    .models
                    .iter()
                    .zip(models)
                    .filter_map(|(m, a)| a.map(|p| format!("{m} {}", if p { "yes" } else { "no" })))
                    .collect();
                format!(
                    "{:>12.3}  hint fault ({comm}, {pages} page(s), node {src_nid}{} -> {dst_nid}): \
                     latency {} ms (kernel {} ms, threshold {} ms), fault-count delta {}; \
                     kernel: {kernel}{}{}",
                    self.secs(*ts_ns),
                    pfn_text(*src_pfn),
                    opt(latency_ms.map(|v| format!("{v:.1}"))),
                    opt(kernel_latency_ms.map(|v| v.to_string())),
                    opt(threshold_ms.map(|v| v.to_string())),
                    opt(fault_count_delta.map(|v| v.to_string())),
                    match migrated {
                        Some(true) => format!(", migrated{}", pfn_text(*dst_pfn)),
                        Some(false) => ", migration failed".to_owned(),
                        None => String::new(),
                    },
                    if verdicts.is_empty() {
                        String::new()
                    } else {
                        format!("; models: {}", verdicts.join(", "))
                    }
                )
            }
            Entry::Demotion {
                ts_ns,
                reclaimer,
                src_nid,
                dst_nid,
                src_pfn,
                dst_pfn,
                pages,
            } => format!(
                "{:>12.3}  demoted by {reclaimer}: node {src_nid} -> {dst_nid} \
                 (pfn {src_pfn:#x} -> {dst_pfn:#x}, {pages} pages)",
                self.secs(*ts_ns)
            ),
        }
    }
}

impl Sink for Timeline {
    fn event(&mut self, ev: &Event) -> Result<()> {
        match ev {
            Event::Scan(s) => {
                self.verdicts.scan(s);
                if self.target.scans(s) {
                    self.push(Entry::Scan {
                        ts_ns: s.ts_ns,
                        start: s.start,
                        end: s.end,
                        ptes_updated: s.ptes_updated,
                    });
                }
            }
            Event::Fault(f) => self.fault(f),
            Event::Demote(d) => self.demotion(d),
            Event::Skip(_) => {}
        }
        Ok(())
    }
}

/// ` pfn 0x...`, or nothing when the PFN is not known.
fn pfn_text(pfn: u64) -> String {
    if pfn == 0 {
        String::new()
    } else {
        format!(" pfn {pfn:#x}")
    }
}
