//! The running host as numatrace reads it: the kernel's NUMA state from
//! procfs/sysfs/debugfs, the monotonic clock, and the state file a running
//! promoter publishes for `top` and `export`; and the one way numatrace
//! replaces the files it publishes.
// Dev-dependencies are for the integration tests and benches.
#![cfg_attr(test, allow(unused_crate_dependencies))]
pub mod cgroup;
pub mod clock;
pub mod damon;
pub mod fs;
pub mod promoter_state;
pub mod system;
