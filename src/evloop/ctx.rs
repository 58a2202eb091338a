//! The loop's context, the state every handler is given besides the process's own:
//! the listeners by token, the timers, the children, and whether the loop stops.
//!
//! It is the layer the rest of the loop stands on: `child` and `signals` are built on
//! `Ctx` and `Listener`, and `EventLoop` (in `mod.rs`) drives it. The timers' and the
//! children's tables are generic over the context they are kept in (`timers`,
//! `children`), so they name nothing of it.

use std::collections::HashMap;
use std::io;
use std::time::{Duration, Instant};

use mio::event::{Event, Source};
use mio::{Interest, Registry, Token};

use super::children::Children;
use super::timers::{self, TimerId, Timers};

/// What a listener wants after handling an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    Continue,
    /// Remove the listener; its `close` runs and it is dropped (closing its fd).
    Close,
}

/// Something with a mio source that the loop dispatches events to.
pub(crate) trait Listener<S> {
    fn handle_event(&mut self, state: &mut S, ctx: &mut Ctx<S>, event: &Event) -> Flow;

    /// Called once when the listener is removed (by `Flow::Close` or `Ctx::remove`).
    fn close(&mut self, _state: &mut S, _ctx: &mut Ctx<S>) {}
}

/// A listener for a source that the state owns (a link the state must also write to):
/// events are forwarded to `handler` with the key that names the source.
pub(crate) struct Forward<S, K> {
    key: K,
    handler: fn(&mut S, &mut Ctx<S>, K, &Event) -> Flow,
}

impl<S, K: Copy> Forward<S, K> {
    pub(crate) fn new(key: K, handler: fn(&mut S, &mut Ctx<S>, K, &Event) -> Flow) -> Self {
        Forward { key, handler }
    }
}

impl<S, K: Copy> Listener<S> for Forward<S, K> {
    fn handle_event(&mut self, state: &mut S, ctx: &mut Ctx<S>, event: &Event) -> Flow {
        (self.handler)(state, ctx, self.key, event)
    }
}

/// Everything a handler may change besides the state: listeners, timers, stopping.
pub(crate) struct Ctx<S> {
    pub(super) registry: Registry,
    pub(super) listeners: HashMap<Token, Box<dyn Listener<S>>>,
    /// Listeners removed by a handler while another was running; closed by the loop.
    pub(super) removed: Vec<Box<dyn Listener<S>>>,
    pub(super) next_token: usize,
    pub(super) timers: Timers<S, Ctx<S>>,
    pub(super) children: Children<S, Ctx<S>>,
    pub(super) stopping: bool,
}

impl<S: 'static> Ctx<S> {
    /// Register `source` and the listener that handles its events. The listener usually
    /// owns the source; moving it after registration is fine (registration is by fd).
    pub(crate) fn register<L: Listener<S> + 'static>(
        &mut self,
        source: &mut (impl Source + ?Sized),
        interest: Interest,
        listener: L,
    ) -> io::Result<Token> {
        let token = Token(self.next_token);
        self.next_token += 1;
        self.registry.register(source, token, interest)?;
        self.listeners.insert(token, Box::new(listener));
        Ok(token)
    }

    /// Register a listener that owns its source; `source` picks the source out of it.
    pub(crate) fn add<L: Listener<S> + 'static>(
        &mut self,
        mut listener: L,
        interest: Interest,
        source: impl FnOnce(&mut L) -> &mut dyn Source,
    ) -> io::Result<Token> {
        let token = Token(self.next_token);
        self.next_token += 1;
        self.registry
            .register(source(&mut listener), token, interest)?;
        self.listeners.insert(token, Box::new(listener));
        Ok(token)
    }

    /// Remove a listener; its `close` runs after the current handler returns.
    pub(crate) fn remove(&mut self, token: Token) {
        if let Some(listener) = self.listeners.remove(&token) {
            self.removed.push(listener);
        }
    }

    /// Run `f` once at `at`.
    pub(crate) fn at(
        &mut self,
        at: Instant,
        f: impl FnOnce(&mut S, &mut Ctx<S>) + 'static,
    ) -> TimerId {
        self.timers.once(at, Box::new(f))
    }

    /// Run `f` once after `delay`.
    pub(crate) fn after(
        &mut self,
        delay: Duration,
        f: impl FnOnce(&mut S, &mut Ctx<S>) + 'static,
    ) -> TimerId {
        self.at(Instant::now() + delay, f)
    }

    /// Run `f` every `period`; when the loop is late the next run is one period from now.
    pub(crate) fn every(
        &mut self,
        period: Duration,
        f: impl FnMut(&mut S, &mut Ctx<S>) + 'static,
    ) -> TimerId {
        self.timers
            .repeating(Instant::now() + period, period, Box::new(f))
    }

    pub(crate) fn cancel(&mut self, timer: TimerId) {
        self.timers.cancel(timer);
    }

    /// Leave `run` after the current iteration.
    pub(crate) fn stop(&mut self) {
        self.stopping = true;
    }

    #[cfg(test)]
    pub(crate) fn is_stopping(&self) -> bool {
        self.stopping
    }

    pub(super) fn close_removed(&mut self, state: &mut S) {
        while let Some(mut listener) = self.removed.pop() {
            listener.close(state, self);
        }
    }

    pub(crate) fn children(&mut self) -> &mut Children<S, Ctx<S>> {
        &mut self.children
    }
}

impl<S> timers::Host<S> for Ctx<S> {
    fn timers(&mut self) -> &mut Timers<S, Self> {
        &mut self.timers
    }
}
