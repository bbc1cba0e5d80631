//! Pure aggregation of the event stream: no IO, no clock. Fed the same way
//! from live probes and from recorded traces.
pub mod log2;
pub mod pagetable;
pub mod policy;
pub mod scans;
pub mod shadow;
pub mod totals;
pub mod window;
