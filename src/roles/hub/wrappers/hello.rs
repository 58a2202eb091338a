//! A wrapper's `hello` on its way to main and main's verdict back: forwarded as is (launch token or resume key),
//! or, for a wrapper that proves its machine with its Salt minion key, held while the hub
//! sends a fresh `challenge` and waits for the signed `proof`. The hub only carries the
//! challenge and the signature: main checks the signature against the key the master has
//! accepted for that minion, with the rest of the hello's verdict.

use std::time::Duration;

use super::conns::{send, send_reject, vetted};
use crate::evloop::Ctx;
use crate::roles::hub::state::wrappers::{Conn, Phase, Session};
use crate::roles::hub::state::{Hub, Waiting};
use tungstenite::Message;

use crate::ipc::CallError;
use crate::wire::compress::LinkEncoding;
use crate::wire::link::{ConnId, HubRequest, MinionProof, WrapperHello, WrapperVerdict};
use crate::wire::wrapper::{RejectCode, ServerMsg};

/// How long main may take to vet a hello.
const VET_DEADLINE: Duration = Duration::from_secs(10);

/// Hand a hello to main for its verdict.
pub(super) fn forward(hub: &mut Hub, id: ConnId, hello: WrapperHello) {
    if let Some(conn) = hub.wrappers.conns.get_mut(&id) {
        conn.phase = Phase::Vetting;
        conn.target = Some((hello.run, hello.machine.clone()));
    }
    hub.call_main(
        HubRequest::WrapperHello(hello),
        VET_DEADLINE,
        Waiting::Hello(id),
    );
}

/// A minion-key hello: answer with a fresh challenge (one per connection, so a proof
/// seen on one connection is worth nothing on another).
pub(super) fn challenge(hub: &mut Hub, ctx: &mut Ctx<Hub>, id: ConnId, hello: WrapperHello) {
    let nonce = crate::minion_key::new_challenge();
    if let Some(conn) = hub.wrappers.conns.get_mut(&id) {
        conn.phase = Phase::Challenged;
        conn.challenged = Some((nonce.clone(), hello));
    }
    send(hub, ctx, id, &ServerMsg::Challenge { nonce });
}

/// The wrapper's signature of its challenge: the hello goes to main with it.
pub(super) fn proven(hub: &mut Hub, id: ConnId, signature: String) {
    let Some((challenge, mut hello)) = hub
        .wrappers
        .conns
        .get_mut(&id)
        .and_then(|c| c.challenged.take())
    else {
        return;
    };
    // A signature longer than any RSA key Salt makes (8192 bits, as hex) is garbage.
    let signature = if signature.len() > 2048 {
        String::new()
    } else {
        signature
    };
    hello.proof = Some(MinionProof {
        challenge,
        signature,
    });
    forward(hub, id, hello);
}

/// Main's verdict on a hello.
pub(crate) fn verdict(hub: &mut Hub, ctx: &mut Ctx<Hub>, id: ConnId, verdict: WrapperVerdict) {
    match verdict {
        WrapperVerdict::Welcome {
            job,
            resume_key,
            acked_seq,
            wait_for_go,
            slot_in_ms,
        } => {
            let take_zstd = hub.wrappers.limits.compression;
            let compression = if let Some(conn) = hub.wrappers.conns.get_mut(&id) {
                conn.phase = Phase::Bound;
                conn.job = Some(job.name.clone());
                conn.compressed = take_zstd && conn.offers_zstd;
                let compression = conn.compressed.then_some(LinkEncoding::Zstd);
                vetted(&mut hub.wrappers, id);
                compression
            } else {
                // Gone while main decided: main must forget the session again.
                hub.cast_main(HubRequest::WrapperGone {
                    conn: id,
                    rejected: None,
                });
                return;
            };
            send(
                hub,
                ctx,
                id,
                &ServerMsg::Welcome {
                    job: Box::new(job),
                    resume_key: resume_key.0,
                    acked_seq,
                    wait_for_go,
                    slot_in_ms,
                    compression,
                },
            );
        }
        WrapperVerdict::Reject { code, message } => {
            if let Some(conn) = hub.wrappers.conns.get_mut(&id) {
                conn.phase = Phase::New;
            }
            hub.wrappers.maybe_waiting = true;
            send_reject(hub, ctx, id, code, &message)
        }
    }
}

pub(crate) fn hello_failed(hub: &mut Hub, id: ConnId, err: &CallError) {
    log::warn!("wrapper connection {id}: main did not vet its hello: {err}");
    hub.wrappers.maybe_waiting = true;
    if let Some(conn) = hub.wrappers.conns.get_mut(&id) {
        conn.phase = Phase::New;
    }
    // Transient: the wrapper retries.
    if let Some(Conn {
        session: Some(Session::Open(ws)),
        ..
    }) = hub.wrappers.conns.get_mut(&id)
    {
        let msg = ServerMsg::Reject {
            code: RejectCode::RetryLater,
            message: "the server is busy; retry".into(),
        };
        if let Ok(text) = serde_json::to_string(&msg) {
            let _ = ws.send(Message::text(text));
        }
        let _ = ws.close(None);
        let _ = ws.flush();
    }
    if let Some(conn) = hub.wrappers.conns.get_mut(&id) {
        conn.phase = Phase::Closing;
    }
}

/// The build a hello reports, when it has the shape of one: a SHA-256 in hex and an
/// absolute path of printable characters (at most 1 KiB). Anything else is dropped here,
/// so nothing a peer invents reaches main's records or logs.
pub(super) fn build_of(
    sha256: Option<String>,
    path: Option<String>,
) -> Option<crate::wire::link::WrapperBuild> {
    let sha256 = sha256?.to_ascii_lowercase();
    let path = path?;
    let hex = sha256.len() == 64 && sha256.bytes().all(|b| b.is_ascii_hexdigit());
    let printable = path.len() <= 1024
        && path.starts_with('/')
        && path.chars().all(|c| !c.is_control() && !is_bidi(c));
    (hex && printable).then_some(crate::wire::link::WrapperBuild { path, sha256 })
}

/// Bidirectional formatting characters, which could reorder what an operator reads.
fn is_bidi(c: char) -> bool {
    matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}')
}

#[cfg(test)]
mod tests {
    use super::build_of;

    #[test]
    fn a_build_is_taken_only_in_its_shape() {
        let hash = "AB".repeat(32);
        let b = build_of(
            Some(hash.clone()),
            Some("/usr/bin/saltpeter-wrapper".into()),
        );
        assert_eq!(b.map(|b| b.sha256), Some("ab".repeat(32)));
        assert!(build_of(Some("ab".into()), Some("/x".into())).is_none());
        assert!(build_of(Some(hash.clone()), Some("relative".into())).is_none());
        assert!(build_of(Some(hash.clone()), Some("/a\nforged line".into())).is_none());
        assert!(build_of(Some(hash.clone()), Some("/a\u{202e}b".into())).is_none());
        assert!(build_of(Some(hash.clone()), Some(format!("/{}", "a".repeat(2000)))).is_none());
        assert!(build_of(None, Some("/x".into())).is_none());
    }
}
