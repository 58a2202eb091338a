//! Counters and histograms for `/metrics`, in the Prometheus text exposition format.
//!
//! The processes that observe something keep its histogram (main: run durations and
//! scheduling lateness; db: commit latency) and main renders them all when the hub asks.
//! Buckets are fixed per histogram, so a histogram crosses a link as plain counts.

use std::fmt::Write;

use serde::{Deserialize, Serialize};

/// Buckets (seconds) for short latencies: commits, scheduling lateness.
pub(crate) const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Buckets (seconds) for run durations.
pub(crate) const DURATION_BUCKETS: &[f64] = &[
    0.1,
    0.5,
    1.0,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
    900.0,
    1800.0,
    3600.0,
    4.0 * 3600.0,
    12.0 * 3600.0,
    86400.0,
];

/// A cumulative histogram of observations in seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Histogram {
    /// Upper bounds, ascending; `+Inf` is implied.
    pub bounds: Vec<f64>,
    /// Observations per bucket (not cumulative); one more than `bounds` for `+Inf`.
    pub counts: Vec<u64>,
    pub sum: f64,
    pub count: u64,
}

impl Histogram {
    pub(crate) fn new(bounds: &[f64]) -> Histogram {
        debug_assert!(
            bounds.windows(2).all(|w| w[0] < w[1]),
            "histogram bounds must ascend"
        );
        Histogram {
            bounds: bounds.to_vec(),
            counts: vec![0; bounds.len() + 1],
            sum: 0.0,
            count: 0,
        }
    }

    pub(crate) fn observe(&mut self, seconds: f64) {
        let seconds = if seconds.is_finite() {
            seconds.max(0.0)
        } else {
            0.0
        };
        let i = self
            .bounds
            .iter()
            .position(|b| seconds <= *b)
            .unwrap_or(self.bounds.len());
        if let Some(c) = self.counts.get_mut(i) {
            *c += 1;
        }
        self.sum += seconds;
        self.count += 1;
    }

    /// Append the `_bucket`, `_sum` and `_count` lines of `name` (with `labels`, e.g.
    /// `job="x"`, or empty) to `out`. HELP and TYPE lines are the caller's.
    pub(crate) fn render(&self, name: &str, labels: &str, out: &mut String) {
        let sep = if labels.is_empty() { "" } else { "," };
        let mut cumulative = 0;
        for (bound, count) in self.bounds.iter().zip(&self.counts) {
            cumulative += count;
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {cumulative}"
            );
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}",
            self.count
        );
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let _ = writeln!(out, "{name}_sum{braces} {}", self.sum);
        let _ = writeln!(out, "{name}_count{braces} {}", self.count);
    }
}

/// HELP and TYPE lines of one metric family.
pub(crate) fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// Escape a label value (backslash, quote, newline).
pub(crate) fn label_value(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_cumulative_buckets() {
        let mut h = Histogram::new(&[0.1, 1.0]);
        h.observe(0.05);
        h.observe(0.5);
        h.observe(7.0);
        h.observe(f64::NAN);
        let mut out = String::new();
        h.render("x_seconds", "", &mut out);
        assert_eq!(
            out,
            "x_seconds_bucket{le=\"0.1\"} 2\nx_seconds_bucket{le=\"1\"} 3\n\
             x_seconds_bucket{le=\"+Inf\"} 4\nx_seconds_sum 7.55\nx_seconds_count 4\n"
        );
    }

    #[test]
    fn labels_are_kept_and_escaped() {
        let mut h = Histogram::new(&[1.0]);
        h.observe(2.0);
        let mut out = String::new();
        h.render("y", &format!("job=\"{}\"", label_value("a\"b")), &mut out);
        assert!(
            out.contains("y_bucket{job=\"a\\\"b\",le=\"+Inf\"} 1"),
            "{out}"
        );
        assert!(out.contains("y_count{job=\"a\\\"b\"} 1"), "{out}");
    }
}
