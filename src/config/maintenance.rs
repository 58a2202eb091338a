//! `saltpeter_maintenance`: the global switch, machines left out of runs and calendar
//! windows, merged from every file that has the section.

use std::collections::BTreeSet;

use super::diagnostic::Severity;
use super::values::Section;
use super::values::{self, Sink, unknown_key_message};
use super::yaml::NodeKind;

/// Maintenance settings: `global` stops new runs everywhere; `machines` are left out of runs;
/// `windows` are maintenance windows on a calendar (`windows.rs`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Maintenance {
    pub global: bool,
    pub machines: BTreeSet<String>,
    pub windows: Vec<super::windows::Window>,
}

/// Merges the `saltpeter_maintenance` sections: `global` if any file says so, the union of
/// `machines`.
pub(crate) fn merge_maintenance(
    sections: &[Section<'_>],
    out: &mut Vec<super::diagnostic::Diagnostic>,
) -> Maintenance {
    let mut maintenance = Maintenance::default();
    for section in sections {
        let mut sink = Sink {
            file: section.file,
            out,
        };
        let NodeKind::Map(pairs) = &section.node.kind else {
            if !section.node.is_null() {
                sink.push(Severity::Error, section.node.pos, None, format!("`saltpeter_maintenance` must be a mapping with `global`, `machines` and `windows`, found {}", section.node.describe()));
            }
            continue;
        };
        for (key, value) in pairs {
            let result = match key.scalar() {
                Some("global") if value.is_null() => Ok(()),
                Some("global") => values::boolean(value).map(|g| maintenance.global |= g),
                Some("machines") => {
                    values::string_list(value).map(|m| maintenance.machines.extend(m))
                }
                Some("windows") => {
                    let found = super::windows::read_windows(value, section.file, sink.out);
                    maintenance.windows.extend(found);
                    Ok(())
                }
                Some(other) => {
                    let message = unknown_key_message(
                        "saltpeter_maintenance key",
                        other,
                        &["global", "machines", "windows"],
                    );
                    sink.push(Severity::Warning, key.pos, None, message);
                    Ok(())
                }
                None => Ok(()),
            };
            if let Err(message) = result {
                sink.push(
                    Severity::Error,
                    value.pos,
                    None,
                    format!("`saltpeter_maintenance`: {message}"),
                );
            }
        }
    }
    maintenance
}
