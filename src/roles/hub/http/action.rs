//! What routing decides for a request (answer at once, call main, upgrade to `/ws`), and
//! the bounds of what a request may ask: shared by `routes` and the query readers.

use std::time::Duration;

use super::parse::Response;
use crate::roles::hub::state::http::Expect;
use crate::wire::admin::AdminRequest;

/// Ordinary calls to main.
pub(super) const CALL_TIMEOUT: Duration = Duration::from_secs(30);
pub(super) const HEALTH_TIMEOUT: Duration = Duration::from_secs(5);
/// Default and largest page of `/api/v1/runs`.
pub(super) const DEFAULT_RUNS: u32 = 50;
pub(super) const MAX_RUNS: u32 = 1000;
/// Default and largest read of `/api/v1/runs/N/targets/M/output`.
pub(super) const DEFAULT_OUTPUT_BYTES: u64 = 1 << 20;
pub(super) const MAX_OUTPUT_BYTES: u64 = 8 << 20;

pub(crate) enum Action {
    Respond(Response),
    Call {
        req: AdminRequest,
        expect: Expect,
        timeout: Duration,
    },
    Upgrade,
}

pub(super) fn call(req: AdminRequest, expect: Expect) -> Action {
    Action::Call {
        req,
        expect,
        timeout: CALL_TIMEOUT,
    }
}

pub(super) fn error(status: u16, code: &str, message: &str) -> Action {
    Action::Respond(Response::error(status, code, message))
}

pub(super) fn bad_request(message: &str) -> Action {
    error(400, "bad_request", message)
}
