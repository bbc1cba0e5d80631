//! Per-process facts `top` reads from procfs when live: resident pages per
//! node (`/proc/PID/numa_maps`) and the VMAs (`/proc/PID/maps`). Readers
//! return `None` when the process is gone or unreadable.
use std::collections::BTreeMap;

use super::agg::Vma;

/// Sums the `N<node>=<pages>` fields of every mapping.
pub fn parse_numa_maps(text: &str) -> Vec<(u32, u64)> {
    let mut per_node: BTreeMap<u32, u64> = BTreeMap::new();
    for tok in text.split_whitespace() {
        let Some(rest) = tok.strip_prefix('N') else {
            continue;
        };
        let Some((node, pages)) = rest.split_once('=') else {
            continue;
        };
        if let (Ok(n), Ok(p)) = (node.parse::<u32>(), pages.parse::<u64>()) {
            *per_node.entry(n).or_default() += p;
        }
    }
    per_node.into_iter().collect()
}

pub fn numa_maps(pid: u32) -> Option<Vec<(u32, u64)>> {
    std::fs::read_to_string(format!("/proc/{pid}/numa_maps"))
        .ok()
        .map(|t| parse_numa_maps(&t))
}

/// `start-end perms offset dev inode [path]` lines.
pub fn parse_maps(text: &str) -> Vec<Vma> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let (range, perms) = (it.next()?, it.next()?);
            let (a, b) = range.split_once('-')?;
            let path = it.nth(3).map(str::to_owned).unwrap_or_default();
            Some(Vma {
                start: u64::from_str_radix(a, 16).ok()?,
                end: u64::from_str_radix(b, 16).ok()?,
                perms: perms.to_owned(),
                path,
            })
        })
        .collect()
}

pub fn maps(pid: u32) -> Option<Vec<Vma>> {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .ok()
        .map(|t| parse_maps(&t))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numa_maps_sums_pages_per_node() {
        let text = "7f00 default anon=10 dirty=10 N0=4 N1=6 kernelpagesize_kB=4\n\
                    7f10 bind:1 file=/x mapped=3 N1=3 kernelpagesize_kB=4\n\
                    7f20 default stack NX=1 N2=bad\n";
        assert_eq!(parse_numa_maps(text), vec![(0, 4), (1, 9)]);
    }

    #[test]
    fn maps_lines_parse() {
        let text = "55d0a000-55d0b000 r-xp 00000000 08:01 123 /usr/bin/x\n\
                    7f00000000-7f10000000 rw-p 00000000 00:00 0 \n\
                    garbage\n";
        let v = parse_maps(text);
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].path, "/usr/bin/x");
        assert_eq!((v[1].start, v[1].end), (0x7f00000000, 0x7f10000000));
        assert_eq!(v[1].perms, "rw-p");
        assert_eq!(v[1].path, "");
    }
}
