//! Per-page state for the shadow engine's hot path: a compact
//! open-addressing table (linear probing, backward-shift deletion, no
//! tombstones) keyed by `(tgid, page address)` packed into one `u64`.
//!
//! A slot is `[u64; N]`: word 0 the packed key (0 = empty), the rest the
//! value. Looking a page up touches one or two neighbouring cache lines
//! instead of a control byte plus a bucket in another line, which is what
//! bounds replay throughput (the per-page state of a large trace does not
//! fit in the L2 cache, so every event is a cache miss).
//!
//! Keys that do not pack (address not page aligned or above 2^54, tgid
//! above the kernel's PID_MAX_LIMIT) never come from a real kernel but may
//! be in a trace file; callers keep those in an ordinary map beside the
//! table, so every key is exact.
use std::fmt;

/// tgid bits in a packed key: PID_MAX_LIMIT is 2^22.
const TGID_BITS: u32 = 22;
const PAGE_SHIFT: u32 = 12;
/// Fibonacci hashing: the top bits of `key * 2^64/phi`.
const PHI: u64 = 0x9E37_79B9_7F4A_7C15;
const MIN_CAPACITY: usize = 64;
/// Highest load factor (numerator, denominator) before the table doubles.
const MAX_LOAD: (usize, usize) = (7, 8);

/// `(tgid, addr)` as one nonzero `u64`, or `None` when it does not fit.
#[inline]
pub fn pack(tgid: u32, addr: u64) -> Option<u64> {
    if tgid >= 1 << TGID_BITS || addr & ((1 << PAGE_SHIFT) - 1) != 0 {
        return None;
    }
    let page = addr >> PAGE_SHIFT;
    // page <= 2^42 - 2, so the shifted key + 1 neither overflows nor is 0.
    if page >= (1 << (64 - TGID_BITS)) - 1 {
        return None;
    }
    Some(((page << TGID_BITS) | u64::from(tgid)) + 1)
}

/// Inverse of [`pack`].
pub fn unpack(key: u64) -> (u32, u64) {
    let k = key - 1;
    (
        (k & ((1 << TGID_BITS) - 1)) as u32,
        (k >> TGID_BITS) << PAGE_SHIFT,
    )
}

/// Asks for transparent huge pages under a large table: random probes
/// over many MiB otherwise miss the TLB as well as the cache. A hint only.
fn advise_huge<T>(slots: &[T]) {
    const PAGE: usize = 4096;
    let bytes = std::mem::size_of_val(slots);
    if bytes < 4 << 20 {
        return;
    }
    let start = slots.as_ptr() as usize;
    let first = (start + PAGE - 1) & !(PAGE - 1);
    let len = (start + bytes - first) & !(PAGE - 1);
    // SAFETY: [first, first + len) lies inside the allocation of `slots`;
    // MADV_HUGEPAGE changes only how the kernel backs it, not its contents.
    unsafe {
        libc::madvise(first as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
    }
}

/// Where [`PageTable::lookup`] found no key: the empty slot it ended on.
/// Valid only until the table next changes.
#[derive(Debug, Clone, Copy)]
#[must_use]
pub struct Vacant(Option<usize>);

impl Vacant {
    /// No slot known: [`PageTable::insert_at`] probes.
    pub const NONE: Vacant = Vacant(None);
}

#[derive(Clone)]
pub struct PageTable<const N: usize> {
    /// Power-of-two length (or empty before the first insert).
    slots: Vec<[u64; N]>,
    len: usize,
    /// 64 - log2(slots.len()).
    shift: u32,
    /// Highest load factor (numerator, denominator) before the table
    /// doubles.
    max_load: (usize, usize),
    /// Most entries the slots take at `max_load` (computed when they
    /// change, not at every insert).
    max_len: usize,
}

impl<const N: usize> Default for PageTable<N> {
    fn default() -> Self {
        PageTable {
            slots: Vec::new(),
            len: 0,
            shift: 64,
            max_load: MAX_LOAD,
            max_len: 0,
        }
    }
}

impl<const N: usize> fmt::Debug for PageTable<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PageTable")
            .field("len", &self.len)
            .field("capacity", &self.slots.len())
            .finish()
    }
}

impl<const N: usize> PageTable<N> {
    /// An empty table that doubles past `num / den` full (the default
    /// is 7/8): a lower load means shorter probe runs for more memory.
    pub fn with_max_load(num: usize, den: usize) -> Self {
        assert!(0 < num && num < den, "a load factor below 1");
        PageTable {
            max_load: (num, den),
            ..Self::default()
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Slots allocated (memory is `capacity * 8 * N` bytes).
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    #[inline]
    fn home(&self, key: u64) -> usize {
        (key.wrapping_mul(PHI) >> self.shift) as usize
    }

    /// Index of the slot holding `key` (a packed, nonzero key).
    #[inline]
    pub fn find(&self, key: u64) -> Option<usize> {
        self.lookup(key).ok()
    }

    /// The slot holding `key` (a packed, nonzero key), or else the empty
    /// slot where inserting it would put it (`None` before the first
    /// insert): [`insert_at`](Self::insert_at) takes it, so a miss and
    /// the insert that follows walk the probe run once.
    #[inline]
    pub fn lookup(&self, key: u64) -> Result<usize, Vacant> {
        debug_assert_ne!(key, 0);
        if self.slots.is_empty() {
            return Err(Vacant::NONE);
        }
        let mask = self.slots.len() - 1;
        let mut i = self.home(key);
        loop {
            let k = self.slots[i][0];
            if k == key {
                return Ok(i);
            }
            if k == 0 {
                return Err(Vacant(Some(i)));
            }
            i = (i + 1) & mask;
        }
    }

    /// Starts loading the cache line where the lookup of `key` begins,
    /// and the next one (linear probing runs often cross into it).
    #[inline]
    pub fn prefetch(&self, key: u64) {
        if self.slots.is_empty() {
            return;
        }
        let p = &self.slots[self.home(key)];
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a prefetch is a hint, it neither faults nor changes
        // memory; the first address is inside `slots`, the second is
        // computed with wrapping arithmetic and never dereferenced.
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let p = (p as *const [u64; N]).cast::<i8>();
            _mm_prefetch::<_MM_HINT_T0>(p);
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(64));
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = p;
    }

    /// The slot at `i` (from [`find`](Self::find)): word 0 is the key.
    #[inline]
    pub fn slot(&self, i: usize) -> &[u64; N] {
        &self.slots[i]
    }

    /// The value words of slot `i`; word 0 (the key) must not change.
    #[inline]
    pub fn value_mut(&mut self, i: usize) -> &mut [u64] {
        &mut self.slots[i][1..]
    }

    /// Inserts `entry` (`entry[0]` the key, which must not be present).
    pub fn insert(&mut self, entry: [u64; N]) {
        self.insert_at(Vacant::NONE, entry);
    }

    /// Inserts `entry` at the slot [`lookup`](Self::lookup) found for its
    /// key, with no change to the table since; probes again only when the
    /// table grows first.
    #[inline]
    pub fn insert_at(&mut self, vacant: Vacant, entry: [u64; N]) {
        debug_assert!(entry[0] != 0 && self.find(entry[0]).is_none());
        match vacant.0 {
            Some(i) if self.len < self.max_len => {
                debug_assert_eq!(self.slots[i][0], 0);
                self.slots[i] = entry;
                self.len += 1;
            }
            _ => self.insert_probing(entry),
        }
    }

    /// [`insert_at`](Self::insert_at) without a known slot or when the
    /// table grows first: out of line, the common insert stays small.
    #[inline(never)]
    fn insert_probing(&mut self, entry: [u64; N]) {
        if self.len >= self.max_len {
            self.grow();
        }
        self.place(entry);
        self.len += 1;
    }

    fn place(&mut self, entry: [u64; N]) {
        let mask = self.slots.len() - 1;
        let mut i = self.home(entry[0]);
        while self.slots[i][0] != 0 {
            i = (i + 1) & mask;
        }
        self.slots[i] = entry;
    }

    fn grow(&mut self) {
        let cap = (self.slots.len() * 2).max(MIN_CAPACITY);
        // All-zero slots: calloc, pages are touched only when used.
        let old = std::mem::replace(&mut self.slots, vec![[0u64; N]; cap]);
        advise_huge(&self.slots);
        self.shift = 64 - cap.trailing_zeros();
        // The largest `len` with `len * den <= cap * num`.
        self.max_len = cap * self.max_load.0 / self.max_load.1;
        for e in old {
            if e[0] != 0 {
                self.place(e);
            }
        }
    }

    /// Removes slot `i`, shifting later entries of its run back so that
    /// lookups need no tombstones.
    pub fn remove_at(&mut self, i: usize) {
        debug_assert_ne!(self.slots[i][0], 0);
        let mask = self.slots.len() - 1;
        let mut hole = i;
        let mut j = i;
        loop {
            j = (j + 1) & mask;
            let k = self.slots[j][0];
            if k == 0 {
                break;
            }
            // The entry at j may fill the hole if its home is not in
            // (hole, j] (cyclically).
            let home = self.home(k);
            if (j.wrapping_sub(home) & mask) >= (j.wrapping_sub(hole) & mask) {
                self.slots[hole] = self.slots[j];
                hole = j;
            }
        }
        self.slots[hole] = [0; N];
        self.len -= 1;
    }

    /// Removes `key`; returns its slot as it was.
    pub fn remove(&mut self, key: u64) -> Option<[u64; N]> {
        let i = self.find(key)?;
        let e = self.slots[i];
        self.remove_at(i);
        Some(e)
    }

    /// Keeps the entries for which `keep` is true (same capacity).
    pub fn retain(&mut self, mut keep: impl FnMut(&[u64; N]) -> bool) {
        let cap = self.slots.len();
        let old = std::mem::replace(&mut self.slots, vec![[0u64; N]; cap]);
        self.len = 0;
        for e in old {
            if e[0] != 0 && keep(&e) {
                self.place(e);
                self.len += 1;
            }
        }
    }

    /// Removes everything; keeps the allocation.
    pub fn clear(&mut self) {
        self.slots.fill([0; N]);
        self.len = 0;
    }

    pub fn iter(&self) -> impl Iterator<Item = &[u64; N]> {
        self.slots.iter().filter(|e| e[0] != 0)
    }
}

#[cfg(test)]
mod tests {
    use rustc_hash::FxHashMap;

    use super::*;
    use crate::rng::Rng;

    #[test]
    fn pack_is_injective_and_refuses_what_does_not_fit() {
        let cases = [
            (0u32, 0u64),
            (1, 0),
            (0, 4096),
            ((1 << 22) - 1, ((1u64 << 42) - 2) << 12),
            (42, 0x7fff_ffff_f000),
        ];
        let mut seen = std::collections::HashSet::new();
        for (t, a) in cases {
            let k = pack(t, a).expect("packs");
            assert_ne!(k, 0);
            assert_eq!(unpack(k), (t, a));
            assert!(seen.insert(k));
        }
        assert_eq!(pack(1 << 22, 0), None);
        assert_eq!(pack(u32::MAX, 4096), None);
        assert_eq!(pack(1, 4097), None);
        assert_eq!(pack(1, ((1u64 << 42) - 1) << 12), None);
        assert_eq!(pack(1, !0xfff), None);
    }

    /// Random inserts, lookups, updates and removals against a HashMap,
    /// on few distinct keys (long probe runs, wrap-around, many shifts).
    #[test]
    fn matches_a_hashmap_under_random_operations() {
        for keys in [8u64, 100, 5000] {
            let mut t = PageTable::<3>::default();
            let mut m: FxHashMap<u64, [u64; 2]> = FxHashMap::default();
            let mut r = Rng::new(0x1234_5678 + keys);
            for step in 0..200_000u64 {
                let k =
                    pack((r.next_u64() % 3) as u32, (r.next_u64() % keys) << 12).expect("packs");
                match r.next_u64() % 4 {
                    0 | 1 => match (t.find(k), m.get_mut(&k)) {
                        (Some(i), Some(v)) => {
                            t.value_mut(i)[0] = step;
                            v[0] = step;
                        }
                        (None, None) => {
                            t.insert([k, step, !step]);
                            m.insert(k, [step, !step]);
                        }
                        (a, b) => panic!("find {a:?} vs map {b:?}"),
                    },
                    2 => assert_eq!(t.remove(k).map(|e| [e[1], e[2]]), m.remove(&k)),
                    _ => assert_eq!(
                        t.find(k).map(|i| [t.slot(i)[1], t.slot(i)[2]]),
                        m.get(&k).copied()
                    ),
                }
                assert_eq!(t.len(), m.len());
                if step % 50_000 == 0 {
                    let lim = step / 2;
                    t.retain(|e| e[1] >= lim);
                    m.retain(|_, v| v[0] >= lim);
                    assert_eq!(t.len(), m.len());
                }
            }
            let mut a: Vec<[u64; 3]> = t.iter().copied().collect();
            let mut b: Vec<[u64; 3]> = m.iter().map(|(k, v)| [*k, v[0], v[1]]).collect();
            a.sort_unstable();
            b.sort_unstable();
            assert_eq!(a, b);
            assert!(t.capacity() * MAX_LOAD.0 >= t.len() * MAX_LOAD.1);
            t.clear();
            assert!(t.is_empty() && t.iter().next().is_none());
            assert_eq!(t.find(pack(0, 0).expect("packs")), None);
        }
    }

    /// Inserts at the slot a lookup found double the table exactly when
    /// the load would pass its maximum, as inserts that probe do.
    #[test]
    fn inserts_at_a_found_slot_grow_at_the_maximum_load() {
        for (num, den) in [(1usize, 2usize), (7, 8), (2, 3)] {
            let mut t = PageTable::<2>::with_max_load(num, den);
            let mut r = Rng::new(0xABCD + num as u64);
            for n in 1..=20_000usize {
                let key = loop {
                    let k = pack((r.next_u64() % 7) as u32, (r.next_u64() % (1 << 30)) << 12)
                        .expect("packs");
                    if t.find(k).is_none() {
                        break k;
                    }
                };
                match t.lookup(key) {
                    Ok(_) => panic!("key {key} not inserted yet"),
                    Err(vacant) => t.insert_at(vacant, [key, n as u64]),
                }
                let mut cap = MIN_CAPACITY;
                while n * den > cap * num {
                    cap *= 2;
                }
                assert_eq!((t.len(), t.capacity()), (n, cap), "{num}/{den}");
                assert_eq!(t.find(key).map(|i| t.slot(i)[1]), Some(n as u64));
            }
        }
    }

    #[test]
    fn grows_and_keeps_everything() {
        let mut t = PageTable::<2>::default();
        for i in 0..100_000u64 {
            t.insert([pack(7, i << 12).expect("packs"), i]);
        }
        assert_eq!(t.len(), 100_000);
        assert!(t.capacity().is_power_of_two());
        assert!(t.capacity() * MAX_LOAD.0 >= 100_000 * MAX_LOAD.1 && t.capacity() <= 4 * 100_000);
        for i in 0..100_000u64 {
            let k = pack(7, i << 12).expect("packs");
            assert_eq!(t.find(k).map(|s| t.slot(s)[1]), Some(i));
        }
        for i in (0..100_000u64).step_by(2) {
            assert!(t.remove(pack(7, i << 12).expect("packs")).is_some());
        }
        for i in 0..100_000u64 {
            let k = pack(7, i << 12).expect("packs");
            assert_eq!(t.find(k).is_some(), i % 2 == 1);
        }
    }
}
