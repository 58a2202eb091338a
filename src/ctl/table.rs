//! Tables and colours for people: aligned columns, colours only on a terminal and never
//! with `NO_COLOR` set (https://no-color.org) or `TERM=dumb`.

use std::io::IsTerminal;

use crate::wire::records::{Millis, RunState, TargetRecord, TargetState};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Color {
    Red,
    Green,
    Yellow,
    Blue,
    Dim,
    Bold,
}

impl Color {
    fn code(self) -> &'static str {
        match self {
            Color::Red => "31",
            Color::Green => "32",
            Color::Yellow => "33",
            Color::Blue => "34",
            Color::Dim => "2",
            Color::Bold => "1",
        }
    }
}

/// Whether to colour, decided once per stream.
#[derive(Debug, Clone, Copy)]
pub(super) struct Style {
    pub color: bool,
}

/// Colours are allowed by the environment (a terminal is still needed).
fn color_allowed() -> bool {
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let dumb = std::env::var("TERM").is_ok_and(|t| t == "dumb");
    !no_color && !dumb
}

impl Style {
    pub(super) fn stdout() -> Style {
        Style {
            color: color_allowed() && std::io::stdout().is_terminal(),
        }
    }

    pub(super) fn stderr() -> Style {
        Style {
            color: color_allowed() && std::io::stderr().is_terminal(),
        }
    }

    pub(super) fn paint(&self, text: &str, color: Option<Color>) -> String {
        match color {
            Some(c) if self.color => format!("\x1b[{}m{text}\x1b[0m", c.code()),
            _ => text.to_string(),
        }
    }
}

/// The colour of a run state.
pub(super) fn run_color(state: RunState) -> Option<Color> {
    match state {
        RunState::Succeeded => Some(Color::Green),
        RunState::Failed => Some(Color::Red),
        RunState::Partial => Some(Color::Yellow),
        RunState::Queued | RunState::Dispatching | RunState::Running => Some(Color::Blue),
        RunState::Canceled | RunState::Skipped => Some(Color::Dim),
    }
}

/// The outcome of a target in words, and its colour.
pub(super) fn target_outcome(t: &TargetRecord) -> (String, Option<Color>) {
    match (t.state, t.exit_code) {
        (TargetState::Finished, Some(0)) => ("ok".into(), Some(Color::Green)),
        (TargetState::Finished, _) => (
            t.reason
                .map(|r| r.as_str())
                .unwrap_or("failed")
                .replace("exit", "failed"),
            Some(Color::Red),
        ),
        (TargetState::SkippedMaintenance, _) => ("maintenance".into(), Some(Color::Dim)),
        _ if t.suspended => ("suspended".into(), Some(Color::Yellow)),
        (state, _) => (state.as_str().into(), Some(Color::Blue)),
    }
}

/// A time for a table: RFC 3339 in UTC to the second, or `-`.
pub(super) fn when(ms: Option<Millis>) -> String {
    match ms.and_then(chrono::DateTime::from_timestamp_millis) {
        Some(t) => t.format("%Y-%m-%d %H:%M:%SZ").to_string(),
        None => "-".into(),
    }
}

/// A duration for a table: `850ms`, `12.3s`, `5m02s`, `3h04m`.
pub(super) fn duration(from: Option<Millis>, to: Option<Millis>) -> String {
    let (Some(a), Some(b)) = (from, to) else {
        return "-".into();
    };
    let ms = (b - a).max(0);
    match ms {
        0..1_000 => format!("{ms}ms"),
        1_000..60_000 => format!("{:.1}s", ms as f64 / 1000.0),
        60_000..3_600_000 => format!("{}m{:02}s", ms / 60_000, (ms / 1000) % 60),
        _ => format!("{}h{:02}m", ms / 3_600_000, (ms / 60_000) % 60),
    }
}

/// Rows of cells printed with aligned columns (the last column is not padded).
pub(super) struct Table {
    headers: Vec<&'static str>,
    rows: Vec<Vec<(String, Option<Color>)>>,
}

impl Table {
    pub(super) fn new(headers: &[&'static str]) -> Table {
        Table {
            headers: headers.to_vec(),
            rows: Vec::new(),
        }
    }

    /// A row; its text is escaped here (control characters, ANSI/OSC escapes, newlines,
    /// bidi overrides): a machine id, job name or message can come from a peer, and a
    /// table goes to a terminal. What is stored, and `--json`, stay exact.
    pub(super) fn row(&mut self, cells: Vec<(String, Option<Color>)>) {
        self.rows.push(
            cells
                .into_iter()
                .map(|(text, color)| (crate::logsafe::escape(&text), color))
                .collect(),
        );
    }

    pub(super) fn render(&self, style: Style, indent: &str) -> String {
        let cols = self.headers.len();
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, (text, _)) in row.iter().enumerate().take(cols) {
                widths[i] = widths[i].max(text.chars().count());
            }
        }
        let mut out = String::new();
        let line = |cells: Vec<(String, Option<Color>)>, out: &mut String| {
            out.push_str(indent);
            let n = cells.len();
            for (i, (text, color)) in cells.into_iter().enumerate() {
                let pad = widths
                    .get(i)
                    .copied()
                    .unwrap_or(0)
                    .saturating_sub(text.chars().count());
                out.push_str(&style.paint(&text, color));
                if i + 1 < n {
                    out.push_str(&" ".repeat(pad + 2));
                }
            }
            out.push('\n');
        };
        let header = self
            .headers
            .iter()
            .map(|h| (h.to_string(), Some(Color::Bold)))
            .collect();
        line(header, &mut out);
        for row in &self.rows {
            line(row.clone(), &mut out);
        }
        out
    }
}

/// A plain cell.
pub(super) fn cell(text: impl Into<String>) -> (String, Option<Color>) {
    (text.into(), None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_reach_the_terminal_escaped() {
        let mut t = Table::new(&["MACHINE"]);
        t.row(vec![cell("evil\n2026 forged\u{1b}]0;x\u{7}\u{202e}txt\0")]);
        let out = t.render(Style { color: false }, "");
        assert_eq!(out.lines().count(), 2, "{out:?}");
        assert!(!out.contains('\u{1b}') && !out.contains('\u{202e}') && !out.contains('\0'));
        assert!(out.contains("evil\\n2026 forged\\u{1b}]0;x\\u{7}\\u{202e}txt\\u{0}"));
    }

    #[test]
    fn columns_align_and_colour_only_when_asked() {
        let mut t = Table::new(&["A", "LONGER"]);
        t.row(vec![cell("xyz"), ("ok".into(), Some(Color::Green))]);
        let plain = t.render(Style { color: false }, "");
        assert_eq!(plain, "A    LONGER\nxyz  ok\n");
        let coloured = t.render(Style { color: true }, "");
        assert!(coloured.contains("\x1b[32mok\x1b[0m"), "{coloured:?}");
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(duration(Some(0), Some(850)), "850ms");
        assert_eq!(duration(Some(0), Some(12_340)), "12.3s");
        assert_eq!(duration(Some(0), Some(302_000)), "5m02s");
        assert_eq!(duration(Some(0), Some(11_040_000)), "3h04m");
        assert_eq!(duration(None, Some(1)), "-");
    }
}
