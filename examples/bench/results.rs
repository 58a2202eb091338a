//! What a benchmark run produces, as JSON: per scenario and label (the build measured,
//! `current` unless `--label` says otherwise), its figures with their goals, raw samples
//! for the plots, and notes. Results of earlier runs are kept and replaced scenario by
//! scenario, so running one scenario regenerates the whole report.

use serde::{Deserialize, Serialize};

/// A goal beside a figure. Never a pass/fail: the report shows whether it is met.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum Goal {
    AtMost(f64),
    AtLeast(f64),
}

impl Goal {
    pub fn met(self, value: f64) -> bool {
        match self {
            Goal::AtMost(g) => value <= g,
            Goal::AtLeast(g) => value >= g,
        }
    }

    pub fn text(self, unit: &str) -> String {
        match self {
            Goal::AtMost(g) => format!("≤ {} {unit}", number(g)),
            Goal::AtLeast(g) => format!("≥ {} {unit}", number(g)),
        }
    }
}

/// A number as the report prints it: three significant digits, thousands grouped.
pub fn number(v: f64) -> String {
    if !v.is_finite() {
        return "–".into();
    }
    let abs = v.abs();
    let decimals = if abs >= 100.0 || abs == 0.0 {
        0
    } else if abs >= 10.0 {
        1
    } else if abs >= 1.0 {
        2
    } else {
        3
    };
    let text = format!("{v:.decimals$}");
    let (int, frac) = text
        .split_once('.')
        .map_or((text.as_str(), None), |(i, f)| (i, Some(f)));
    let (sign, digits) = int.strip_prefix('-').map_or(("", int), |d| ("-", d));
    let mut grouped = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(c);
    }
    match frac {
        Some(f) => format!("{sign}{grouped}.{f}"),
        None => format!("{sign}{grouped}"),
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Figure {
    /// Stable key, e.g. `hub_cpu`; the same key in two labels is one row of the report.
    pub key: String,
    pub what: String,
    pub value: f64,
    pub unit: String,
    pub goal: Option<Goal>,
}

/// Raw measurements behind a plot (e.g. every dispatch lateness in ms).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Samples {
    pub key: String,
    pub what: String,
    pub unit: String,
    pub values: Vec<f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScenarioResult {
    pub scenario: String,
    pub label: String,
    /// What was measured: the binaries' directory and version.
    pub build: String,
    pub measured_at: String,
    /// The sizes used (this machine cannot always run the goal's size).
    pub sizes: String,
    pub figures: Vec<Figure>,
    pub samples: Vec<Samples>,
    pub notes: Vec<String>,
}

impl ScenarioResult {
    pub fn new(scenario: &str, label: &str, build: &str) -> ScenarioResult {
        ScenarioResult {
            scenario: scenario.into(),
            label: label.into(),
            build: build.into(),
            measured_at: chrono::Utc::now().format("%Y-%m-%d %H:%M UTC").to_string(),
            sizes: String::new(),
            figures: Vec::new(),
            samples: Vec::new(),
            notes: Vec::new(),
        }
    }

    pub fn figure(&mut self, key: &str, what: &str, value: f64, unit: &str, goal: Option<Goal>) {
        self.figures.push(Figure {
            key: key.into(),
            what: what.into(),
            value,
            unit: unit.into(),
            goal,
        });
    }

    pub fn samples(&mut self, key: &str, what: &str, unit: &str, values: Vec<f64>) {
        self.samples.push(Samples {
            key: key.into(),
            what: what.into(),
            unit: unit.into(),
            values,
        });
    }

    pub fn note(&mut self, text: impl Into<String>) {
        self.notes.push(text.into());
    }

    pub fn get(&self, key: &str) -> Option<&Figure> {
        self.figures.iter().find(|f| f.key == key)
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Results {
    pub machine: Vec<(String, String)>,
    pub runs: Vec<ScenarioResult>,
}

impl Results {
    /// Replace the result of the same scenario and label, or add it.
    pub fn merge(&mut self, result: ScenarioResult) {
        self.runs
            .retain(|r| !(r.scenario == result.scenario && r.label == result.label));
        self.runs.push(result);
    }

    /// Like `merge`, but figures and samples of the earlier result whose keys this one
    /// does not have are kept (a scenario measured at several sizes, one size per run).
    pub fn merge_keeping(&mut self, mut result: ScenarioResult) {
        if let Some(old) = self.find(&result.scenario, &result.label).cloned() {
            let mut figures: Vec<Figure> = old
                .figures
                .into_iter()
                .filter(|f| result.get(&f.key).is_none())
                .collect();
            figures.append(&mut result.figures);
            result.figures = figures;
            let mut samples: Vec<Samples> = old
                .samples
                .into_iter()
                .filter(|s| !result.samples.iter().any(|n| n.key == s.key))
                .collect();
            samples.append(&mut result.samples);
            result.samples = samples;
            if !old.sizes.is_empty() && old.sizes != result.sizes {
                result.sizes = format!("{}; {}", old.sizes, result.sizes);
            }
        }
        self.merge(result);
    }

    pub fn find(&self, scenario: &str, label: &str) -> Option<&ScenarioResult> {
        self.runs
            .iter()
            .find(|r| r.scenario == scenario && r.label == label)
    }

    /// Labels present, `current` last, others in name order.
    pub fn labels(&self) -> Vec<String> {
        let mut labels: Vec<String> = self.runs.iter().map(|r| r.label.clone()).collect();
        labels.sort_by_key(|l| (l == "current", l.clone()));
        labels.dedup();
        labels
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_keep_three_significant_digits_and_group_thousands() {
        assert_eq!(number(10_000.0), "10,000");
        assert_eq!(number(1234567.4), "1,234,567");
        assert_eq!(number(139.54), "140");
        assert_eq!(number(12.345), "12.3");
        assert_eq!(number(1.5), "1.50");
        assert_eq!(number(0.0123), "0.012");
        assert_eq!(number(-2500.0), "-2,500");
        assert_eq!(number(0.0), "0");
        assert_eq!(number(f64::NAN), "–");
    }

    #[test]
    fn goals_say_whether_they_are_met() {
        assert!(Goal::AtMost(30.0).met(29.9));
        assert!(!Goal::AtMost(30.0).met(30.1));
        assert!(Goal::AtLeast(100.0).met(100.0));
        assert_eq!(Goal::AtLeast(100.0).text("MB/s"), "≥ 100 MB/s");
    }

    #[test]
    fn results_at_other_sizes_are_kept_beside_each_other() {
        let mut all = Results::default();
        let mut three = ScenarioResult::new("salt", "current", "a");
        three.sizes = "3 minions".into();
        three.figure("p50_3", "3 minions", 10.0, "ms", None);
        all.merge_keeping(three.clone());
        let mut ten = ScenarioResult::new("salt", "current", "b");
        ten.sizes = "10 minions".into();
        ten.figure("p50_10", "10 minions", 20.0, "ms", None);
        all.merge_keeping(ten);
        three.figures[0].value = 11.0;
        all.merge_keeping(three);
        let r = all.find("salt", "current").expect("salt");
        assert_eq!(r.get("p50_10").map(|f| f.value), Some(20.0));
        assert_eq!(r.get("p50_3").map(|f| f.value), Some(11.0));
        assert_eq!(r.figures.len(), 2);
        assert_eq!(all.runs.len(), 1);
    }

    #[test]
    fn a_new_result_replaces_the_same_scenario_and_label_only() {
        let mut all = Results::default();
        all.merge(ScenarioResult::new("ingest", "current", "a"));
        all.merge(ScenarioResult::new("ingest", "before", "b"));
        all.merge(ScenarioResult::new("ingest", "current", "c"));
        assert_eq!(all.runs.len(), 2);
        assert_eq!(
            all.find("ingest", "current").map(|r| r.build.as_str()),
            Some("c")
        );
        assert_eq!(
            all.labels(),
            vec!["before".to_string(), "current".to_string()]
        );
    }
}
