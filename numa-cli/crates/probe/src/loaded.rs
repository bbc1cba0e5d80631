//! The BPF objects loaded in the kernel right now, found with the object-id
//! syscalls (`BPF_{PROG,MAP,LINK}_GET_NEXT_ID`, as `bpftool` lists them),
//! each marked when its name is one of numatrace's. After numatrace exits,
//! for whatever reason, none of its objects may remain: the kernel frees
//! them when their last file descriptor closes, and numatrace pins nothing.
use std::collections::BTreeSet;

use anyhow::{Context, Result};
pub use numa_core::doctor::{Link, Loaded, Object};

use crate::load::EBPF_OBJECT;

/// Kernel object names are cut to this many bytes (BPF_OBJ_NAME_LEN - 1).
const OBJ_NAME_LEN: usize = 15;

/// Program and map names of numatrace's BPF object, as the kernel keeps
/// them (cut to [`OBJ_NAME_LEN`] bytes).
fn own_names() -> Result<(BTreeSet<String>, BTreeSet<String>)> {
    let obj = aya_obj::Object::parse(EBPF_OBJECT).context("parsing numatrace's own BPF object")?;
    let cut = |n: &String| n.chars().take(OBJ_NAME_LEN).collect::<String>();
    Ok((
        obj.programs.keys().map(cut).collect(),
        obj.maps
            .keys()
            .filter(|n| !n.starts_with('.'))
            .map(cut)
            .collect(),
    ))
}

/// Every loaded program, map and link (needs CAP_SYS_ADMIN). Objects
/// that go away between being listed and being opened, or that another
/// process is still creating, are left out: they are not loaded now.
pub fn scan() -> Result<Loaded> {
    let (prog_names, map_names) = own_names()?;
    let mut loaded = Loaded::default();
    for p in aya::programs::loaded_programs() {
        let Some(p) = present(p).context("listing loaded BPF programs (needs root)")? else {
            continue;
        };
        let name = p.name_as_str().unwrap_or_default().to_owned();
        loaded.programs.push(Object {
            id: p.id(),
            numatrace: prog_names.contains(&name),
            name,
        });
    }
    for m in aya::maps::loaded_maps() {
        let Some(m) = present(m).context("listing loaded BPF maps (needs root)")? else {
            continue;
        };
        let name = m.name_as_str().unwrap_or_default().to_owned();
        loaded.maps.push(Object {
            id: m.id(),
            numatrace: map_names.contains(&name),
            name,
        });
    }
    let ours: BTreeSet<u32> = loaded
        .programs
        .iter()
        .filter(|p| p.numatrace)
        .map(|p| p.id)
        .collect();
    for l in aya::programs::loaded_links() {
        let Some(l) = present(l).context("listing BPF links (needs root)")? else {
            continue;
        };
        loaded.links.push(Link {
            id: l.id(),
            program_id: l.program_id(),
            numatrace: ours.contains(&l.program_id()),
        });
    }
    Ok(loaded)
}

/// An object listed by id, None when opening it by id found it gone
/// (`ENOENT`: freed since it was listed) or not yet settled (`EAGAIN`: a
/// link whose attach is still under way in another process).
fn present<T, E>(r: Result<T, E>) -> Result<Option<T>, E>
where
    E: std::error::Error + 'static,
{
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e) if io_errno(&e).is_some_and(|n| n == libc::ENOENT || n == libc::EAGAIN) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The OS error number at the root of `e`, if any.
fn io_errno(e: &(dyn std::error::Error + 'static)) -> Option<i32> {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return io.raw_os_error();
        }
        cur = err.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_names_hold_the_hint_fault_program_and_the_event_ring() {
        let (progs, maps) = own_names().expect("the embedded object parses");
        assert!(progs.contains("fentry_hint_fau"), "{progs:?}");
        assert!(maps.contains(numa_ebpf_common::maps::EVENTS), "{maps:?}");
        assert!(progs.iter().chain(&maps).all(|n| n.len() <= OBJ_NAME_LEN));
    }

    #[test]
    fn the_object_states_a_gpl_compatible_license() {
        let obj = aya_obj::Object::parse(EBPF_OBJECT).expect("the embedded object parses");
        assert_eq!(obj.license.to_str(), Ok("Dual MIT/GPL"));
    }

    #[test]
    fn the_text_counts_and_marks_numatraces_objects() {
        let obj = |id, name: &str, numatrace| Object {
            id,
            name: name.to_owned(),
            numatrace,
        };
        let loaded = Loaded {
            programs: vec![
                obj(7, "fentry_hint_fau", true),
                obj(9, "sd_fw_egress", false),
            ],
            maps: vec![obj(12, "EVENTS", true)],
            links: vec![Link {
                id: 3,
                program_id: 7,
                numatrace: true,
            }],
        };
        let text = loaded.to_string();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "BPF objects loaded: 2 programs, 1 maps, 1 links; numatrace's: 1 programs, 1 maps, 1 links"
        );
        assert_eq!(
            lines[1].split_whitespace().collect::<Vec<_>>(),
            ["prog", "7", "fentry_hint_fau", "numatrace"]
        );
        assert_eq!(
            lines[2].split_whitespace().collect::<Vec<_>>(),
            ["prog", "9", "sd_fw_egress"]
        );
        assert_eq!(
            lines[3].split_whitespace().collect::<Vec<_>>(),
            ["map", "12", "EVENTS", "numatrace"]
        );
        assert_eq!(
            lines[4].split_whitespace().collect::<Vec<_>>(),
            ["link", "3", "prog", "7", "numatrace"]
        );
        assert_eq!(lines.len(), 5);
    }

    fn by_id(errno: i32) -> Result<(), aya::programs::links::LinkError> {
        Err(aya::sys::SyscallError {
            call: "bpf_link_get_fd_by_id",
            io_error: std::io::Error::from_raw_os_error(errno),
        }
        .into())
    }

    /// An object that went away or is still being created is not listed;
    /// any other failure (no permission) is an error.
    #[test]
    fn objects_gone_or_unsettled_are_skipped_and_other_failures_are_errors() {
        assert!(matches!(present(by_id(libc::ENOENT)), Ok(None)));
        assert!(matches!(present(by_id(libc::EAGAIN)), Ok(None)));
        assert!(present(by_id(libc::EPERM)).is_err());
        assert!(matches!(present(Ok::<_, std::io::Error>(7)), Ok(Some(7))));
    }
}
