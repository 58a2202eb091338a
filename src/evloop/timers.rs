//! One-shot and repeating timers: a heap of `(Instant, seq)` with the callbacks beside it.
//!
//! Cancelling removes the callback; its heap entry is skipped when it surfaces. A repeating
//! timer that fires late is rescheduled one period from now, not from its missed instant,
//! so a stalled loop does not fire it in a burst.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::time::{Duration, Instant};

pub(crate) type TimerId = u64;

/// What keeps the timers and is handed to their callbacks (the loop's `Ctx`): the timers
/// are generic over it so that they name nothing of the loop.
pub(crate) trait Host<S>: Sized {
    fn timers(&mut self) -> &mut Timers<S, Self>;
}

type OnceFn<S, C> = Box<dyn FnOnce(&mut S, &mut C)>;
type EveryFn<S, C> = Box<dyn FnMut(&mut S, &mut C)>;

enum Callback<S, C> {
    Once(OnceFn<S, C>),
    Every(Duration, EveryFn<S, C>),
}

/// A timer that is due, taken out of the heap; `run` calls it (and re-arms a repeating one).
pub(crate) struct Fire<S, C> {
    id: TimerId,
    due: Instant,
    callback: Callback<S, C>,
}

impl<S, C: Host<S>> Fire<S, C> {
    pub(crate) fn run(self, state: &mut S, ctx: &mut C) {
        match self.callback {
            Callback::Once(f) => f(state, ctx),
            Callback::Every(period, mut f) => {
                ctx.timers().running = Some(self.id);
                ctx.timers().running_cancelled = false;
                f(state, ctx);
                ctx.timers().running = None;
                let now = Instant::now();
                let next = if self.due + period < now {
                    now + period
                } else {
                    self.due + period
                };
                ctx.timers().rearm(self.id, next, period, f);
            }
        }
    }
}

pub(crate) struct Timers<S, C> {
    heap: BinaryHeap<Reverse<(Instant, TimerId)>>,
    callbacks: HashMap<TimerId, Callback<S, C>>,
    next_id: TimerId,
    /// The repeating timer whose callback is running, and whether it cancelled itself.
    running: Option<TimerId>,
    running_cancelled: bool,
}

impl<S, C> Default for Timers<S, C> {
    fn default() -> Self {
        Timers {
            heap: BinaryHeap::new(),
            callbacks: HashMap::new(),
            next_id: 1,
            running: None,
            running_cancelled: false,
        }
    }
}

impl<S, C> Timers<S, C> {
    pub(crate) fn once(&mut self, at: Instant, f: OnceFn<S, C>) -> TimerId {
        let id = self.alloc();
        self.heap.push(Reverse((at, id)));
        self.callbacks.insert(id, Callback::Once(f));
        id
    }

    pub(crate) fn repeating(
        &mut self,
        first: Instant,
        period: Duration,
        f: EveryFn<S, C>,
    ) -> TimerId {
        let id = self.alloc();
        self.heap.push(Reverse((first, id)));
        self.callbacks.insert(id, Callback::Every(period, f));
        id
    }

    fn rearm(&mut self, id: TimerId, at: Instant, period: Duration, f: EveryFn<S, C>) {
        // A repeating timer cancelled from inside its own callback stays cancelled.
        if self.running_cancelled {
            self.running_cancelled = false;
            return;
        }
        self.heap.push(Reverse((at, id)));
        self.callbacks.insert(id, Callback::Every(period, f));
    }

    pub(crate) fn cancel(&mut self, id: TimerId) {
        if self.callbacks.remove(&id).is_none() && self.running == Some(id) {
            self.running_cancelled = true;
        }
    }

    fn alloc(&mut self) -> TimerId {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// When the earliest live timer is due.
    pub(crate) fn next_due(&mut self) -> Option<Instant> {
        while let Some(Reverse((at, id))) = self.heap.peek().copied() {
            if self.callbacks.contains_key(&id) {
                return Some(at);
            }
            self.heap.pop();
        }
        None
    }

    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<Fire<S, C>> {
        loop {
            let Reverse((due, id)) = *self.heap.peek()?;
            if due > now {
                return None;
            }
            self.heap.pop();
            if let Some(callback) = self.callbacks.remove(&id) {
                return Some(Fire { id, due, callback });
            }
        }
    }
}
