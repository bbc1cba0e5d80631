//! The counting, apart from QEMU: page counts of the open window in flat
//! arrays indexed by page frame, written out when the next tick comes.
use std::io::{self, Write};

use numa_core::truth::{PageCount, RAW_MAGIC, TICK};

/// Page frames counted: guests up to 64 GiB of physical address space.
/// Accesses beyond are counted in [`Counter::beyond`] only, so the
/// arrays never outgrow 128 MiB.
pub(crate) const MAX_PFN: u64 = 1 << 24;

pub(crate) struct Counter<W: Write> {
    out: W,
    /// The open window; none before the first tick (nothing is counted).
    window: Option<u32>,
    loads: Vec<u32>,
    stores: Vec<u32>,
    /// Frames with a count in the open window, in first-touch order.
    touched: Vec<u32>,
    pub(crate) beyond: u64,
    /// Accesses the plugin could not place (I/O memory, no translation).
    pub(crate) unplaced: u64,
}

impl<W: Write> Counter<W> {
    pub(crate) fn new(mut out: W) -> io::Result<Counter<W>> {
        out.write_all(RAW_MAGIC)?;
        Ok(Counter {
            out,
            window: None,
            loads: Vec::new(),
            stores: Vec::new(),
            touched: Vec::new(),
            beyond: 0,
            unplaced: 0,
        })
    }

    /// One access at page frame `pfn` (`None`: not in RAM).
    pub(crate) fn access(&mut self, pfn: Option<u64>, store: bool) {
        if self.window.is_none() {
            return;
        }
        let Some(pfn) = pfn else {
            self.unplaced += 1;
            return;
        };
        if pfn >= MAX_PFN {
            self.beyond += 1;
            return;
        }
        let i = pfn as usize;
        if i >= self.loads.len() {
            let len = (i + 1).next_power_of_two();
            self.loads.resize(len, 0);
            self.stores.resize(len, 0);
        }
        if self.loads[i] == 0 && self.stores[i] == 0 {
            self.touched.push(pfn as u32);
        }
        let c = if store {
            &mut self.stores[i]
        } else {
            &mut self.loads[i]
        };
        *c = c.saturating_add(1);
    }

    /// Closes the open window (its counts written by page) and opens the
    /// next.
    pub(crate) fn tick(&mut self) -> io::Result<()> {
        self.flush_window()?;
        let next = self.window.map_or(0, |w| w.saturating_add(1));
        self.window = Some(next);
        self.write(PageCount {
            window: next,
            pfn: TICK,
            loads: 0,
            stores: 0,
        })
    }

    /// Writes the open window's counts (a window no tick closed: the
    /// host drops it) and flushes.
    pub(crate) fn finish(&mut self) -> io::Result<()> {
        self.flush_window()?;
        self.out.flush()
    }

    fn flush_window(&mut self) -> io::Result<()> {
        let Some(window) = self.window else {
            return Ok(());
        };
        let mut touched = std::mem::take(&mut self.touched);
        touched.sort_unstable();
        for &pfn in &touched {
            let i = pfn as usize;
            self.write(PageCount {
                window,
                pfn,
                loads: self.loads[i],
                stores: self.stores[i],
            })?;
            self.loads[i] = 0;
            self.stores[i] = 0;
        }
        touched.clear();
        self.touched = touched;
        Ok(())
    }

    fn write(&mut self, r: PageCount) -> io::Result<()> {
        self.out.write_all(&r.to_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use numa_core::truth::{assemble, Tick, TruthReader};

    #[test]
    fn counts_land_in_the_window_of_their_ticks_and_read_back() {
        let mut c = Counter::new(Vec::new()).expect("header");
        c.access(Some(5), true); // before the first tick: not counted
        c.access(None, true);
        c.tick().expect("tick");
        c.access(Some(9), false);
        c.access(Some(9), true);
        c.access(Some(3), false);
        c.access(Some(MAX_PFN), false);
        c.access(None, false);
        c.tick().expect("tick");
        c.access(Some(9), false);
        c.tick().expect("tick");
        c.access(Some(4), false); // after the last tick: dropped by the host
        c.finish().expect("finish");
        assert_eq!((c.beyond, c.unplaced), (1, 1));
        let ticks: Vec<Tick> = (0..3)
            .map(|i| Tick {
                index: i,
                before_ns: u64::from(i) * 1000,
                after_ns: u64::from(i) * 1000 + 2,
            })
            .collect();
        let mut truth = Vec::new();
        let done = assemble(&c.out[..], &ticks, &mut truth).expect("assemble");
        assert_eq!(
            (done.windows, done.accesses, done.dropped_records),
            (2, 4, 1)
        );
        let mut r = TruthReader::new(&truth[..]).expect("read");
        let mut got = Vec::new();
        while let Some(p) = r.next_count().expect("record") {
            got.push((p.window, p.pfn, p.loads, p.stores));
        }
        assert_eq!(got, vec![(0, 3, 1, 0), (0, 9, 1, 1), (1, 9, 1, 0)]);
    }
}
