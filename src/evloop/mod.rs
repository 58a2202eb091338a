//! The single-threaded event loop every daemon process runs.
//!
//! Outline:
//! 1. `EventLoop::run` waits in `mio::Poll` until the next timer is due or a source is
//!    ready, dispatches each event to the `Listener` registered for its token, then runs
//!    the due timers; it stops when a handler calls `Ctx::stop`.
//! 2. The loop owns the listeners and passes the process state `S` into every handler, so
//!    handlers change state directly and there is no web of shared cells. While a listener
//!    runs it is taken out of the table, so it may register or remove other listeners.
//! 3. Timers (`timers`), signals (`signals`) and child processes with drained pipes
//!    (`child`) are built on the same two primitives: listeners and the timer heap.
//!
//! Errors inside handlers are the handlers' business (logged or recorded); only start-up
//! returns errors with `?`. Spurious readiness is tolerated: every handler drains until
//! `WouldBlock`.

pub(crate) mod child;
pub(crate) mod children;
mod ctx;
pub(crate) mod fork_exec;
pub(crate) mod signals;
pub(crate) mod timers;

use std::collections::HashMap;
use std::io;
use std::time::{Duration, Instant};

use mio::Events;
use mio::Poll;

pub(crate) use ctx::{Ctx, Flow, Forward, Listener};

/// A `mio::Poll` with its listeners and timers.
pub(crate) struct EventLoop<S> {
    poll: Poll,
    events: Events,
    ctx: Ctx<S>,
}

impl<S: 'static> EventLoop<S> {
    #[cfg(test)]
    pub(crate) fn listener_count(&self) -> usize {
        self.ctx.listeners.len()
    }

    pub(crate) fn new() -> io::Result<EventLoop<S>> {
        let poll = Poll::new()?;
        let registry = poll.registry().try_clone()?;
        Ok(EventLoop {
            poll,
            events: Events::with_capacity(256),
            ctx: Ctx {
                registry,
                listeners: HashMap::new(),
                removed: Vec::new(),
                next_token: 1,
                timers: timers::Timers::default(),
                children: children::Children::default(),
                stopping: false,
            },
        })
    }

    pub(crate) fn ctx(&mut self) -> &mut Ctx<S> {
        &mut self.ctx
    }

    /// Run until a handler calls `Ctx::stop`.
    pub(crate) fn run(&mut self, state: &mut S) -> io::Result<()> {
        self.run_with(state, |_, _| {})
    }

    /// [`EventLoop::run`], calling `turn_end` after every turn (also the last): where a
    /// role writes out what its turn posted to its links.
    pub(crate) fn run_with(
        &mut self,
        state: &mut S,
        turn_end: fn(&mut S, &mut Ctx<S>),
    ) -> io::Result<()> {
        while !self.ctx.stopping {
            self.run_once(state, None)?;
            turn_end(state, &mut self.ctx);
        }
        Ok(())
    }

    /// One iteration: wait (at most `max_wait`, and never past the next timer), dispatch
    /// events, run due timers.
    pub(crate) fn run_once(&mut self, state: &mut S, max_wait: Option<Duration>) -> io::Result<()> {
        let now = Instant::now();
        let until_timer = self
            .ctx
            .timers
            .next_due()
            .map(|due| due.saturating_duration_since(now));
        let timeout = match (until_timer, max_wait) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        match self.poll.poll(&mut self.events, timeout) {
            Ok(()) => {}
            // A signal, or SIGSTOP/SIGCONT: the process may have been stopped for a long
            // time, and the timers now due (liveness among them) must see what arrived
            // meanwhile, so what is ready is read first.
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                match self.poll.poll(&mut self.events, Some(Duration::ZERO)) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => self.events.clear(),
                    Err(e) => return Err(e),
                }
            }
            Err(e) => return Err(e),
        }
        let ctx = &mut self.ctx;
        for event in self.events.iter() {
            let token = event.token();
            let Some(mut listener) = ctx.listeners.remove(&token) else {
                continue; // removed earlier in this batch: a stale event
            };
            match listener.handle_event(state, ctx, event) {
                Flow::Continue => {
                    ctx.listeners.insert(token, listener);
                }
                Flow::Close => ctx.removed.push(listener),
            }
            ctx.close_removed(state);
        }
        while let Some(fire) = ctx.timers.pop_due(Instant::now()) {
            fire.run(state, ctx);
            ctx.close_removed(state);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mio::Interest;
    use mio::event::Event;
    use mio::net::UnixStream;
    use std::io::{Read, Write};

    struct Echo {
        stream: UnixStream,
    }

    impl Listener<Vec<u8>> for Echo {
        fn handle_event(
            &mut self,
            state: &mut Vec<u8>,
            ctx: &mut Ctx<Vec<u8>>,
            _event: &Event,
        ) -> Flow {
            let mut buf = [0u8; 16];
            loop {
                match self.stream.read(&mut buf) {
                    Ok(0) => return Flow::Close,
                    Ok(n) => state.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Flow::Continue,
                    Err(_) => {
                        ctx.stop();
                        return Flow::Close;
                    }
                }
            }
        }

        fn close(&mut self, state: &mut Vec<u8>, ctx: &mut Ctx<Vec<u8>>) {
            state.extend_from_slice(b"<closed>");
            ctx.stop();
        }
    }

    #[test]
    fn listener_reads_until_close() {
        let mut ev: EventLoop<Vec<u8>> = EventLoop::new().unwrap();
        let (a, mut b) = UnixStream::pair().unwrap();
        ev.ctx()
            .add(Echo { stream: a }, Interest::READABLE, |e| &mut e.stream)
            .unwrap();
        b.write_all(b"hello").unwrap();
        drop(b);
        let mut state = Vec::new();
        ev.run(&mut state).unwrap();
        assert_eq!(state, b"hello<closed>");
        assert_eq!(ev.listener_count(), 0);
    }

    #[test]
    fn timers_fire_in_order_and_cancel() {
        let mut ev: EventLoop<Vec<u32>> = EventLoop::new().unwrap();
        let now = Instant::now();
        ev.ctx()
            .at(now + Duration::from_millis(30), |s: &mut Vec<u32>, _| {
                s.push(3)
            });
        ev.ctx()
            .at(now + Duration::from_millis(10), |s: &mut Vec<u32>, _| {
                s.push(1)
            });
        let cancelled = ev
            .ctx()
            .at(now + Duration::from_millis(20), |s: &mut Vec<u32>, _| {
                s.push(2)
            });
        ev.ctx().cancel(cancelled);
        ev.ctx()
            .at(now + Duration::from_millis(40), |_: &mut Vec<u32>, ctx| {
                ctx.stop()
            });
        let mut state = Vec::new();
        ev.run(&mut state).unwrap();
        assert_eq!(state, vec![1, 3]);
        assert!(now.elapsed() >= Duration::from_millis(40));
    }

    #[test]
    fn repeating_timer_and_stop() {
        let mut ev: EventLoop<u32> = EventLoop::new().unwrap();
        ev.ctx()
            .every(Duration::from_millis(5), |n: &mut u32, ctx| {
                *n += 1;
                if *n == 4 {
                    ctx.stop();
                }
            });
        let mut n = 0;
        ev.run(&mut n).unwrap();
        assert_eq!(n, 4);
    }
}
