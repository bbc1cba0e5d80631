//! Parsers of per-process procfs files: resident pages per node
//! (`/proc/PID/numa_maps`) and the VMAs (`/proc/PID/maps`). Pure functions
//! of the text, so they can be tested and fuzzed without a live process.
use std::collections::BTreeMap;

/// One line of `/proc/PID/maps`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Vma {
    pub start: u64,
    pub end: u64,
    pub perms: String,
    pub path: String,
}

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
            // Saturating: the text may be anything, not only the kernel's.
            let sum = per_node.entry(n).or_default();
            *sum = sum.saturating_add(p);
        }
    }
    per_node.into_iter().collect()
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

/// Depth of the cgroup directory `dir` (an absolute path without `..`)
/// below the root of the cgroup v2 hierarchy mounted at the longest
/// cgroup2 mount point of `mountinfo` (`/proc/self/mountinfo`) that
/// contains it; the root itself is 0. `None` when no cgroup2 mount
/// contains `dir`.
pub fn cgroup_level(mountinfo: &str, dir: &std::path::Path) -> Option<u32> {
    mountinfo
        .lines()
        .filter_map(|l| {
            let (fields, fs) = l.split_once(" - ")?;
            if fs.split_whitespace().next()? != "cgroup2" {
                return None;
            }
            let mount_point = fields.split_whitespace().nth(4)?;
            let below = dir.strip_prefix(unescape_octal(mount_point)).ok()?;
            Some((mount_point.len(), below.components().count()))
        })
        .max_by_key(|&(len, _)| len)
        .and_then(|(_, depth)| u32::try_from(depth).ok())
}

/// The mount point of the whole cgroup v2 hierarchy in `mountinfo`: the
/// first cgroup2 mount of its root (a container may mount a part of it,
/// whose root field is that cgroup's path).
pub fn cgroup2_mount(mountinfo: &str) -> Option<std::path::PathBuf> {
    mountinfo.lines().find_map(|l| {
        let (fields, fs) = l.split_once(" - ")?;
        (fs.split_whitespace().next()? == "cgroup2").then_some(())?;
        let mut f = fields.split_whitespace();
        (f.nth(3)? == "/").then_some(())?;
        f.next()
            .map(|m| std::path::PathBuf::from(unescape_octal(m)))
    })
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape_octal(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let oct = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], oct) {
            (b'\\', Some(d)) => {
                let v = d.iter().fold(0u32, |a, c| a * 8 + u32::from(c - b'0'));
                out.push(u8::try_from(v).unwrap_or(b'?'));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cgroup2_mount_is_the_one_of_its_root() {
        let mi = "30 24 0:22 /nt /run/c\\040x rw - cgroup2 cgroup2 rw\n\
                  24 1 0:22 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n\
                  31 1 0:5 / /proc rw - proc proc rw\n";
        assert_eq!(
            cgroup2_mount(mi),
            Some(std::path::PathBuf::from("/sys/fs/cgroup"))
        );
        assert_eq!(cgroup2_mount("31 1 0:5 / /proc rw - proc proc rw\n"), None);
    }

    #[test]
    fn numa_maps_sums_pages_per_node() {
        let text = "7f00 default anon=10 dirty=10 N0=4 N1=6 kernelpagesize_kB=4\n\
                    7f10 bind:1 file=/x mapped=3 N1=3 kernelpagesize_kB=4\n\
                    7f20 default stack NX=1 N2=bad\n";
        assert_eq!(parse_numa_maps(text), vec![(0, 4), (1, 9)]);
    }

    /// A fuzzed file: two counts whose sum overflows u64 (it panicked in
    /// debug builds, and would have wrapped to a small count in release).
    #[test]
    fn numa_maps_sums_saturate() {
        let text = format!("7f00 N0={} N0=5 N1=2\n", u64::MAX - 1);
        assert_eq!(parse_numa_maps(&text), vec![(0, u64::MAX), (1, 2)]);
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

    #[test]
    fn cgroup_level_counts_components_below_the_cgroup2_mount() {
        let mi = "22 1 0:21 / /sys rw - sysfs sysfs rw\n\
                  30 22 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n\
                  31 22 0:27 / /mnt/my\\040cg rw - cgroup2 none rw\n";
        let lvl = |p: &str| cgroup_level(mi, std::path::Path::new(p));
        assert_eq!(lvl("/sys/fs/cgroup"), Some(0));
        assert_eq!(lvl("/sys/fs/cgroup/system.slice"), Some(1));
        assert_eq!(lvl("/sys/fs/cgroup/a/b/c"), Some(3));
        assert_eq!(lvl("/mnt/my cg/x"), Some(1));
        assert_eq!(lvl("/sys/fs/cgroupx"), None);
        assert_eq!(lvl("/tmp"), None);
    }
}
