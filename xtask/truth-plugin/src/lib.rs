//! A QEMU TCG plugin (plugin API version 1, as Debian's QEMU 7.2 exports
//! it) that counts every load and store made by user-space instructions
//! per guest-physical 4 KiB page, in windows the guest cuts by storing to
//! a marker page (see `numa_core::truth`).
//!
//! Only instructions at user addresses (below 2^47) are instrumented:
//! the kernel's accesses (a migration's page copies, `copy_to_user`) are
//! not the workload's and never counted. An access that takes a fault
//! (a NUMA hint fault included) is counted once, when it completes: at the
//! page it completed on, after a promotion the DRAM page.
//!
//! Arguments: `out=PATH` (the raw file), `marker=ADDR` (the marker page's
//! guest virtual address, hex with `0x` or decimal).
mod counter;
#[cfg(not(test))]
mod glue;

/// The plugin API version this plugin is written against.
#[cfg(not(test))]
#[allow(non_upper_case_globals)]
#[no_mangle]
pub static qemu_plugin_version: std::ffi::c_int = 1;

/// QEMU's entry point: 0 installs the plugin, anything else refuses it.
#[cfg(not(test))]
#[no_mangle]
pub extern "C" fn qemu_plugin_install(
    id: u64,
    _info: *const std::ffi::c_void,
    argc: std::ffi::c_int,
    argv: *const *const std::ffi::c_char,
) -> std::ffi::c_int {
    match glue::install(id, argc, argv) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("numa-truth-plugin: {e}");
            1
        }
    }
}
