//! Client-supplied text on its way into a log line or an echoed error message.
//!
//! A peer controls paths, header values, job names and machine ids it sends; written
//! as they are, they could forge log lines (newlines, ANSI escapes) or fill the journal
//! (megabytes). [`clip`] escapes control characters and cuts the text to a bound.
//! [`Repeated`] lets a warning that a flood can trigger through at most once per period,
//! counting what it held back.

use std::time::{Duration, Instant};

/// `text` with control characters escaped (`\n`, `\u{1b}`), at most `max` characters
/// of it, and `…` when cut.
pub fn clip(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max) + 8);
    for (n, c) in text.chars().enumerate() {
        if n >= max {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// A warning that is logged at most once per `period`.
#[derive(Debug)]
pub struct Repeated {
    period: Duration,
    last: Option<Instant>,
    held: u64,
}

impl Repeated {
    pub const fn new(period: Duration) -> Repeated {
        Repeated {
            period,
            last: None,
            held: 0,
        }
    }

    /// `Some(n)` when the warning may be logged now (`n` = how many were held back
    /// since the last one); `None` to stay quiet.
    pub fn due(&mut self, now: Instant) -> Option<u64> {
        match self.last {
            Some(at) if now.duration_since(at) < self.period => {
                self.held += 1;
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.held))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_escapes_and_cuts() {
        assert_eq!(clip("a\nb\u{1b}[31m", 100), "a\\nb\\u{1b}[31m");
        assert_eq!(clip(&"x".repeat(10), 4), "xxxx…");
        assert_eq!(clip("ok", 4), "ok");
    }

    #[test]
    fn repeated_warnings_are_held_back() {
        let now = Instant::now();
        let mut r = Repeated::new(Duration::from_secs(10));
        assert_eq!(r.due(now), Some(0));
        assert_eq!(r.due(now), None);
        assert_eq!(r.due(now + Duration::from_secs(1)), None);
        assert_eq!(r.due(now + Duration::from_secs(11)), Some(2));
    }
}
