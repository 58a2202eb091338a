//! The hub-wide budget for the bytes the API holds on its clients' behalf: request
//! buffers, answers not yet sent, and room set aside for answers main is preparing.
//!
//! Without it, memory followed the clients: each connection could buffer a request of
//! the largest size allowed (~1 MiB) and a quarter MiB of unread answers, and each output
//! request an answer of up to 8 MiB, so a few hundred connections that never read took
//! the hub to hundreds of MiB. The rules:
//!
//! 1. Every connection may hold [`FLOOR`] (request and unsent answers together) whatever
//!    the others do: an ordinary request and its answer always fit.
//! 2. Beyond that it reads more only while request buffers hold less than half of
//!    [`BUDGET`], and serves its next request only while the whole is under `BUDGET`; a
//!    connection held back this way is tried again by the one-second sweep. The budget
//!    is asked before every read and every read is counted at once
//!    ([`Budget::room_to_read`]), so a sweep that retries a thousand held-back
//!    connections stops reading them at the read that fills the share.
//! 3. A call to main sets aside the largest answer it may bring until the answer is
//!    queued; one that does not fit is answered 503 with `Retry-After`, unless it is
//!    small and its connection holds nothing (rule 1). An output read sets aside its
//!    `max_bytes` in the raw form and twice that as JSON, and its JSON answer is cut to
//!    fit ([`output_answer_room`]): escaped, a control byte takes 6 bytes, and answers
//!    three times their room took the hub past its budget.
//!
//! Buffers start empty, grow with what arrives, and are shrunk back once drained
//! ([`shrink`]); within its floor a buffer's capacity stays within the floor
//! ([`reserve_for`]). The hub's own numbers are kept per connection (`charged`) and
//! settled after each read and each event on it, so the total needs no scan.

/// Bytes the data of an output read's answer may take, for `max_bytes` asked: the bytes
/// themselves in the raw form; twice them as JSON text, which the answer is cut to fit
/// (`http/output_json.rs`: a control byte takes 6 bytes in JSON, invalid UTF-8 3).
pub(crate) fn output_data_room(max_bytes: u64, raw: bool) -> usize {
    let factor = if raw { 1 } else { 2 };
    usize::try_from(max_bytes.saturating_mul(factor)).unwrap_or(usize::MAX)
}

/// Room set aside for an output read's answer (rule 3): its data and the rest of it.
pub(crate) fn output_answer_room(max_bytes: u64, raw: bool) -> usize {
    output_data_room(max_bytes, raw).saturating_add(CALL_RESERVE)
}

/// Bytes the API may hold for all its clients together, beyond their floors.
pub(crate) const BUDGET: usize = 48 << 20;
/// Bytes read per `read` call.
pub(crate) const READ_CHUNK: usize = 16 * 1024;
/// Bytes every connection may hold regardless (request plus unsent answers).
pub(crate) const FLOOR: usize = 32 * 1024;
/// Room set aside for an ordinary answer from main.
pub(crate) const CALL_RESERVE: usize = 64 * 1024;

#[derive(Debug, Default)]
pub(crate) struct Budget {
    /// Request buffers and unsent answers of every connection, as last settled.
    buffered: usize,
    /// Request buffers alone (part of `buffered`).
    requests: usize,
    /// Set aside for answers main is preparing.
    reserved: usize,
    /// The most `buffered` held since memory was last given back to the system.
    high_water: usize,
}

/// What one connection holds, as last counted into the [`Budget`].
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Charge {
    request: usize,
    answers: usize,
    reserved: usize,
}

impl Budget {
    /// How many bytes a connection holding `own` may read now (0: it waits): a chunk
    /// while request buffers hold less than half the budget, else what is left of its
    /// floor. Asked before every read, with every read settled at once, so neither one
    /// connection nor a sweep over many can read past the budget.
    pub(crate) fn room_to_read(&self, own: usize) -> usize {
        if self.requests < BUDGET / 2 {
            READ_CHUNK
        } else {
            FLOOR.saturating_sub(own).min(READ_CHUNK)
        }
    }

    /// Whether a connection holding `own` bytes may serve its next request.
    pub(crate) fn may_serve(&self, own: usize) -> bool {
        own < FLOOR || self.buffered + self.reserved < BUDGET
    }

    /// Set aside `bytes` for an answer; `false` when it does not fit.
    pub(crate) fn reserve(&mut self, charge: &mut Charge, bytes: usize, own: usize) -> bool {
        let fits = self.buffered + self.reserved + bytes <= BUDGET;
        let on_its_floor = bytes <= CALL_RESERVE && own == 0;
        if !(fits || on_its_floor) {
            return false;
        }
        self.reserved += bytes;
        charge.reserved += bytes;
        true
    }

    /// The answer arrived (or never will): its room is free again.
    pub(crate) fn unreserve(&mut self, charge: &mut Charge) {
        self.reserved = self.reserved.saturating_sub(charge.reserved);
        charge.reserved = 0;
    }

    /// Count a connection's buffers as they are now.
    pub(crate) fn settle(&mut self, charge: &mut Charge, request: usize, answers: usize) {
        self.buffered =
            (self.buffered + request + answers).saturating_sub(charge.request + charge.answers);
        self.requests = (self.requests + request).saturating_sub(charge.request);
        charge.request = request;
        charge.answers = answers;
        self.high_water = self.high_water.max(self.buffered);
    }

    /// Once most of what was buffered is gone (clients that flooded the hub left), hand
    /// the freed memory back to the system: the allocator keeps freed heap pages
    /// otherwise, and the hub would stay at its peak. Called by the one-second sweep.
    pub(crate) fn give_back(&mut self) {
        if self.high_water < self.buffered + (8 << 20) || self.buffered > self.high_water / 2 {
            return;
        }
        self.high_water = self.buffered;
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        // SAFETY: malloc_trim only returns free pages of the allocator's arenas to the
        // kernel; it touches no memory in use and has no preconditions.
        unsafe {
            nix::libc::malloc_trim(0);
        }
    }

    /// The connection is gone (or no longer HTTP).
    pub(crate) fn release(&mut self, charge: &mut Charge) {
        self.settle(charge, 0, 0);
        self.unreserve(charge);
    }

    pub(crate) fn buffered(&self) -> usize {
        self.buffered
    }
}

/// Make room for `extra` more bytes in a request buffer. Within the floor the capacity
/// stops at [`FLOOR`]: doubling from a client's small reads would make a floor cost up to
/// twice its bytes, and floors are what a thousand held-back connections hold.
pub(crate) fn reserve_for(buf: &mut Vec<u8>, extra: usize) {
    let need = buf.len() + extra;
    if need <= buf.capacity() {
        return;
    }
    if need <= FLOOR {
        let target = buf.capacity().saturating_mul(2).clamp(need, FLOOR);
        buf.reserve_exact(target - buf.len());
    } else {
        buf.reserve(extra);
    }
}

/// Give a drained buffer's memory back when it holds far less than it grew to.
pub(crate) fn shrink(buf: &mut Vec<u8>) {
    if buf.capacity() > FLOOR && buf.len() < buf.capacity() / 4 {
        buf.shrink_to(buf.len().max(READ_CHUNK));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floors_always_fit_and_the_rest_shares_the_budget() {
        let mut b = Budget::default();
        let mut big = Charge::default();
        assert_eq!(b.room_to_read(FLOOR * 4), READ_CHUNK, "an open budget");
        b.settle(&mut big, BUDGET / 2, 0);
        assert_eq!(
            b.room_to_read(FLOOR),
            0,
            "request buffers hold half the budget"
        );
        assert_eq!(
            b.room_to_read(FLOOR - 100),
            100,
            "a connection's floor is always there"
        );
        assert_eq!(b.room_to_read(0), READ_CHUNK);
        assert!(b.may_serve(FLOOR), "answers have the other half");
        let mut other = Charge::default();
        assert!(
            !b.reserve(&mut other, BUDGET, 0),
            "too large for what is left"
        );
        assert!(b.reserve(&mut other, CALL_RESERVE, 0));
        b.settle(&mut other, 0, BUDGET / 2);
        assert!(!b.may_serve(FLOOR));
        let mut third = Charge::default();
        assert!(
            b.reserve(&mut third, CALL_RESERVE, 0),
            "small, and it holds nothing"
        );
        assert!(!b.reserve(&mut third, CALL_RESERVE, 10));
        b.release(&mut big);
        b.release(&mut other);
        b.release(&mut third);
        assert_eq!((b.buffered, b.requests, b.reserved), (0, 0, 0));
    }

    #[test]
    fn reading_past_half_the_budget_stops_at_the_read_that_reaches_it() {
        // A thousand connections read in a row (the sweep), each settled as it reads.
        let mut b = Budget::default();
        let mut charges = vec![Charge::default(); 1000];
        let mut held = vec![0usize; 1000];
        for (charge, own) in charges.iter_mut().zip(held.iter_mut()) {
            loop {
                let room = b.room_to_read(*own);
                if room == 0 || *own >= 1 << 20 {
                    break;
                }
                *own += room;
                b.settle(charge, *own, 0);
            }
        }
        let total: usize = held.iter().sum();
        assert!(
            total <= BUDGET / 2 + READ_CHUNK + 1000 * FLOOR,
            "{total} bytes read"
        );
        assert!(held.iter().all(|own| *own >= FLOOR), "every floor is there");
    }

    #[test]
    fn a_floor_costs_its_bytes_not_twice_them() {
        let mut v = Vec::new();
        while v.len() < FLOOR {
            let n = 1000.min(FLOOR - v.len());
            reserve_for(&mut v, n);
            v.extend(std::iter::repeat_n(b'x', n));
        }
        assert_eq!(v.capacity(), FLOOR);
        reserve_for(&mut v, READ_CHUNK);
        assert!(v.capacity() >= FLOOR + READ_CHUNK);
    }

    #[test]
    fn drained_buffers_shrink() {
        let mut v = Vec::with_capacity(1 << 20);
        v.extend_from_slice(&[1, 2, 3]);
        shrink(&mut v);
        assert!(v.capacity() < 1 << 20);
        assert_eq!(v, [1, 2, 3]);
    }
}
