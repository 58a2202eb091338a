//! Notifications leave the daemon here: each attempt is one `saltpeter-daemon --deliver`
//! helper process (the order on its stdin, bincode), killed at [`DELIVER_DEADLINE`].
//!
//! Why a process: an HTTP POST or an SMTP session blocks on the network (DNS, a slow or
//! silent receiver); in a helper that costs nothing to the loop, and the deadline is a
//! SIGKILL, not a hope. The order travels on stdin, never on the command line, because it
//! may carry the export's password.

use std::io::Read;
use std::time::Duration;

use super::helpers::{HelperFailure, run_helper as spawn_helper};
use super::state::Blocking;
use crate::evloop::{Ctx, child};
use crate::ipc::CallId;
use crate::ipc::codec;
use crate::ipc::rpc::RemoteError;
use crate::wire::link::BlockingReply;
use crate::wire::notify::DeliverOrder;

/// One attempt at most this long (each network step has its own shorter timeout).
pub(crate) const DELIVER_DEADLINE: Duration = Duration::from_secs(30);

/// Main's `Deliver`: the attempt's result (a failed attempt is an answer, not an error).
pub(crate) fn deliver_call(
    state: &mut Blocking,
    ctx: &mut Ctx<Blocking>,
    id: CallId,
    order: DeliverOrder,
) {
    let input = match codec::encode(&order, child::CAPTURE_LIMIT) {
        Ok(bytes) => bytes,
        Err(e) => {
            state.reply(id, Err(RemoteError::Failed(e.to_string())));
            return;
        }
    };
    let args = [std::ffi::OsStr::new("--deliver")];
    spawn_helper(
        state,
        ctx,
        &args,
        Some(&input),
        DELIVER_DEADLINE,
        move |state, _ctx, out| {
            let answer = out.and_then(|bytes| {
                codec::decode::<Result<String, String>>(&bytes, child::CAPTURE_LIMIT).map_err(
                    |source| HelperFailure::Answer {
                        helper: "delivery",
                        source,
                    },
                )
            });
            // The attempt's cause arrives as its message (bincode across the pipe).
            let result = match answer {
                Ok(answer) => answer,
                Err(why) => Err(why.to_string()),
            };
            state.reply(id, Ok(BlockingReply::Delivered(result)));
        },
    );
}

/// The helper process (`saltpeter-daemon --deliver`): read the order, send, answer.
pub(crate) fn run_helper() -> i32 {
    let mut input = Vec::new();
    if let Err(e) = std::io::stdin()
        .take(child::CAPTURE_LIMIT as u64)
        .read_to_end(&mut input)
    {
        eprintln!("cannot read the order on stdin: {e}");
        return 1;
    }
    let order: DeliverOrder = match codec::decode(&input, child::CAPTURE_LIMIT) {
        Ok(order) => order,
        Err(e) => {
            eprintln!("cannot read the order on stdin: {e}");
            return 1;
        }
    };
    // Bincode across the pipe: the cause goes back as its message.
    let answer = crate::notify::send::deliver(&order).map_err(|e| e.to_string());
    match codec::encode(&answer, child::CAPTURE_LIMIT) {
        Ok(bytes) => {
            use std::io::Write;
            match std::io::stdout().write_all(&bytes) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("cannot write the answer: {e}");
                    1
                }
            }
        }
        Err(e) => {
            eprintln!("cannot encode the answer: {e}");
            1
        }
    }
}
