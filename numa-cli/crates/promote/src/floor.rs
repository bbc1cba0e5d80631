//! The free-memory floor of a target node (`--min-free`): how many bytes
//! may still be moved onto it. Pure arithmetic plus one sysfs reader.
use std::path::Path;

/// `--min-free`: a share of the node's memory or an amount.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MinFree {
    Percent(f64),
    Bytes(u64),
}

impl MinFree {
    /// `5%`, `0.5%`, `200MiB`, `1G`.
    pub fn parse(s: &str) -> Option<MinFree> {
        let t = s.trim();
        match t.strip_suffix('%') {
            Some(p) => {
                let v: f64 = p.trim().parse().ok()?;
                (0.0..=100.0).contains(&v).then_some(MinFree::Percent(v))
            }
            None => super::bucket::parse_bytes(t).map(MinFree::Bytes),
        }
    }

    /// `--min-free`: [`MinFree::parse`] within 0-100% or up to
    /// [`MAX_MIN_FREE`] bytes.
    pub fn from_flag(s: &str) -> Result<MinFree, String> {
        let range = "use a share of the node from 0% to 100% (like 5%) or an amount up to 1PiB (like 200MiB)";
        match MinFree::parse(s) {
            Some(MinFree::Bytes(b)) if b > MAX_MIN_FREE => Err(format!("too large: {range}")),
            Some(m) => Ok(m),
            None => Err(format!("not a share or an amount: {range}")),
        }
    }

    /// The floor in KiB for a node of `total_kb`.
    pub fn floor_kb(self, total_kb: u64) -> u64 {
        match self {
            MinFree::Percent(p) => (total_kb as f64 * p / 100.0).ceil() as u64,
            MinFree::Bytes(b) => b.div_ceil(1024),
        }
    }
}

/// The largest `--min-free` amount (more than any node has).
pub const MAX_MIN_FREE: u64 = 1 << 50;

impl std::fmt::Display for MinFree {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MinFree::Percent(p) => write!(f, "{p}%"),
            MinFree::Bytes(b) if b % (1 << 20) == 0 => write!(f, "{} MiB", b >> 20),
            MinFree::Bytes(b) if b % 1024 == 0 => write!(f, "{} KiB", b >> 10),
            MinFree::Bytes(b) => write!(f, "{b} bytes"),
        }
    }
}

/// Per-CPU vmstat deltas let a node's MemFree lag the truth by up to the
/// stat threshold (at most 125 pages) per CPU (mm/vmstat.c
/// calculate_normal_threshold); the floor keeps that much extra distance.
pub const DRIFT_PAGES_PER_CPU: u64 = 125;

/// Bytes that may be moved onto a node with `free_kb` free so that it keeps
/// `floor_kb` plus the drift margin of `cpus` CPUs.
pub fn headroom_bytes(free_kb: u64, floor_kb: u64, cpus: u64) -> u64 {
    let margin_kb = cpus.max(1) * DRIFT_PAGES_PER_CPU * 4;
    free_kb.saturating_sub(floor_kb.saturating_add(margin_kb)) * 1024
}

/// `(MemFree, MemTotal)` in KiB from `/sys/devices/system/node/nodeN/meminfo`.
pub fn read_node_meminfo(node: u32) -> Option<(u64, u64)> {
    let text = std::fs::read_to_string(
        Path::new("/sys/devices/system/node").join(format!("node{node}/meminfo")),
    )
    .ok()?;
    parse_node_meminfo(&text)
}

/// Parses `Node 0 MemFree:  123 kB` lines.
pub fn parse_node_meminfo(text: &str) -> Option<(u64, u64)> {
    let field = |name: &str| {
        text.lines()
            .find(|l| l.split_whitespace().nth(2) == Some(name))
            .and_then(|l| l.split_whitespace().nth(3))
            .and_then(|v| v.parse().ok())
    };
    Some((field("MemFree:")?, field("MemTotal:")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn min_free_parses() {
        assert_eq!(MinFree::parse("5%"), Some(MinFree::Percent(5.0)));
        assert_eq!(MinFree::parse("200MiB"), Some(MinFree::Bytes(200 << 20)));
        assert_eq!(MinFree::parse("101%"), None);
        assert_eq!(MinFree::parse("NaN%"), None);
        assert_eq!(MinFree::parse("lots"), None);
        assert_eq!(MinFree::from_flag("1PiB"), Ok(MinFree::Bytes(1 << 50)));
        for bad in ["2PiB", "-1%", "inf%", "lots"] {
            let e = MinFree::from_flag(bad).expect_err(bad);
            assert!(e.contains("0% to 100%") && e.contains("1PiB"), "{bad}: {e}");
        }
        assert_eq!(MinFree::Percent(5.0).to_string(), "5%");
        assert_eq!(MinFree::Bytes(200 << 20).to_string(), "200 MiB");
        assert_eq!(MinFree::Bytes(1500).to_string(), "1500 bytes");
    }

    #[test]
    fn floor_and_headroom() {
        // 2 GiB node, 5% floor = 104858 KiB (rounded up).
        let floor = MinFree::Percent(5.0).floor_kb(2 << 20);
        assert_eq!(floor, 104_858);
        assert_eq!(MinFree::Bytes(1025).floor_kb(0), 2);
        // 300 MiB free, 2 CPUs: 300 MiB - floor - 1000 KiB margin.
        let h = headroom_bytes(300 << 10, floor, 2);
        assert_eq!(h, ((300 << 10) - floor - 1000) * 1024);
        // At or under the floor (with margin): nothing.
        assert_eq!(headroom_bytes(floor + 999, floor, 2), 0);
        assert_eq!(headroom_bytes(floor - 1, floor, 2), 0);
        assert_eq!(headroom_bytes(floor + 1001, floor, 2), 1024);
    }

    #[test]
    fn node_meminfo_parses() {
        let text = "Node 0 MemTotal:        2030000 kB\nNode 0 MemFree:          300000 kB\nNode 0 MemUsed:          1730000 kB\n";
        assert_eq!(parse_node_meminfo(text), Some((300_000, 2_030_000)));
        assert_eq!(parse_node_meminfo("garbage"), None);
    }
}
