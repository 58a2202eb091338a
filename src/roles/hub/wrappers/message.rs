//! A wrapper's messages, handled in order: `hello` and `proof` (`hello.rs`), then a
//! session's control messages and output frames, forwarded to main as typed requests
//! (and, for a watched job, to the `/ws` live view on the way).

use tungstenite::Message;

use super::conns::reject;
use super::hello;
use crate::evloop::Ctx;
use crate::roles::hub::state::Hub;
use crate::roles::hub::state::wrappers::Phase;
use crate::wire::Redacted;
use crate::wire::compress::ZSTD;
use crate::wire::limits::CAP_LIMITS;
use crate::wire::link::{ConnId, HubRequest, WrapperHello};
use crate::wire::records::RunId;
use crate::wire::wrapper::{
    CAP_OUTPUT_HELD, CAP_SUSPEND, OutputFrame, OutputFrameError, PROTOCOL_VERSION, RejectCode,
    WrapperMsg,
};

/// Longest `started.limits` kept (characters; it names a group path and a few values).
const LIMITS_TEXT_MAX: usize = 512;

pub(super) fn handle_message(hub: &mut Hub, ctx: &mut Ctx<Hub>, id: ConnId, msg: Message) {
    let Some(conn) = hub.wrappers.conns.get_mut(&id) else {
        return;
    };
    let (phase, peer) = (conn.phase, conn.peer);
    match msg {
        Message::Text(text) => {
            let parsed: Result<WrapperMsg, _> = serde_json::from_str(text.as_str());
            match (phase, parsed) {
                (_, Err(e)) => reject(
                    hub,
                    ctx,
                    id,
                    RejectCode::BadMessage,
                    &crate::roles::hub::logsafe::clip(&e.to_string(), 200),
                ),
                (Phase::New, Ok(WrapperMsg::Hello { v, .. })) if v != PROTOCOL_VERSION => reject(
                    hub,
                    ctx,
                    id,
                    RejectCode::Version,
                    &format!("protocol version {v} is not served; this server speaks 1"),
                ),
                (
                    Phase::New,
                    Ok(WrapperMsg::Hello {
                        run,
                        machine,
                        token,
                        resume_key,
                        minion_key,
                        wrapper_version,
                        pid,
                        resume_from,
                        wrapper_sha256,
                        wrapper_path,
                        capabilities,
                        suspended,
                        compression,
                        ..
                    }),
                ) => {
                    if let Some(conn) = hub.wrappers.conns.get_mut(&id) {
                        conn.offers_zstd = compression.iter().any(|c| c == ZSTD);
                        conn.holds_output = capabilities.iter().any(|c| c == CAP_OUTPUT_HELD);
                    }
                    let build = hello::build_of(wrapper_sha256, wrapper_path);
                    let hello = WrapperHello {
                        conn: id,
                        peer: peer.to_string(),
                        run,
                        machine,
                        token: token.map(Redacted),
                        resume_key: resume_key.map(Redacted),
                        proof: None,
                        resume_from,
                        wrapper_version,
                        pid,
                        build,
                        can_suspend: capabilities.iter().any(|c| c == CAP_SUSPEND),
                        can_limit: capabilities.iter().any(|c| c == CAP_LIMITS),
                        suspended,
                    };
                    if minion_key && hello.token.is_none() && hello.resume_key.is_none() {
                        hello::challenge(hub, ctx, id, hello);
                    } else {
                        hello::forward(hub, id, hello);
                    }
                }
                (Phase::Challenged, Ok(WrapperMsg::Proof { signature })) => {
                    hello::proven(hub, id, signature)
                }
                (Phase::Bound, Ok(WrapperMsg::Started { pid, at, limits })) => {
                    tap_alive(hub, id);
                    let limits = limits.map(|l| crate::logsafe::clip(&l, LIMITS_TEXT_MAX));
                    hub.cast_main(HubRequest::WrapperStarted {
                        conn: id,
                        pid,
                        at,
                        limits,
                    })
                }
                (Phase::Bound, Ok(WrapperMsg::Heartbeat { suspended, .. })) => {
                    tap_alive(hub, id);
                    hub.cast_main(HubRequest::WrapperHeartbeat {
                        conn: id,
                        suspended: Some(suspended),
                    })
                }
                (
                    Phase::Bound,
                    Ok(WrapperMsg::Exited {
                        end_seq,
                        code,
                        signal,
                        reason,
                        ..
                    }),
                ) => hub.cast_main(HubRequest::WrapperExited {
                    conn: id,
                    end_seq,
                    code,
                    signal,
                    reason,
                }),
                (Phase::Closing, Ok(_)) => {}
                (phase, Ok(other)) => reject(
                    hub,
                    ctx,
                    id,
                    RejectCode::BadMessage,
                    &format!("{} is not expected now ({phase:?})", kind_of(&other)),
                ),
            }
        }
        Message::Binary(bytes) => match (phase, decode_output(hub, id, &bytes)) {
            (Phase::Bound, Ok(frame)) => {
                tap_output(hub, ctx, id, frame.seq, &frame.data);
                let cost = crate::wire::link::output_cost(frame.data.len());
                hub.wrappers.flow.forwarded(id, cost);
                hub.cast_main(HubRequest::WrapperOutput {
                    conn: id,
                    seq: frame.seq,
                    stream: frame.stream,
                    data: frame.data,
                })
            }
            (Phase::Bound, Err(e)) => refuse_output(hub, ctx, id, &e),
            (Phase::Closing, _) => {}
            _ => reject(
                hub,
                ctx,
                id,
                RejectCode::BadMessage,
                "output before a welcome",
            ),
        },
        // tungstenite answers pings itself; close frames end the read loop.
        Message::Ping(_) | Message::Pong(_) | Message::Close(_) | Message::Frame(_) => {}
    }
}

/// An output frame as the command wrote it: compressed ones (when this link negotiated
/// them) are decompressed here, to exactly the length they declare, which the read budget
/// already counted (`read.rs`), and never past the message limit (no decompression bomb).
fn decode_output(hub: &Hub, id: ConnId, bytes: &[u8]) -> Result<OutputFrame, OutputFrameError> {
    let compressed = hub.wrappers.conns.get(&id).is_some_and(|c| c.compressed);
    OutputFrame::decode_link(bytes, compressed, hub.wrappers.limits.max_message)
}

/// A session's output frame that cannot be taken (malformed; compressed and holding other
/// than it declares, or declaring more than a message may hold): its link is closed with
/// a `reject` naming why, logged (escaped) with the run and machine (`reject`). Main hears
/// the wrapper is gone; unless it comes back with frames that hold what they say, its
/// target ends `lost`.
fn refuse_output(hub: &mut Hub, ctx: &mut Ctx<Hub>, id: ConnId, err: &OutputFrameError) {
    let why = format!("output frame refused: {err}");
    reject(hub, ctx, id, RejectCode::BadMessage, &why);
}

/// The job, run and machine of a bound connection, when a `/ws` client watches the job
/// (nothing is copied for a job nobody watches).
fn bound_target(hub: &Hub, id: ConnId) -> Option<(String, RunId, String)> {
    let conn = hub.wrappers.conns.get(&id)?;
    let ((run, machine), job) = (conn.target.as_ref()?, conn.job.as_ref()?);
    if !crate::roles::hub::http::views::is_watched(hub, job) {
        return None;
    }
    Some((job.clone(), *run, machine.clone()))
}

/// A watched job's wrapper spoke: its details show the time.
fn tap_alive(hub: &mut Hub, id: ConnId) {
    if let Some((job, run, machine)) = bound_target(hub, id) {
        crate::roles::hub::http::views::wrapper_alive(hub, &job, run, &machine);
    }
}

/// An output frame of a watched job goes to its `/ws` subscribers too.
fn tap_output(hub: &mut Hub, ctx: &mut Ctx<Hub>, id: ConnId, seq: u64, data: &[u8]) {
    if let Some((job, run, machine)) = bound_target(hub, id) {
        crate::roles::hub::http::views::wrapper_alive(hub, &job, run, &machine);
        crate::roles::hub::http::feed::wrapper_output(hub, ctx, &job, run, &machine, seq, data);
    }
}

fn kind_of(msg: &WrapperMsg) -> &'static str {
    match msg {
        WrapperMsg::Hello { .. } => "hello",
        WrapperMsg::Proof { .. } => "proof",
        WrapperMsg::Started { .. } => "started",
        WrapperMsg::Heartbeat { .. } => "heartbeat",
        WrapperMsg::Exited { .. } => "exited",
    }
}
