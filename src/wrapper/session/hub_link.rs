//! The session's link to the hub: dialing (name resolution only while no command needs
//! its pipes read), the `hello` (a minion-key proof on every connection, else the token or
//! the session's resume key), and what a lost link does (patience, the next server when
//! several are given, reconnect backoff: `rotation`).

use std::net::ToSocketAddrs;
use std::time::Instant;

use super::{Phase, Session};
use crate::wire::limits::CAP_LIMITS;
use crate::wire::wrapper::{CAP_OUTPUT_HELD, CAP_SUSPEND, PROTOCOL_VERSION, WrapperMsg};
use crate::wrapper::link::LinkEvent;

impl Session {
    pub(super) fn handle_link_events(&mut self, now: Instant) {
        while !self.link_events.is_empty() {
            let events = std::mem::take(&mut self.link_events);
            for ev in events {
                match ev {
                    LinkEvent::Open => self.send_hello(now),
                    LinkEvent::Message(msg) => self.on_message(now, msg),
                    LinkEvent::Closed(reason) => self.link_down(now, &reason),
                }
            }
        }
    }

    fn send_hello(&mut self, now: Instant) {
        log::info!("connected to {}", self.rotation.current().url);
        // A minion-key wrapper proves itself anew on every connection (a signature of a
        // fresh challenge); a local one with its resume key once welcomed, else its token.
        let by_key = self.minion_key.is_some();
        let resuming = self.resume_key.is_some() || (by_key && self.job.is_some());
        let hello = WrapperMsg::Hello {
            v: PROTOCOL_VERSION,
            run: self.settings.run,
            machine: self.settings.machine.clone(),
            token: if resuming || by_key {
                None
            } else {
                self.token.clone()
            },
            resume_key: if by_key {
                None
            } else {
                self.resume_key.clone()
            },
            minion_key: by_key,
            wrapper_version: env!("CARGO_PKG_VERSION").to_string(),
            pid: std::process::id(),
            resume_from: resuming.then(|| self.out.acked()),
            wrapper_sha256: self.opts.build.sha256.clone(),
            wrapper_path: self.opts.build.path.clone(),
            capabilities: vec![
                CAP_SUSPEND.to_string(),
                CAP_LIMITS.to_string(),
                CAP_OUTPUT_HELD.to_string(),
            ],
            suspended: self.is_suspended(),
            compression: vec![crate::wire::compress::ZSTD.to_string()],
        };
        self.link.send_msg(&hello, &mut self.link_events);
        self.link.flush(&mut self.link_events);
        self.hello_deadline = Some(now + self.opts.hello_timeout);
    }

    /// The link failed (refused, could not connect, timed out, closed): one failure,
    /// which moves to the next server once (`rotation`) and schedules the reconnect.
    pub(super) fn link_down(&mut self, now: Instant, reason: &str) {
        if self.link.is_down() && self.reconnect_at.is_some() {
            // The failure already counted, reported again: a `retry_later` is followed
            // by the hub closing the link, often read in the same turn. Counting it
            // twice moved two servers, so with two the wrapper went back to the standby
            // that had just refused it, never reaching the leader.
            log::debug!("{reason} (already counted; reconnecting)");
            return;
        }
        let (mem, spooled) = self.out.buffered_bytes();
        log::warn!("{reason} ({mem} bytes buffered in memory, {spooled} spooled)");
        if self.welcomed {
            self.patience.lost(self.link.last_rx, reason);
        } else {
            self.patience.trouble(reason);
        }
        self.link.close();
        self.welcomed = false;
        self.hello_deadline = None;
        self.output_hold = None;
        self.ctrl.clear();
        // `exited` goes again on the next link, once welcomed there.
        self.exited_sent_at = None;
        if self.abandon.is_none() && self.outcome.is_none() {
            let delay = self.rotation.failed(rand::random::<f64>());
            if self.rotation.several() {
                // Several servers: the next one may be the leader now.
                self.addrs.clear();
                self.next_addr = 0;
                log::info!("next server: {} in {delay:?}", self.rotation.current().url);
            } else {
                log::info!("reconnecting in {delay:?}");
            }
            self.reconnect_at = Some(now + delay);
        }
    }

    pub(super) fn dial(&mut self, now: Instant) {
        self.reconnect_at = None;
        if self.abandon.is_some() {
            return;
        }
        let running = matches!(&self.phase, Phase::Running(_));
        // Name resolution blocks; do it again only while no command needs its pipes read.
        if self.addrs.is_empty() || (self.next_addr >= self.addrs.len() && !running) {
            let hub = self.rotation.current();
            match (hub.host.as_str(), hub.port).to_socket_addrs() {
                Ok(addrs) => self.addrs = addrs.collect(),
                Err(e) => log::warn!("could not resolve hub host {}: {e}", hub.host),
            }
            self.next_addr = 0;
        }
        if self.addrs.is_empty() {
            return self.link_down(now, "no address for the hub");
        }
        let addr = self.addrs[self.next_addr % self.addrs.len()];
        self.next_addr += 1;
        if let Err(reason) = self.link.connect(self.poll.registry(), addr, now) {
            self.link_down(now, &reason.to_string());
        }
    }
}
