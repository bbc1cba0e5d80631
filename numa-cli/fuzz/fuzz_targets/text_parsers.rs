//! Any text as each /proc and /sys file numatrace parses.
#![no_main]
use libfuzzer_sys::fuzz_target;
use numa_core::{params, procfs, topology};

fuzz_target!(|text: &str| {
    let _ = procfs::parse_numa_maps(text);
    let _ = procfs::parse_maps(text);
    let _ = procfs::cgroup_level(text, std::path::Path::new("/sys/fs/cgroup/a/b"));
    let _ = topology::parse_list(text);
    let _ = topology::parse_release(text);
    let _ = topology::parse_vmstat(text);
    let _ = params::parse_tp_format(text);
    let _ = numa_promote::floor::parse_node_meminfo(text);
    let _ = numa_promote::bucket::parse_rate(text);
    let _ = numa_promote::bucket::parse_bytes(text);
});
