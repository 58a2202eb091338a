//! Signals delivered through the loop (signal-hook's self-pipe, so no signal mask leaks
//! into child processes). Only the supervisor handles SIGTERM, SIGINT and SIGHUP.

use std::io;

use mio::event::Event;
use mio::{Interest, Token};
use signal_hook_mio::v1_0::Signals;

use super::ctx::{Ctx, Flow, Listener};

type OnSignal<S> = Box<dyn FnMut(&mut S, &mut Ctx<S>, i32)>;

struct SignalListener<S> {
    signals: Signals,
    on_signal: OnSignal<S>,
}

impl<S> Listener<S> for SignalListener<S> {
    fn handle_event(&mut self, state: &mut S, ctx: &mut Ctx<S>, _event: &Event) -> Flow {
        let pending: Vec<i32> = self.signals.pending().collect();
        for signal in pending {
            (self.on_signal)(state, ctx, signal);
        }
        Flow::Continue
    }
}

/// Call `on_signal` in the loop for each of `signals` received.
pub(crate) fn watch<S: 'static>(
    ctx: &mut Ctx<S>,
    signals: &[i32],
    on_signal: impl FnMut(&mut S, &mut Ctx<S>, i32) + 'static,
) -> io::Result<Token> {
    let listener = SignalListener {
        signals: Signals::new(signals)?,
        on_signal: Box::new(on_signal),
    };
    ctx.add(listener, Interest::READABLE, |l| &mut l.signals)
}
