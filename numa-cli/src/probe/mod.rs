//! Everything that touches the kernel's BPF interface: what the running
//! kernel offers (`discover`), which hook goes where (`plan`), and loading
//! and attaching the programs (`load`).
pub mod discover;
pub mod load;
pub mod params;
pub mod plan;
