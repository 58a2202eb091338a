//! A run in flight as the views read it: lent by the caller (`shell/views.rs`) for one
//! call, so that the views never hold on to the runs another part keeps.

use std::collections::BTreeMap;

use crate::roles::main::run::target::Target;
use crate::wire::records::{Millis, RunId, Trigger};

/// A run in flight as the views read it (lent by the caller for one call).
pub(crate) struct RunSeen<'a> {
    pub id: RunId,
    pub job: &'a str,
    pub slot: Option<Millis>,
    pub trigger: Trigger,
    /// Pre-staged and waiting for its slot: not running yet.
    pub awaiting_go: bool,
    pub targets: &'a BTreeMap<String, Target>,
}
