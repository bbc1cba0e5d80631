//! Pure aggregation of the event stream: no IO, no clock. Fed the same way
//! from live probes and from recorded traces.
pub mod cgroups;
pub mod demotions;
pub mod funnel;
pub mod lifecycle;
pub mod log2;
pub mod pagetable;
pub mod policy;
pub mod proctable;
pub mod scans;
pub mod scorecard;
pub mod shadow;
pub mod totals;
pub mod window;

/// Adds `n` to `key`'s count in `map`, which holds at most `max` keys:
/// a key past them adds to `other` instead (input never decides the
/// table's size).
pub(crate) fn add_bounded<K: Ord>(
    map: &mut std::collections::BTreeMap<K, u64>,
    key: K,
    n: u64,
    max: usize,
    other: &mut u64,
) {
    let room = map.len() < max;
    match map.get_mut(&key) {
        Some(v) => *v += n,
        None if room => {
            map.insert(key, n);
        }
        None => *other += n,
    }
}

// Here rather than in `sink`, so the trait's module does not import the
// models that implement it.
impl crate::sink::Sink for shadow::Shadow {
    fn header(&mut self, h: &crate::trace::Header) -> anyhow::Result<()> {
        shadow::Shadow::header(self, h);
        Ok(())
    }
    fn event(&mut self, ev: &crate::decode::Event) -> anyhow::Result<()> {
        shadow::Shadow::event(self, ev);
        Ok(())
    }
    fn snapshot(&mut self, s: &crate::decode::Snapshot) -> anyhow::Result<()> {
        shadow::Shadow::snapshot(self, s);
        Ok(())
    }
}

/// A process without an event for this long (trace time) is taken to be
/// gone, and per-process state is dropped for it. Events carry no process
/// exit, so silence stands in for it: a process that runs is scanned and
/// takes hint faults; one silent for ten minutes (ten times the kernel's
/// default `numa_balancing_scan_period_max_ms`) has exited or sleeps, and
/// if its pid shows up again it is counted as a new process, as a reused
/// pid must be. Totals never depend on it: only per-process rows do.
pub const GONE_AFTER_NS: u64 = 600 * 1_000_000_000;

/// A report's map keyed by names the code spells, as the report holds it
/// (its keys owned when the report is read back from its JSON).
fn named<V>(
    m: std::collections::BTreeMap<&'static str, V>,
) -> std::collections::BTreeMap<std::borrow::Cow<'static, str>, V> {
    m.into_iter()
        .map(|(k, v)| (std::borrow::Cow::Borrowed(k), v))
        .collect()
}
