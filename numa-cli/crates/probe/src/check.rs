//! One prerequisite's outcome, as `doctor` lists it and the preflight of
//! every attaching command decides on it: what is wrong and how to fix it.
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Ok,
    Warn,
    Fail,
}

#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub status: Status,
    pub detail: String,
    pub remedy: String,
}

pub(crate) fn check(
    name: &'static str,
    status: Status,
    detail: impl Into<String>,
    remedy: impl Into<String>,
) -> Check {
    Check {
        name,
        status,
        detail: detail.into(),
        remedy: remedy.into(),
    }
}
