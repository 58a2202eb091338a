//! A job's resource limits on the wrapper link: the types are the configuration's
//! (`crate::config::resources`), carried in `welcome.job.limits`.

pub(crate) use crate::config::resources::{Limits, show_bytes};

/// Capability a wrapper advertises in `hello.capabilities` when it applies `job.limits`.
pub(crate) const CAP_LIMITS: &str = "limits";
