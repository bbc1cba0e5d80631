//! Per-CPU u64 arrays summed over CPUs, each read whole with one
//! `BPF_MAP_LOOKUP_BATCH` rather than one lookup syscall per slot.
//!
//! A snapshot reads about a thousand slots (counters, two histograms by
//! outcome, sums, pages by reason) every second for as long as numatrace
//! runs; slot by slot that is a thousand syscalls a second, the largest
//! part of what an idle live run costs. A kernel or map that refuses the
//! batch command is read slot by slot, with the same result.
use std::{
    io,
    os::fd::{AsFd, AsRawFd, BorrowedFd},
};

use anyhow::{anyhow, Context, Result};
use aya::{
    maps::{Map, PerCpuArray},
    Ebpf,
};

/// `BPF_MAP_LOOKUP_BATCH` (include/uapi/linux/bpf.h, since 5.6).
const BPF_MAP_LOOKUP_BATCH: libc::c_long = 24;

/// The `batch` member of `union bpf_attr`; the kernel reads the attribute
/// up to the size given and treats the rest as zero.
#[repr(C)]
#[derive(Default)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

/// The per-CPU u64 array `name` of `ebpf`, each slot summed over CPUs.
pub fn summed(ebpf: &Ebpf, name: &str) -> Result<Vec<u64>> {
    let map = ebpf
        .map(name)
        .ok_or_else(|| anyhow!("map {name} missing from the BPF object"))?;
    let Map::PerCpuArray(data) = map else {
        return Err(anyhow!("map {name} is not a per-CPU array"));
    };
    let array = PerCpuArray::<_, u64>::try_from(map)?;
    let cpus =
        aya::util::nr_cpus().map_err(|(what, e)| anyhow!("reading {what} for map {name}: {e}"))?;
    match lookup_batch(data.fd().as_fd(), array.len(), cpus) {
        Ok(values) => Ok(sum_rows(&values, cpus)),
        Err(_) => (0..array.len())
            .map(|i| Ok(array.get(&i, 0)?.iter().sum()))
            .collect::<Result<_>>()
            .with_context(|| format!("reading map {name}")),
    }
}

/// Whether the per-CPU u64 array `name` of `ebpf` reads with one batch
/// lookup; the error says why not (its slots are then read one by one).
pub fn batch_lookup(ebpf: &Ebpf, name: &str) -> Result<()> {
    let map = ebpf
        .map(name)
        .ok_or_else(|| anyhow!("map {name} missing from the BPF object"))?;
    let Map::PerCpuArray(data) = map else {
        return Err(anyhow!("map {name} is not a per-CPU array"));
    };
    let len = PerCpuArray::<_, u64>::try_from(map)?.len();
    let cpus =
        aya::util::nr_cpus().map_err(|(what, e)| anyhow!("reading {what} for map {name}: {e}"))?;
    lookup_batch(data.fd().as_fd(), len, cpus)
        .map(drop)
        .with_context(|| format!("BPF_MAP_LOOKUP_BATCH on {name}"))
}

/// Every slot of a per-CPU u64 array with `len` slots: slot `i`'s value on
/// each of the `cpus` possible CPUs at `[i * cpus..(i + 1) * cpus]`.
fn lookup_batch(fd: BorrowedFd<'_>, len: u32, cpus: usize) -> io::Result<Vec<u64>> {
    let mut keys = vec![u32::MAX; len as usize];
    let mut values = vec![0u64; len as usize * cpus];
    let mut next = 0u32;
    let mut attr = BatchAttr {
        out_batch: &mut next as *mut u32 as u64,
        keys: keys.as_mut_ptr() as u64,
        values: values.as_mut_ptr() as u64,
        count: len,
        map_fd: fd.as_raw_fd() as u32,
        ..BatchAttr::default()
    };
    // SAFETY: `keys` holds `count` u32 keys and `values` `count` values of
    // `cpus` u64 each (a per-CPU u64 array's value: 8 bytes per possible
    // CPU), `next` one key; the kernel writes at most that much into them
    // and the found count into `attr`, all of which outlive the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_MAP_LOOKUP_BATCH,
            &mut attr as *mut BatchAttr,
            std::mem::size_of::<BatchAttr>(),
        )
    };
    // The end of the array is ENOENT when it ends the batch early.
    if rc < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::ENOENT) {
        return Err(io::Error::last_os_error());
    }
    if attr.count != len || keys.iter().enumerate().any(|(i, &k)| k as usize != i) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "batch lookup returned {} of {len} slots, or out of order",
                attr.count
            ),
        ));
    }
    Ok(values)
}

/// Each slot's values summed over CPUs.
fn sum_rows(values: &[u64], cpus: usize) -> Vec<u64> {
    values
        .chunks_exact(cpus.max(1))
        .map(|row| row.iter().fold(0u64, |a, &v| a.wrapping_add(v)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_summed_per_slot() {
        assert_eq!(sum_rows(&[1, 2, 3, 4, 5, 6], 3), vec![6, 15]);
        assert_eq!(sum_rows(&[7, 8], 1), vec![7, 8]);
        assert_eq!(sum_rows(&[], 4), Vec::<u64>::new());
    }

    #[test]
    fn the_batch_attribute_has_the_kernels_layout() {
        // union bpf_attr's `batch`: four u64, two u32, two u64.
        assert_eq!(std::mem::size_of::<BatchAttr>(), 56);
        assert_eq!(std::mem::offset_of!(BatchAttr, count), 32);
        assert_eq!(std::mem::offset_of!(BatchAttr, map_fd), 36);
        assert_eq!(std::mem::offset_of!(BatchAttr, elem_flags), 40);
    }
}
