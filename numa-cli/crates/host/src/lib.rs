//! The running host as numatrace reads it: the kernel's NUMA state from
//! procfs/sysfs/debugfs, the monotonic clock, and the state file a running
//! promoter publishes for `top` and `export`; and the one way numatrace
//! replaces the files it publishes.
pub mod clock;
pub mod fs;
pub mod promoter_state;
pub mod system;
