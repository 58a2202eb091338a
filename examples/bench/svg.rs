//! Plots for the report, written as SVG by hand (no plotting library): a horizontal bar
//! chart with an optional goal line, and a cumulative distribution (the share of samples
//! at or below each value) for latencies.

use std::fmt::Write;

const WIDTH: f64 = 720.0;
const LEFT: f64 = 260.0;
const RIGHT: f64 = 40.0;
const BAR: f64 = 22.0;
const GAP: f64 = 8.0;
const TOP: f64 = 40.0;
const COLORS: [&str; 6] = [
    "#2f6db5", "#d9822b", "#3a9a5b", "#b5452f", "#7a55b5", "#777777",
];

/// Escapes text for SVG.
pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A "nice" axis end at or above `max`: 1, 2 or 5 times a power of ten.
pub fn nice_max(max: f64) -> f64 {
    if max.is_nan() || max <= 0.0 || !max.is_finite() {
        return 1.0;
    }
    let power = 10f64.powf(max.log10().floor());
    for step in [1.0, 2.0, 5.0, 10.0] {
        if step * power >= max {
            return step * power;
        }
    }
    10.0 * power
}

fn header(out: &mut String, height: f64, title: &str) {
    let _ = write!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height}\" \
         viewBox=\"0 0 {WIDTH} {height}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"22\" font-size=\"15\" text-anchor=\"middle\">{}</text>\n",
        WIDTH / 2.0,
        escape(title)
    );
}

/// Ticks and grid lines of a value axis from 0 to `max`, drawn from `x0` to `x1`.
fn value_axis(out: &mut String, x0: f64, x1: f64, y0: f64, y1: f64, max: f64, unit: &str) {
    for i in 0..=4 {
        let v = max * f64::from(i) / 4.0;
        let x = x0 + (x1 - x0) * f64::from(i) / 4.0;
        let _ = write!(
            out,
            "<line x1=\"{x:.1}\" y1=\"{y0:.1}\" x2=\"{x:.1}\" y2=\"{y1:.1}\" stroke=\"#ddd\"/>\n\
             <text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#555\">{}</text>\n",
            y1 + 15.0,
            escape(&crate::results::number(v))
        );
    }
    let _ = writeln!(
        out,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#555\">{}</text>",
        (x0 + x1) / 2.0,
        y1 + 32.0,
        escape(unit)
    );
}

/// Horizontal bars, one per `(label, value)`, with a dashed goal line when given.
pub fn bars(title: &str, unit: &str, items: &[(String, f64)], goal: Option<f64>) -> String {
    let height = TOP + items.len() as f64 * (BAR + GAP) + 50.0;
    let mut out = String::new();
    header(&mut out, height, title);
    let max = nice_max(
        items
            .iter()
            .map(|(_, v)| *v)
            .chain(goal)
            .fold(0.0, f64::max),
    );
    let (x0, x1) = (LEFT, WIDTH - RIGHT);
    let y1 = TOP + items.len() as f64 * (BAR + GAP);
    value_axis(&mut out, x0, x1, TOP, y1, max, unit);
    for (i, (label, value)) in items.iter().enumerate() {
        let y = TOP + i as f64 * (BAR + GAP);
        let w = ((value / max).clamp(0.0, 1.0) * (x1 - x0)).max(0.5);
        let _ = write!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>\n\
             <rect x=\"{x0:.1}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"{BAR}\" fill=\"{}\"/>\n\
             <text x=\"{:.1}\" y=\"{:.1}\" fill=\"#222\">{}</text>\n",
            x0 - 6.0,
            y + BAR * 0.7,
            escape(label),
            COLORS[i % COLORS.len()],
            (x0 + w + 4.0).min(x1 - 30.0),
            y + BAR * 0.7,
            escape(&crate::results::number(*value))
        );
    }
    if let Some(g) = goal {
        let x = x0 + (g / max).clamp(0.0, 1.0) * (x1 - x0);
        let _ = write!(
            out,
            "<line x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{x:.1}\" y2=\"{y1:.1}\" stroke=\"#c00\" \
             stroke-dasharray=\"5,4\"/>\n<text x=\"{x:.1}\" y=\"{:.1}\" fill=\"#c00\" \
             text-anchor=\"middle\">goal {}</text>\n",
            TOP - 4.0,
            TOP - 6.0,
            escape(&crate::results::number(g))
        );
    }
    out.push_str("</svg>\n");
    out
}

/// Cumulative distributions: for each series, the share of samples ≤ x, as steps.
pub fn cdf(title: &str, unit: &str, series: &[(String, Vec<f64>)]) -> String {
    // The plot, the axis label, then one legend line per series.
    let (x0, x1, y0, y1) = (70.0, WIDTH - 30.0, TOP + 10.0, 270.0);
    let height = y1 + 50.0 + 16.0 * series.len() as f64;
    let mut out = String::new();
    header(&mut out, height, title);
    let max = nice_max(
        series
            .iter()
            .flat_map(|(_, v)| v.iter().copied())
            .filter(|v| v.is_finite())
            .fold(0.0, f64::max),
    );
    value_axis(&mut out, x0, x1, y0, y1, max, unit);
    for i in 0..=4 {
        let y = y1 - (y1 - y0) * f64::from(i) / 4.0;
        let _ = write!(
            out,
            "<line x1=\"{x0}\" y1=\"{y:.1}\" x2=\"{x1}\" y2=\"{y:.1}\" stroke=\"#eee\"/>\n\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"#555\">{}%</text>\n",
            x0 - 6.0,
            y + 4.0,
            i * 25
        );
    }
    for (n, (name, values)) in series.iter().enumerate() {
        let mut v: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
        v.sort_by(f64::total_cmp);
        if v.is_empty() {
            continue;
        }
        let color = COLORS[n % COLORS.len()];
        let x_of = |value: f64| x0 + (value / max).clamp(0.0, 1.0) * (x1 - x0);
        let y_of = |share: f64| y1 - share * (y1 - y0);
        let mut path = format!("M{:.1},{:.1}", x_of(v[0]), y_of(0.0));
        for (i, value) in v.iter().enumerate() {
            let share = (i + 1) as f64 / v.len() as f64;
            let _ = write!(
                path,
                " L{:.1},{:.1} L{:.1},{:.1}",
                x_of(*value),
                y_of(i as f64 / v.len() as f64),
                x_of(*value),
                y_of(share)
            );
        }
        let _ = write!(
            out,
            "<path d=\"{path}\" fill=\"none\" stroke=\"{color}\" stroke-width=\"2\"/>\n\
             <rect x=\"{:.1}\" y=\"{:.1}\" width=\"12\" height=\"12\" fill=\"{color}\"/>\n\
             <text x=\"{:.1}\" y=\"{:.1}\">{} ({} samples)</text>\n",
            x0 + 10.0,
            y1 + 40.0 + n as f64 * 16.0,
            x0 + 28.0,
            y1 + 50.0 + n as f64 * 16.0,
            escape(name),
            v.len()
        );
    }
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_ends_are_round() {
        assert_eq!(nice_max(0.0), 1.0);
        assert_eq!(nice_max(0.7), 1.0);
        assert_eq!(nice_max(1.2), 2.0);
        assert_eq!(nice_max(139.0), 200.0);
        assert_eq!(nice_max(500.0), 500.0);
        assert_eq!(nice_max(f64::NAN), 1.0);
    }

    #[test]
    fn bar_chart_is_one_svg_with_a_bar_per_item_and_escaped_labels() {
        let svg = bars(
            "Output <throughput>",
            "MB/s",
            &[("a & b".into(), 140.0), ("c".into(), 75.0)],
            Some(100.0),
        );
        assert!(svg.starts_with("<svg ") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<rect x=").count(), 2);
        assert!(svg.contains("a &amp; b") && svg.contains("&lt;throughput&gt;"));
        assert!(svg.contains("goal 100"));
    }

    #[test]
    fn cdf_draws_one_path_per_non_empty_series() {
        let svg = cdf(
            "Lateness",
            "ms",
            &[
                ("x".into(), vec![3.0, 1.0, 2.0]),
                ("empty".into(), vec![]),
                ("y".into(), vec![f64::NAN, 5.0]),
            ],
        );
        assert_eq!(svg.matches("<path ").count(), 2);
        assert!(svg.contains("x (3 samples)") && svg.contains("y (1 samples)"));
    }
}
