//! Step 3 of several masters on one database: the parts' answers, each to its composite
//! (this server's part from its own blocking, another server's from its `salt_calls`
//! row, or its deadline), and the merged answer once every part answered.

use std::time::{Duration, Instant};

use crate::ipc::rpc::{CallError, CallId, RemoteError};
use crate::roles::main::messages::{BlockingResult, DbResult, Event, Message, Out};
use crate::wire::db::DbReply;
use crate::wire::link::BlockingReply;

use super::rules::{self, Part};
use super::{Composite, Delegation, Kind, MAX_REACHED, PartState, RemotePart};

impl Delegation {
    /// db wrote the row of part `index` of composite `call` at `now` (or could not):
    /// its answer comes from that row within `wait` ([`Delegation::expire`]).
    pub(crate) fn sent(
        &mut self,
        me: &str,
        call: CallId,
        index: usize,
        wait: Duration,
        result: DbResult,
        now: Instant,
    ) -> Out {
        match result {
            Ok(DbReply::SaltCallSent(row)) => {
                self.remote_parts.insert(
                    row,
                    RemotePart {
                        call,
                        index,
                        deadline: now + wait,
                        wait,
                    },
                );
                Out::new()
            }
            Ok(other) => self.part_answered(
                me,
                call,
                index,
                Err(format!("db answered the call's row with {other:?}")),
            ),
            Err(e) => self.part_answered(
                me,
                call,
                index,
                Err(format!("could not write the call into the database: {e}")),
            ),
        }
    }

    /// This server's own blocking answered part `index` of composite `call`.
    pub(crate) fn local_part(
        &mut self,
        me: &str,
        call: CallId,
        index: usize,
        result: BlockingResult,
    ) -> Out {
        self.part_answered(me, call, index, result.map_err(|e| e.to_string()))
    }

    /// Blocking call `id` ended with `result` (a deadline, blocking lost): a composite
    /// under it is dropped, and its parts with it as they come.
    pub(crate) fn ended(&mut self, id: CallId, result: &BlockingResult) {
        if self.calls.remove(&id).is_some() {
            log::warn!("salt call {id} through several servers ended before its parts: {result:?}");
        }
    }

    /// Part `index` of composite `call` answered: once every part did, the merged
    /// answer for the caller (`Message::SaltCallMerged`).
    pub(super) fn part_answered(
        &mut self,
        me: &str,
        call: CallId,
        index: usize,
        answer: Result<BlockingReply, String>,
    ) -> Out {
        let mut out = Out::new();
        let Some(composite) = self.calls.get_mut(&call) else {
            return out;
        };
        let Some(part) = composite.parts.get_mut(index) else {
            return out;
        };
        if let Err(why) = &answer {
            log::warn!("salt call {call}: {}'s part failed: {why}", part.server);
        }
        part.answer = Some(answer);
        if composite.parts.iter().any(|p| p.answer.is_none()) {
            return out;
        }
        let Some(composite) = self.calls.remove(&call) else {
            return out;
        };
        let result = self.merge(me, composite);
        out.post(Message::SaltCallMerged { call, result });
        out
    }

    /// The parts' answers as one reply.
    fn merge(&mut self, me: &str, composite: Composite) -> BlockingResult {
        let failed = |why: String| CallError::Remote(RemoteError::Failed(why));
        let wrong =
            |server: &str, reply: &BlockingReply| format!("{server} answered with {reply:?}");
        match composite.kind {
            Kind::Resolve => {
                let parts = parts_of(composite.parts, |server, reply| match reply {
                    BlockingReply::Resolved(res) => Ok(res),
                    other => Err(wrong(server, &other)),
                });
                let (merged, reached) = rules::merge_resolutions(me, parts).map_err(failed)?;
                if composite.broadcast {
                    if self.reached.len() + reached.len() > MAX_REACHED {
                        self.reached.clear();
                    }
                    self.reached.extend(reached);
                }
                Ok(BlockingReply::Resolved(merged))
            }
            Kind::Launch(runs) => {
                let parts = parts_of(composite.parts, |server, reply| match reply {
                    BlockingReply::Launched(outcomes) => Ok(outcomes),
                    other => Err(wrong(server, &other)),
                });
                Ok(BlockingReply::Launched(rules::merge_launches(&runs, parts)))
            }
            Kind::Deploy => {
                let parts = parts_of(composite.parts, |server, reply| match reply {
                    BlockingReply::Deployed { outcomes, hash } => Ok((outcomes, hash)),
                    other => Err(wrong(server, &other)),
                });
                let (outcomes, hash) = rules::merge_deploys(parts).map_err(failed)?;
                Ok(BlockingReply::Deployed { outcomes, hash })
            }
        }
    }

    /// db's answers to this server's calls (step 2): each to its part.
    pub(crate) fn replies(&mut self, me: &str, rows: Vec<(i64, Vec<u8>)>) -> Out {
        let mut out = Out::new();
        for (row, bytes) in rows {
            let Some(part) = self.remote_parts.remove(&row) else {
                log::info!("salt call row {row} answered after its deadline; dropped");
                continue;
            };
            let answer = match bincode::deserialize::<Result<BlockingReply, String>>(&bytes) {
                Ok(answer) => answer,
                Err(e) => Err(format!(
                    "its answer could not be read ({e}): another build?"
                )),
            };
            out.extend(self.part_answered(me, part.call, part.index, answer));
        }
        out
    }

    /// Parts whose server did not answer by `now` fail (once a second, from the loop),
    /// each recorded as an event.
    pub(crate) fn expire(&mut self, me: &str, now: Instant) -> Out {
        let mut out = Out::new();
        let late: Vec<i64> = self
            .remote_parts
            .iter()
            .filter(|(_, p)| p.deadline <= now)
            .map(|(row, _)| *row)
            .collect();
        for row in late {
            let Some(part) = self.remote_parts.remove(&row) else {
                continue;
            };
            let server = self
                .calls
                .get(&part.call)
                .and_then(|c| c.parts.get(part.index))
                .map_or_else(|| "another server".to_string(), |p| p.server.clone());
            log::error!(
                "salt call row {row}: {server} did not answer within {} s; its minions are \
                 not reached through it this time",
                part.wait.as_secs()
            );
            let why = format!("did not answer within {} s", part.wait.as_secs());
            let (kind, runs) = match self.calls.get(&part.call).map(|c| &c.kind) {
                Some(Kind::Launch(runs)) => ("a launch", runs.clone()),
                Some(Kind::Deploy) => ("a wrapper deployment", Vec::new()),
                _ => ("a resolution", Vec::new()),
            };
            // In the audit trail too (`saltpeterctl events --kind salt_server_silent`): a
            // resolution that missed a server leaves no other trace in the run.
            let message = format!(
                "{server} {why} to {kind}; the minions only its master reaches were not \
                 reached through it"
            );
            let silent = |run, message| Event {
                kind: "salt_server_silent",
                job: None,
                run,
                machine: None,
                message,
            };
            match runs.as_slice() {
                [] => out.event(silent(None, message)),
                runs => {
                    for run in runs {
                        out.event(silent(Some(*run), message.clone()));
                    }
                }
            }
            out.extend(self.part_answered(me, part.call, part.index, Err(why)));
        }
        out
    }
}

fn parts_of<T>(
    parts: Vec<PartState>,
    take: impl Fn(&str, BlockingReply) -> Result<T, String>,
) -> Vec<Part<T>> {
    parts
        .into_iter()
        .map(|p| {
            let answer = p
                .answer
                .unwrap_or_else(|| Err("no answer".to_string()))
                .and_then(|reply| take(&p.server, reply));
            Part {
                server: p.server,
                minions: p.minions,
                answer,
            }
        })
        .collect()
}
