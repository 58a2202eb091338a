//! Peer-supplied text on its way into a log line, an event row or a terminal.
//!
//! A peer controls the machine ids, run ids, paths and header values it sends; written
//! as they are, they could forge log lines (newlines), drive the reader's terminal (ANSI
//! and OSC escapes), reorder what a reader sees (bidi overrides) or fill the disk
//! (megabytes). [`clip`] escapes all of those and cuts the text to a bound; [`escape`]
//! only escapes (for what `saltpeterctl` prints). [`Repeated`] lets a warning that a
//! flood can trigger through at most once per period, and [`PerKey`] does the same per
//! peer with a small allowance, counting what it held back.
//!
//! The hub's `roles::hub::logsafe` has the same `clip` semantics; this module is the
//! shared one.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

/// How many characters of a peer's machine id or name main writes in a log line or event.
pub(crate) const NAME_MAX: usize = 256;

/// How many characters of a reason that comes from outside are kept (a failed launch's
/// stderr, a minion's answer, a helper's complaint, a receiver's reply): enough to say
/// why, and the log line, event and link message that carry it stay small.
pub(crate) const REASON_MAX: usize = 1024;

/// Format characters that reorder or hide text on a terminal: LRM/RLM, the embeddings
/// and overrides (U+202A–U+202E) and the isolates (U+2066–U+2069).
fn is_bidi(c: char) -> bool {
    matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Whether `c` is written as an escape (`\n`, `\u{1b}`, `\u{202e}`): control characters
/// (C0, DEL, C1 — ESC and CSI start every ANSI and OSC sequence) and bidi controls.
pub(crate) fn needs_escape(c: char) -> bool {
    c.is_control() || is_bidi(c)
}

fn push_escaped(out: &mut String, c: char) {
    if needs_escape(c) {
        out.extend(c.escape_default());
    } else {
        out.push(c);
    }
}

/// `text` with control, escape and bidi characters escaped, at most `max` characters of
/// it, and `…` when cut.
pub(crate) fn clip(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max) + 8);
    for (n, c) in text.chars().enumerate() {
        if n >= max {
            out.push('…');
            break;
        }
        push_escaped(&mut out, c);
    }
    out
}

/// `text` with control, escape and bidi characters escaped, whole (for a terminal).
pub(crate) fn escape(text: &str) -> String {
    if !text.chars().any(needs_escape) {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        push_escaped(&mut out, c);
    }
    out
}

/// Whether `name` can stand as it is in a log line, an event or a terminal: 1 to 255
/// bytes, nothing that [`needs_escape`]. Job names, target names and minion ids must be.
pub(crate) fn is_plain_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 255 && !name.chars().any(needs_escape)
}

/// At most `max` characters of `text`, and `…` when cut; nothing escaped (for stored
/// rows, which their readers escape where they print them).
pub(crate) fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

/// A warning that is logged at most once per `period`.
#[derive(Debug)]
pub(crate) struct Repeated {
    period: Duration,
    last: Option<Instant>,
    held: u64,
}

impl Repeated {
    pub(crate) const fn new(period: Duration) -> Repeated {
        Repeated {
            period,
            last: None,
            held: 0,
        }
    }

    /// `Some(n)` when the warning may be logged now (`n` = how many were held back
    /// since the last one); `None` to stay quiet.
    pub(crate) fn due(&mut self, now: Instant) -> Option<u64> {
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

/// What [`PerKey::admit`] decided for one occurrence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admit {
    /// Record it in full; `held` occurrences of an earlier window were held back (say
    /// so once).
    Record { held: u64 },
    /// Over the allowance of this window: count it, record nothing.
    Hold,
}

/// At most `allowance` occurrences per key per `window`; the rest are counted and the
/// count is handed to the first occurrence admitted after the window. The map holds at
/// most `max_keys` keys (the oldest window is dropped first), so a flood from many
/// addresses cannot grow it without bound.
#[derive(Debug)]
pub(crate) struct PerKey<K> {
    window: Duration,
    allowance: u32,
    max_keys: usize,
    keys: HashMap<K, Window>,
}

#[derive(Debug, Clone, Copy)]
struct Window {
    start: Instant,
    seen: u32,
    held: u64,
}

impl<K: Hash + Eq + Clone> PerKey<K> {
    pub(crate) fn new(window: Duration, allowance: u32, max_keys: usize) -> PerKey<K> {
        PerKey {
            window,
            allowance,
            max_keys,
            keys: HashMap::new(),
        }
    }

    pub(crate) fn admit(&mut self, key: &K, now: Instant) -> Admit {
        let window = self.window;
        if !self.keys.contains_key(key) && self.keys.len() >= self.max_keys {
            self.keys
                .retain(|_, w| now.duration_since(w.start) < window);
            if self.keys.len() >= self.max_keys
                && let Some(oldest) = self
                    .keys
                    .iter()
                    .min_by_key(|(_, w)| w.start)
                    .map(|(k, _)| k.clone())
            {
                self.keys.remove(&oldest);
            }
        }
        let w = self.keys.entry(key.clone()).or_insert(Window {
            start: now,
            seen: 0,
            held: 0,
        });
        if now.duration_since(w.start) >= window {
            w.start = now;
            w.seen = 0;
        }
        if w.seen < self.allowance {
            w.seen += 1;
            Admit::Record {
                held: std::mem::take(&mut w.held),
            }
        } else {
            w.held += 1;
            Admit::Hold
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
        assert_eq!(clip("a\0b\r", 10), "a\\u{0}b\\r");
        assert_eq!(cut("éé\nx", 2), "éé…");
        assert_eq!(cut("ab", 2), "ab");
    }

    #[test]
    fn bidi_and_c1_controls_are_escaped() {
        assert_eq!(escape("gnp.\u{202e}exe"), "gnp.\\u{202e}exe");
        assert_eq!(
            escape("\u{2066}x\u{2069}\u{200f}"),
            "\\u{2066}x\\u{2069}\\u{200f}"
        );
        assert_eq!(escape("\u{9b}31m"), "\\u{9b}31m");
        assert_eq!(escape("\u{1b}]0;title\u{7}"), "\\u{1b}]0;title\\u{7}");
        assert_eq!(escape("plain é ✓"), "plain é ✓");
    }

    #[test]
    fn plain_names() {
        assert!(is_plain_name("minion-01.example.org"));
        assert!(is_plain_name("--out-file=x"));
        assert!(!is_plain_name(""));
        assert!(!is_plain_name("a\nb"));
        assert!(!is_plain_name("a\u{1b}[31m"));
        assert!(!is_plain_name("gnp.\u{202e}exe"));
        assert!(!is_plain_name(&"x".repeat(256)));
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

    #[test]
    fn per_key_allows_a_few_then_counts() {
        let now = Instant::now();
        let mut p = PerKey::new(Duration::from_secs(60), 2, 2);
        let a = "a".to_string();
        assert_eq!(p.admit(&a, now), Admit::Record { held: 0 });
        assert_eq!(p.admit(&a, now), Admit::Record { held: 0 });
        assert_eq!(p.admit(&a, now), Admit::Hold);
        assert_eq!(p.admit(&a, now), Admit::Hold);
        // Another key has its own allowance.
        assert_eq!(p.admit(&"b".to_string(), now), Admit::Record { held: 0 });
        let later = now + Duration::from_secs(61);
        assert_eq!(p.admit(&a, later), Admit::Record { held: 2 });
        // The map stays bounded.
        p.admit(&"c".to_string(), later);
        assert!(p.keys.len() <= 2);
    }
}
