//! The `two-touch` model.
use std::collections::BTreeMap;

use numa_ebpf_common::FaultEvent;
use rustc_hash::FxHashMap as HashMap;

use super::{decision, Decision, FaultView, Policy, Step};

/// Not one of the kernel's steps: no candidates, no threshold to count.
const SECOND_TOUCH: Decision = decision(true, "second_touch", Step::Other);
const FIRST_TOUCH: Decision = decision(false, "first_touch", Step::Other);
use crate::model::pagetable::{self, PageTable};

/// `two-touch` (pghot's hint-fault source): promote on the second hint
/// fault on the same page within `window_ms`.
#[derive(Debug, Clone)]
pub struct TwoTouch {
    pub window_ms: u64,
    /// Last fault time (ms) per (tgid, page): `[packed key, ms]`; with
    /// `wide`, bounded by `cap` entries.
    last: PageTable<2>,
    /// Keys that do not pack (see `pagetable`).
    wide: HashMap<(u32, u64), u64>,
    cap: usize,
}

impl TwoTouch {
    pub fn new(window_ms: u64, cap: usize) -> Self {
        TwoTouch {
            window_ms,
            // Half full at most: nearly every fault misses or removes, and
            // both walk a probe run to its end, which gets long in a
            // fuller table (twice the slots, still bounded by `cap`).
            last: PageTable::with_max_load(1, 2),
            wide: HashMap::default(),
            cap,
        }
    }

    /// Before a new page is remembered: bounded memory, forget touches
    /// older than the window, everything if that leaves the table more
    /// than [`REFILL`] full. True when it forgot anything (the table's
    /// slots moved). Each walk of the table is followed by at least a
    /// quarter of `cap` new pages before the next: O(1) amortised per page.
    fn make_room(&mut self, now_ms: u64) -> bool {
        if self.last.len() + self.wide.len() < self.cap {
            return false;
        }
        let window = self.window_ms;
        self.last.retain(|e| now_ms.saturating_sub(e[1]) <= window);
        self.wide.retain(|_, t| now_ms.saturating_sub(*t) <= window);
        if self.last.len() + self.wide.len() > refill(self.cap) {
            self.last.clear();
            self.wide.clear();
        }
        true
    }
}

/// How full a table left by forgetting old touches may be (three
/// quarters of `cap`); fuller, it is emptied.
fn refill(cap: usize) -> usize {
    cap - cap / 4 - 1
}

impl Policy for TwoTouch {
    fn name(&self) -> String {
        "two-touch".into()
    }

    fn params(&self) -> BTreeMap<String, String> {
        BTreeMap::from([("window_ms".into(), self.window_ms.to_string())])
    }

    fn prefetches(&self) -> bool {
        true
    }

    fn prefetch(&self, key: u64) {
        if key != 0 {
            self.last.prefetch(key);
        }
    }

    fn decide(&mut self, ev: &FaultEvent, view: &FaultView) -> Decision {
        let key = pagetable::pack(ev.tgid(), ev.addr);
        self.decide_keyed(ev, view, key.unwrap_or(0))
    }

    fn decide_keyed(&mut self, ev: &FaultEvent, _view: &FaultView, key: u64) -> Decision {
        debug_assert_eq!(key, pagetable::pack(ev.tgid(), ev.addr).unwrap_or(0));
        let now_ms = ev.ts_ns / 1_000_000;
        if key == 0 {
            let key = (ev.tgid(), ev.addr);
            if !self.wide.contains_key(&key) {
                self.make_room(now_ms);
            }
            return match self.wide.insert(key, now_ms) {
                Some(prev) if now_ms.saturating_sub(prev) <= self.window_ms => {
                    self.wide.remove(&key);
                    SECOND_TOUCH
                }
                _ => FIRST_TOUCH,
            };
        }
        let vacant = match self.last.lookup(key) {
            Ok(i) => {
                let prev = self.last.slot(i)[1];
                if now_ms.saturating_sub(prev) <= self.window_ms {
                    self.last.remove_at(i);
                    return SECOND_TOUCH;
                }
                self.last.value_mut(i)[0] = now_ms;
                return FIRST_TOUCH;
            }
            Err(vacant) => vacant,
        };
        if self.make_room(now_ms) {
            self.last.insert([key, now_ms]);
        } else {
            self.last.insert_at(vacant, [key, now_ms]);
        }
        FIRST_TOUCH
    }

    fn threshold(&self) -> Option<f64> {
        Some(self.window_ms as f64)
    }
}

#[cfg(test)]
mod tests {
    use numa_ebpf_common::Outcome;

    use super::*;
    use crate::decode::fixtures::fault;

    /// two-touch as it was before the packed table.
    struct RefTwoTouch {
        window_ms: u64,
        last: HashMap<(u32, u64), u64>,
        cap: usize,
    }

    impl RefTwoTouch {
        fn decide(&mut self, ev: &FaultEvent) -> Decision {
            let key = (ev.tgid(), ev.addr);
            let now_ms = ev.ts_ns / 1_000_000;
            if self.last.len() >= self.cap && !self.last.contains_key(&key) {
                let window = self.window_ms;
                self.last.retain(|_, t| now_ms.saturating_sub(*t) <= window);
                if self.last.len() > refill(self.cap) {
                    self.last.clear();
                }
            }
            match self.last.insert(key, now_ms) {
                Some(prev) if now_ms.saturating_sub(prev) <= self.window_ms => {
                    self.last.remove(&key);
                    SECOND_TOUCH
                }
                _ => FIRST_TOUCH,
            }
        }
    }

    /// Same verdicts as the plain map, through the cap's forgetting and
    /// clearing and with keys that do not pack.
    #[test]
    fn two_touch_matches_the_plain_map() {
        for (cap, window, seed) in [(1usize << 20, 2000u64, 1u64), (64, 500, 2), (7, 100_000, 3)] {
            let mut new = TwoTouch::new(window, cap);
            let mut old = RefTwoTouch {
                window_ms: window,
                last: HashMap::default(),
                cap,
            };
            let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ seed;
            let mut next = || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            };
            let view = FaultView::default();
            let mut ev = fault(1, 1, 10, Outcome::RejectLatency);
            let mut seconds = 0;
            for _ in 0..200_000 {
                ev.ts_ns = ev.ts_ns.wrapping_add(next() % 20_000_000);
                if next() % 1000 == 0 {
                    ev.ts_ns = ev.ts_ns.wrapping_sub(1 << 40);
                }
                let tgid = match next() % 40 {
                    0 => u64::from(u32::MAX),
                    1 => 1 << 22,
                    n => n % 3,
                };
                ev.pid_tgid = tgid << 32;
                ev.addr = match next() % 40 {
                    0 => 0x7f00_0000_0001 + next() % 3,
                    1 => u64::MAX - 4095,
                    _ => 0x7f00_0000_0000 + (next() % 300) * 4096,
                };
                let v = new.decide(&ev, &view);
                assert_eq!(v, old.decide(&ev));
                seconds += u64::from(v.promote);
                assert_eq!(new.last.len() + new.wide.len(), old.last.len());
            }
            assert!(seconds > 100, "{seconds} second touches");
        }
    }

    /// A table full of touches inside the window, one ageing out per new
    /// page, costs about what an empty one does: timed side by side.
    #[test]
    fn a_full_table_is_not_walked_for_each_new_page() {
        const CAP: u64 = 1 << 16;
        const N: u64 = 5_000;
        let view = FaultView::default();
        let time = |prefill: u64| {
            // One new page a millisecond, the window a millisecond shorter
            // than the cap takes: each new page finds one touch aged out.
            let mut m = TwoTouch::new(CAP - 1, CAP as usize);
            let mut ev = fault(1, 1, 10, Outcome::RejectLatency);
            let mut at = |m: &mut TwoTouch, i: u64| {
                ev.ts_ns = i * 1_000_000;
                ev.addr = 0x7f00_0000_0000 + i * 4096;
                m.decide(&ev, &view)
            };
            for i in 0..prefill {
                at(&mut m, i);
            }
            let start = std::time::Instant::now();
            for i in prefill..prefill + N {
                at(&mut m, i);
            }
            start.elapsed()
        };
        let empty = time(0);
        let full = time(CAP);
        assert!(
            full.as_secs_f64() < 20.0 * empty.as_secs_f64() + 0.05,
            "full {full:?} vs empty {empty:?}"
        );
    }
}
