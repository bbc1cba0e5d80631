//! `numatrace explain`: one page's life in a trace, in time order: the
//! scan passes over it, its hint faults (latency since its scan, the
//! fault-count delta, the kernel's decision and every model's), its
//! migrations and its demotions.
//!
//! Two passes over the trace. The first finds the identities (the
//! `mapping` and `index` a slow-tier folio's fault records carry, which
//! migration keeps) of the folios that held the page; the second gathers
//! the timeline, demotions found by those identities, so a demotion
//! before the page's first recorded fault is found too. A truth file of
//! the test bed then adds the page's true accesses per window, at the
//! PFNs its events say it held.
use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;
use std::io::Read;

use anyhow::Result;
use numa_core::decode::{comm, Event};
use numa_core::model::policy::{build_all, KernelDefaults, ModelDefaults};
use numa_core::model::shadow::FaultVerdicts;
use numa_core::printable::printable;
use numa_core::sink::Sink;
use numa_core::trace::Header;
use numa_core::truth::TruthReader;
use numa_ebpf_common::{DemoteEvent, FaultEvent, HistEntry, ScanEvent};
use serde::Serialize;

/// Entries kept: the page's first this many events; the rest are counted.
pub const MAX_ENTRIES: usize = 10_000;

/// Identities of the page's folios kept: a page re-allocated this often
/// is past reading as one timeline anyway.
const MAX_IDENTITIES: usize = 1024;

const PAGE: u64 = 4096;

/// Base pages of the naturally aligned span a folio of `pages` pages
/// covers, in virtual and in physical memory alike.
fn folio_span(pages: u64) -> u64 {
    pages.max(1).next_power_of_two()
}

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
        let span = folio_span(f.pages()) * PAGE;
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
    /// The user-space loads and stores the truth file counts on the page
    /// in one window `[ts_ns, end_ns)`, at the PFN it held then.
    /// `partial`: the page held the frame for part of the window only (it
    /// moved in it), so the counts may include the frame's other user's.
    Accesses {
        ts_ns: u64,
        end_ns: u64,
        pfn: u64,
        loads: u32,
        stores: u32,
        partial: bool,
    },
}

impl Entry {
    fn ts_ns(&self) -> u64 {
        match self {
            Entry::Scan { ts_ns, .. }
            | Entry::HintFault { ts_ns, .. }
            | Entry::Demotion { ts_ns, .. }
            | Entry::Accesses { ts_ns, .. } => *ts_ns,
        }
    }

    /// Where this event says the page was (`seen`), and where it put it
    /// (`moved_to`), as 4 KiB page frames; a folio's PFN is its head's
    /// or any of its pages', so the page's own is found by its offset.
    fn whereabouts(&self, addr: u64) -> (Option<u64>, Option<u64>) {
        let page = |pfn: u64, pages: u64| {
            let n = folio_span(pages);
            (pfn != 0).then(|| (pfn & !(n - 1)) + ((addr / PAGE) & (n - 1)))
        };
        match *self {
            Entry::HintFault {
                pages,
                migrated,
                src_pfn,
                dst_pfn,
                ..
            } => (
                page(src_pfn, pages),
                page(dst_pfn, pages).filter(|_| migrated == Some(true)),
            ),
            Entry::Demotion {
                pages,
                src_pfn,
                dst_pfn,
                ..
            } => (
                page(src_pfn, u64::from(pages)),
                page(dst_pfn, u64::from(pages)),
            ),
            Entry::Scan { .. } | Entry::Accesses { .. } => (None, None),
        }
    }
}

/// The page's page frames over time, from its events in order: the span
/// of a PFN runs from the event that put the page there (or, for the first
/// PFN seen, from the trace's start: what the frame held before is not
/// known) to the event that moved it (or past the trace's end). A PFN
/// seen with no recorded move before it (a move numatrace does not see:
/// compaction, another program's move_pages) starts its span at that
/// event.
struct Spans {
    done: Vec<(u64, u64, u64)>,
    /// The PFN the page is at and since when.
    at: Option<(u64, u64)>,
    started_ns: u64,
}

impl Spans {
    fn new(started_ns: u64) -> Spans {
        Spans {
            done: Vec::new(),
            at: None,
            started_ns,
        }
    }

    fn seen(&mut self, pfn: u64, ts: u64) {
        match self.at {
            None => self.at = Some((pfn, self.started_ns.min(ts))),
            Some((p, _)) if p == pfn => {}
            Some(_) => self.moved(pfn, ts),
        }
    }

    fn moved(&mut self, pfn: u64, ts: u64) {
        if let Some((p, since)) = self.at.replace((pfn, ts)) {
            self.done.push((p, since, ts));
        }
    }

    /// Each PFN's spans `[from, until)`.
    fn by_pfn(mut self) -> HashMap<u64, Vec<(u64, u64)>> {
        if let Some((p, since)) = self.at.take() {
            self.done.push((p, since, u64::MAX));
        }
        let mut m: HashMap<u64, Vec<(u64, u64)>> = HashMap::new();
        for (p, from, until) in self.done {
            m.entry(p).or_default().push((from, until));
        }
        m
    }
}

/// What the truth file added to a timeline.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct TruthUsed {
    /// Windows in the file, and the widest uncertainty of a window's
    /// bounds.
    pub windows: usize,
    pub clock_err_ns: u64,
    /// Page frames the page was followed to.
    pub pfns: usize,
    /// Its accesses in the file (in entries shown or not).
    pub loads: u64,
    pub stores: u64,
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
    /// Set when a truth file's accesses were added.
    pub truth: Option<TruthUsed>,
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
            truth: None,
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

    /// Adds the page's true accesses from a truth file (its windows on the
    /// trace's clock), at the page frames its events put it in, and puts
    /// the entries back in time order.
    pub fn add_truth<R: Read>(&mut self, mut truth: TruthReader<R>) -> Result<()> {
        let mut spans = Spans::new(self.started_ns);
        for e in &self.entries {
            let (seen, moved_to) = e.whereabouts(self.addr);
            if let Some(p) = seen {
                spans.seen(p, e.ts_ns());
            }
            if let Some(p) = moved_to {
                spans.moved(p, e.ts_ns());
            }
        }
        let held = spans.by_pfn();
        let mut used = TruthUsed {
            windows: truth.windows.len(),
            clock_err_ns: truth
                .windows
                .iter()
                .map(|w| w.clock_err_ns)
                .max()
                .unwrap_or(0),
            pfns: held.len(),
            loads: 0,
            stores: 0,
        };
        while let Some(c) = truth.next_count()? {
            let Some(spans) = held.get(&u64::from(c.pfn)) else {
                continue;
            };
            // next_count checked the window index against the file's.
            let w = truth.windows[c.window as usize];
            let Some(&(from, until)) = spans
                .iter()
                .find(|&&(from, until)| w.start_ns < until && from < w.end_ns)
            else {
                continue;
            };
            used.loads += u64::from(c.loads);
            used.stores += u64::from(c.stores);
            self.push(Entry::Accesses {
                ts_ns: w.start_ns,
                end_ns: w.end_ns,
                pfn: u64::from(c.pfn),
                loads: c.loads,
                stores: c.stores,
                partial: w.start_ns < from || until < w.end_ns,
            });
        }
        self.entries.sort_by_key(Entry::ts_ns);
        self.truth = Some(used);
        Ok(())
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
        if let Some(t) = &self.truth {
            let _ = writeln!(
                out,
                "truth: {} loads and {} stores on the {} page frame(s) the page held, \
                 in {} windows (bounds within {:.3} ms); from the trace's start to its \
                 first event the page is taken to be where that event found it",
                t.loads,
                t.stores,
                t.pfns,
                t.windows,
                t.clock_err_ns as f64 / 1e6
            );
        }
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
            Entry::Accesses {
                ts_ns,
                end_ns,
                pfn,
                loads,
                stores,
                partial,
            } => format!(
                "{:>12.3}  true accesses at pfn {pfn:#x}: {loads} loads, {stores} stores \
                 (window to {:.3}{})",
                self.secs(*ts_ns),
                self.secs(*end_ns),
                if *partial {
                    "; the page moved in it: the frame's other user's count too"
                } else {
                    ""
                }
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
            // The timeline is one page's NUMA balancing; DAMON's regions are not.
            Event::Skip(_) | Event::Damon(_) => {}
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

#[cfg(test)]
mod tests {
    use super::*;
    use numa_core::truth::{PageCount, Window};

    fn fault(ts_ns: u64, pages: u64, src_pfn: u64, dst_pfn: u64) -> Entry {
        Entry::HintFault {
            ts_ns,
            comm: "w".into(),
            pages,
            src_nid: 1,
            dst_nid: 0,
            latency_ms: None,
            kernel_latency_ms: None,
            threshold_ms: None,
            fault_count_delta: None,
            kernel: "promote_hot",
            migrated: Some(true),
            src_pfn,
            dst_pfn,
            models: Vec::new(),
        }
    }

    fn timeline(addr: u64, entries: Vec<Entry>) -> Timeline {
        Timeline {
            pid: 1,
            addr,
            started_ns: 600,
            models: Vec::new(),
            entries,
            omitted: 0,
            truth: None,
            target: Target::new(1, addr),
            identities: BTreeSet::new(),
            verdicts: FaultVerdicts::new(Vec::new()),
            answers: Vec::new(),
        }
    }

    /// A truth file: windows `[start, end)`, then (window, pfn, loads).
    fn truth(windows: &[(u64, u64)], counts: &[(u32, u32, u32)]) -> Vec<u8> {
        let windows: Vec<Window> = windows
            .iter()
            .map(|&(start_ns, end_ns)| Window {
                start_ns,
                end_ns,
                clock_err_ns: 3,
            })
            .collect();
        let counts: Vec<PageCount> = counts
            .iter()
            .map(|&(window, pfn, loads)| PageCount {
                window,
                pfn,
                loads,
                stores: 1,
            })
            .collect();
        numa_core::truth::encode(&windows, &counts).expect("a truth file")
    }

    #[test]
    fn true_accesses_follow_the_page_across_its_moves_and_no_further() {
        // Promoted from 0x100 to 0x900 at 1000, demoted to 0x300 at 5000.
        let demotion = Entry::Demotion {
            ts_ns: 5000,
            reclaimer: "kswapd",
            src_nid: 0,
            dst_nid: 1,
            src_pfn: 0x900,
            dst_pfn: 0x300,
            pages: 1,
        };
        let mut t = timeline(0x7000, vec![fault(1000, 1, 0x100, 0x900), demotion]);
        let file = truth(
            &[(0, 500), (500, 1500), (1500, 6000), (6000, 9000)],
            &[
                (0, 0x100, 2), // before the trace: not known to be the page's
                (0, 0x900, 7), // not the page's yet
                (1, 0x100, 1), // the trace's start, and the promotion
                (1, 0x900, 3),
                (2, 0x555, 9), // another page
                (2, 0x900, 4),
                (3, 0x100, 6), // the old frame, reused by another page
                (3, 0x300, 5),
            ],
        );
        t.add_truth(TruthReader::new(&file[..]).expect("truth"))
            .expect("added");
        let seen: Vec<(u64, u64, u32)> = t
            .entries
            .iter()
            .filter_map(|e| match *e {
                Entry::Accesses {
                    ts_ns, pfn, loads, ..
                } => Some((ts_ns, pfn, loads)),
                _ => None,
            })
            .collect();
        assert_eq!(
            seen,
            [
                (500, 0x100, 1),
                (500, 0x900, 3),
                (1500, 0x900, 4),
                (6000, 0x300, 5)
            ]
        );
        // Only the last window lies wholly inside the page's time on its frame.
        let partial: Vec<bool> = t
            .entries
            .iter()
            .filter_map(|e| match *e {
                Entry::Accesses { partial, .. } => Some(partial),
                _ => None,
            })
            .collect();
        assert_eq!(partial, [true, true, true, false]);
        let times: Vec<u64> = t.entries.iter().map(Entry::ts_ns).collect();
        assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
        let used = t.truth.expect("truth used");
        assert_eq!(
            (used.loads, used.stores, used.pfns, used.windows),
            (13, 4, 3, 4)
        );
        let text = t.text();
        assert!(
            text.contains("true accesses at pfn 0x300: 5 loads, 1 stores"),
            "{text}"
        );
        assert!(
            text.contains("truth: 13 loads and 4 stores on the 3 page frame(s)"),
            "{text}"
        );
    }

    #[test]
    fn a_large_folios_pfn_names_the_page_by_its_offset() {
        // The fourth page of a 2 MiB folio whose head is at 0x400.
        let addr = 0x7f00_0020_0000 + 3 * PAGE;
        let e = fault(1, 512, 0x400 + 17, 0x800);
        assert_eq!(e.whereabouts(addr), (Some(0x403), Some(0x803)));
        let mut refused = fault(1, 1, 0x10, 0x20);
        if let Entry::HintFault { migrated, .. } = &mut refused {
            *migrated = Some(false);
        }
        assert_eq!(refused.whereabouts(addr), (Some(0x10), None));
        assert_eq!(fault(1, 1, 0, 0).whereabouts(addr), (None, None));
    }
}
