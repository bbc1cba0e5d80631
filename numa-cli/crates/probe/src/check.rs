//! One prerequisite's outcome, as `doctor` lists it and the preflight of
//! every attaching command decides on it (the types are the doctor
//! report's, in numa-core).
pub use numa_core::doctor::{Check, Status};

pub(crate) fn check(
    name: &'static str,
    status: Status,
    detail: impl Into<String>,
    remedy: impl Into<String>,
) -> Check {
    Check {
        name: name.into(),
        status,
        detail: detail.into(),
        remedy: remedy.into(),
    }
}
