//! Validation and normalisation of the seven cron fields, one field at a time.
//!
//! croner's own messages do not say which field is wrong ("Number out of bounds."), so every
//! field is checked here first and rewritten to the plain numeric form croner is then given:
//! month and day names become numbers, `?` becomes `*`, the original's `L5` (last Friday)
//! becomes `5L`, and `a/n` becomes `a-max/n`. An error names the field and its allowed range.

use super::error::{FieldProblem, ScheduleError};

/// One of the seven fields of a Saltpeter schedule, in their canonical order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FieldKind {
    Sec,
    Min,
    Hour,
    Dom,
    Mon,
    Dow,
    Year,
}

const MONTH_NAMES: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const DAY_NAMES: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

impl FieldKind {
    /// The fields in the order of a 7-field expression.
    pub(crate) const ALL: [FieldKind; 7] = [
        FieldKind::Sec,
        FieldKind::Min,
        FieldKind::Hour,
        FieldKind::Dom,
        FieldKind::Mon,
        FieldKind::Dow,
        FieldKind::Year,
    ];

    /// The YAML key of the field.
    pub(crate) fn name(self) -> &'static str {
        match self {
            FieldKind::Sec => "sec",
            FieldKind::Min => "min",
            FieldKind::Hour => "hour",
            FieldKind::Dom => "dom",
            FieldKind::Mon => "mon",
            FieldKind::Dow => "dow",
            FieldKind::Year => "year",
        }
    }

    /// Inclusive range of numeric values (dow 7 is Sunday, like 0).
    fn bounds(self) -> (u32, u32) {
        match self {
            FieldKind::Sec | FieldKind::Min => (0, 59),
            FieldKind::Hour => (0, 23),
            FieldKind::Dom => (1, 31),
            FieldKind::Mon => (1, 12),
            FieldKind::Dow => (0, 7),
            FieldKind::Year => (1970, 2099),
        }
    }

    /// Everything the field accepts, for error messages.
    pub(crate) fn allowed(self) -> &'static str {
        match self {
            FieldKind::Sec | FieldKind::Min => "0-59",
            FieldKind::Hour => "0-23",
            FieldKind::Dom => "1-31, `L` (last day), `LW` or `<day>W` (nearest weekday)",
            FieldKind::Mon => "1-12 or jan-dec",
            FieldKind::Dow => {
                "0-7 (0 and 7 are Sunday) or sun-sat, `<day>L` (last in the month), `<day>#<n>`"
            }
            FieldKind::Year => "1970-2099",
        }
    }

    /// An error about this field; the message always names the allowed range.
    pub(crate) fn error(self, problem: FieldProblem) -> ScheduleError {
        let (lo, hi) = self.bounds();
        let names_range = problem.to_string().contains(&format!("{lo}-{hi}"));
        ScheduleError::Field {
            field: self.name(),
            problem,
            takes: (!names_range).then(|| self.allowed()),
        }
    }

    /// Parses one value: a number, or a month or day name where the field takes names.
    fn value(self, token: &str) -> Result<u32, FieldProblem> {
        let (lo, hi) = self.bounds();
        let lower = token.to_ascii_lowercase();
        let named = match self {
            FieldKind::Mon => MONTH_NAMES.iter().position(|n| *n == lower).map(|i| i + 1),
            FieldKind::Dow => DAY_NAMES.iter().position(|n| *n == lower),
            _ => None,
        };
        if let Some(index) = named {
            return u32::try_from(index).map_err(|_| FieldProblem::NameIndex {
                token: token.to_string(),
            });
        }
        if token.is_empty() || !token.bytes().all(|b| b.is_ascii_digit()) {
            let names = match self {
                FieldKind::Mon => " or a month name (jan-dec)",
                FieldKind::Dow => " or a day name (sun-sat)",
                _ => "",
            };
            return Err(FieldProblem::NotANumber {
                token: token.to_string(),
                lo,
                hi,
                names,
            });
        }
        match token.parse::<u32>() {
            Ok(n) if (lo..=hi).contains(&n) => Ok(n),
            _ => Err(FieldProblem::OutOfRange {
                token: token.to_string(),
                lo,
                hi,
            }),
        }
    }
}

/// Checks one field and returns its canonical (numeric) text for croner.
pub(crate) fn normalize(kind: FieldKind, text: &str) -> Result<String, ScheduleError> {
    let text = text.trim();
    if text.is_empty() {
        return Err(kind.error(FieldProblem::Empty));
    }
    if text.contains(char::is_whitespace) {
        return Err(kind.error(FieldProblem::Spaces {
            text: text.to_string(),
        }));
    }
    let mut items = Vec::new();
    for item in text.split(',') {
        if item.is_empty() {
            return Err(kind.error(FieldProblem::EmptyItem {
                text: text.to_string(),
            }));
        }
        items.push(normalize_item(kind, item).map_err(|m| kind.error(m))?);
    }
    // A `*` anywhere in a list already selects every value.
    if items.iter().any(|i| i == "*") {
        return Ok("*".to_string());
    }
    Ok(items.join(","))
}

fn normalize_item(kind: FieldKind, item: &str) -> Result<String, FieldProblem> {
    let lower = item.to_ascii_lowercase();
    if item == "*" || (item == "?" && matches!(kind, FieldKind::Dom | FieldKind::Dow)) {
        return Ok("*".to_string());
    }
    if (lower.contains('l') || lower.contains('w') || lower.contains('#'))
        && let Some(special) = special_day(kind, &lower)?
    {
        return Ok(special);
    }
    if let Some((base, step)) = item.split_once('/') {
        let step_value = match step.parse::<u32>() {
            Ok(n) if n >= 1 => n,
            _ => {
                return Err(FieldProblem::Step {
                    step: step.to_string(),
                    item: item.to_string(),
                });
            }
        };
        let (lo, hi) = kind.bounds();
        if base == "*" {
            // croner's year field starts at year 1; the original counted steps from 1970.
            if kind == FieldKind::Year {
                return Ok(format!("{lo}-{hi}/{step_value}"));
            }
            return Ok(format!("*/{step_value}"));
        }
        let (a, b) = match base.split_once('-') {
            Some((a, b)) => range(kind, a, b)?,
            // The original accepted `a/n` as "from a to the end, every n".
            None => (
                kind.value(base)?,
                if kind == FieldKind::Dow { 6 } else { hi },
            ),
        };
        return Ok(format!("{a}-{b}/{step_value}"));
    }
    if let Some((a, b)) = item.split_once('-') {
        let (a, b) = range(kind, a, b)?;
        return Ok(format!("{a}-{b}"));
    }
    Ok(kind.value(item)?.to_string())
}

fn range(kind: FieldKind, a: &str, b: &str) -> Result<(u32, u32), FieldProblem> {
    let start = kind.value(a)?;
    let mut end = kind.value(b)?;
    // `fri-sun` and `5-0` mean Friday to Sunday.
    if kind == FieldKind::Dow && end == 0 && start > 0 {
        end = 7;
    }
    if start > end {
        return Err(FieldProblem::Backwards {
            a: a.to_string(),
            b: b.to_string(),
        });
    }
    Ok((start, end))
}

/// `L`, `LW`, `15W` in dom; `5L`, `L5`, `friL`, `5#2` in dow. `Ok(None)` when the item is
/// none of these (so a month name containing `l`, like `jul`, is parsed as a value).
fn special_day(kind: FieldKind, lower: &str) -> Result<Option<String>, FieldProblem> {
    match kind {
        FieldKind::Dom => {
            if lower == "l" {
                return Ok(Some("L".to_string()));
            }
            if lower == "lw" {
                return Ok(Some("LW".to_string()));
            }
            if let Some(day) = lower.strip_suffix('w') {
                let day = kind.value(day)?;
                return Ok(Some(format!("{day}W")));
            }
            Err(FieldProblem::DomSpecial {
                item: lower.to_string(),
            })
        }
        FieldKind::Dow => {
            if let Some((day, nth)) = lower.split_once('#') {
                let day = kind.value(day)? % 7;
                return match nth.parse::<u32>() {
                    Ok(n @ 1..=5) => Ok(Some(format!("{day}#{n}"))),
                    _ => Err(FieldProblem::Occurrence {
                        nth: nth.to_string(),
                    }),
                };
            }
            let day = lower
                .strip_suffix('l')
                .filter(|d| !d.is_empty())
                .or_else(|| lower.strip_prefix('l').filter(|d| !d.is_empty()));
            match day {
                Some(day) => Ok(Some(format!("{}L", kind.value(day)? % 7))),
                None if lower == "l" => Err(FieldProblem::LoneLast),
                None => Ok(None),
            }
        }
        FieldKind::Mon => Ok(None),
        _ => Err(FieldProblem::SpecialElsewhere {
            item: lower.to_string(),
        }),
    }
}
