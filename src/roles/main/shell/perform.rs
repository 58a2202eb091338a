//! The one place a part's commands (`messages::Cmd`) are done: db calls with their
//! replies turned into messages, answers to admin calls, events, messages for the loop
//! and for the hub.

use crate::roles::main::messages::{Cmd, Message, Out, Then};
use crate::roles::main::shell::{DbWait, Main};
use crate::wire::link::HubReply;

impl Main {
    /// Do what a part asked for, in order.
    pub(crate) fn perform(&mut self, out: Out) {
        for cmd in out.into_cmds() {
            match cmd {
                Cmd::Db { req, then, due } => {
                    let wait = match then {
                        Then::Write(what) => DbWait::write(what),
                        Then::Tell(to) => DbWait::then(move |core, _, result| {
                            core.post(to(result));
                        }),
                    };
                    self.db_call_due(req, wait, due);
                }
                Cmd::Answer(call, resp) => self.reply_hub(call, HubReply::Admin(resp)),
                Cmd::Event(e) => self.event(
                    e.kind,
                    e.job.as_deref(),
                    e.run,
                    e.machine.as_deref(),
                    e.message,
                ),
                Cmd::Post(msg) => self.post(msg),
                Cmd::Blocking { req, local, tell } => {
                    let id = if local {
                        self.local_blocking_call(req)
                    } else {
                        self.blocking_call(req)
                    };
                    // Answered at once when blocking could not be reached: the reply
                    // waits in `blocking_replies` and goes to `tell` now.
                    match self.links.blocking_replies.remove(&id) {
                        Some(result) => self.post(tell(result)),
                        None => {
                            self.links.blocking_tells.insert(id, tell);
                        }
                    }
                }
                Cmd::Hub(msg) => self.tell_hub(msg),
            }
        }
    }

    /// A message for the loop, drained after the event being handled (`dispatch.rs`).
    pub(crate) fn post(&mut self, msg: Message) {
        self.inbox.push_back(msg);
    }
}
