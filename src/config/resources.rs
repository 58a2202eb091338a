//! Resource limits of a job's command on its target (`nice`, `ionice`, `memory_max`,
//! `cpu_quota`, `tasks_max`), as the job file states them (`limits.rs` reads them) and as
//! `welcome` carries them to the wrapper (`crate::wire::limits`; the wrapper applies them:
//! `crate::wrapper::limits`).
//!
//! Every field is always serialized (the spec also crosses the internal links in
//! bincode, which has no optional fields); a wrapper older than limits ignores the whole
//! object, which is why the server sends a job with limits only to a wrapper that
//! advertises `limits`.

use serde::{Deserialize, Serialize};

/// The I/O scheduling class of `ionice` (as ioprio_set(2) and ionice(1) name them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IoClass {
    Realtime,
    BestEffort,
    Idle,
}

/// `ionice`: a class and, for realtime and best-effort, a level 0 (first) to 7 (last).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct IoNice {
    pub class: IoClass,
    pub level: u8,
}

impl IoNice {
    /// Reads `idle`, `best-effort`, `best-effort:7`, `realtime:0` or a bare level 0–7
    /// (best-effort at that level).
    pub fn parse(text: &str) -> Result<IoNice, String> {
        let text = text.trim();
        let (class, level) = match text.split_once(':') {
            Some((class, level)) => (class.trim(), Some(level.trim())),
            None if text.bytes().all(|b| b.is_ascii_digit()) && !text.is_empty() => {
                ("best-effort", Some(text))
            }
            None => (text, None),
        };
        let class = match class {
            "realtime" | "rt" => IoClass::Realtime,
            "best-effort" | "be" => IoClass::BestEffort,
            "idle" => IoClass::Idle,
            other => {
                return Err(format!(
                    "`ionice`: unknown class `{other}` (idle, best-effort[:LEVEL], \
                     realtime[:LEVEL] or a level 0-7)"
                ));
            }
        };
        let level = match (class, level) {
            (IoClass::Idle, Some(_)) => {
                return Err("`ionice`: the idle class takes no level".to_string());
            }
            (IoClass::Idle, None) => 0,
            (_, None) => 4,
            (_, Some(l)) => match l.parse::<u8>() {
                Ok(n) if n <= 7 => n,
                _ => return Err(format!("`ionice`: level `{l}` is not 0-7")),
            },
        };
        Ok(IoNice { class, level })
    }

    /// The value ioprio_set(2) takes: class << 13 | level (0 for idle, which has none).
    pub fn ioprio(self) -> i32 {
        let class = match self.class {
            IoClass::Realtime => 1,
            IoClass::BestEffort => 2,
            IoClass::Idle => 3,
        };
        (class << 13) | i32::from(self.level)
    }
}

impl std::fmt::Display for IoNice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.class {
            IoClass::Idle => f.write_str("idle"),
            IoClass::BestEffort => write!(f, "best-effort:{}", self.level),
            IoClass::Realtime => write!(f, "realtime:{}", self.level),
        }
    }
}

/// A job's limits; `None` leaves that resource as the target gives it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Scheduling priority, -20 (first) to 19 (last).
    pub nice: Option<i32>,
    pub ionice: Option<IoNice>,
    /// Bytes of memory the command's processes may use together (killed beyond).
    pub memory_max: Option<u64>,
    /// CPU time in percent of one CPU (`200` is two CPUs' worth).
    pub cpu_quota: Option<u32>,
    /// How many processes and threads the command may have at once.
    pub tasks_max: Option<u64>,
}

impl Limits {
    pub fn is_empty(&self) -> bool {
        *self == Limits::default()
    }

    /// Whether a limit needs a control group (or its setrlimit stand-in).
    pub fn needs_group(&self) -> bool {
        self.memory_max.is_some() || self.cpu_quota.is_some() || self.tasks_max.is_some()
    }
}

/// `512M` style sizes: a byte count with an optional K, M, G or T suffix (powers of 1024,
/// as systemd reads `MemoryMax=`).
pub(crate) fn parse_bytes(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => text.split_at(i),
        None => (text, ""),
    };
    let shift = match unit.trim() {
        "" => 0,
        "K" | "k" | "KiB" => 10,
        "M" | "m" | "MiB" => 20,
        "G" | "g" | "GiB" => 30,
        "T" | "t" | "TiB" => 40,
        other => return Err(format!("unknown unit `{other}` (K, M, G or T)")),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("`{text}` is not a size such as 512M"))?;
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("`{text}` is too large"))
}

/// A byte count as the largest whole unit that divides it (`512 MiB`, `1536 KiB`).
pub(crate) fn show_bytes(n: u64) -> String {
    for (shift, unit) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if n >= 1 << shift && n.is_multiple_of(1 << shift) {
            return format!("{} {unit}", n >> shift);
        }
    }
    format!("{n} bytes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ionice_forms() {
        let be = |level| IoNice {
            class: IoClass::BestEffort,
            level,
        };
        assert_eq!(IoNice::parse("best-effort:7"), Ok(be(7)));
        assert_eq!(IoNice::parse("be"), Ok(be(4)));
        assert_eq!(IoNice::parse("3"), Ok(be(3)));
        assert_eq!(IoNice::parse("idle").map(|i| i.ioprio()), Ok(3 << 13));
        assert_eq!(IoNice::parse("realtime:0").map(|i| i.ioprio()), Ok(1 << 13));
        assert!(IoNice::parse("idle:3").unwrap_err().contains("no level"));
        assert!(
            IoNice::parse("best-effort:8")
                .unwrap_err()
                .contains("not 0-7")
        );
        assert!(
            IoNice::parse("fast")
                .unwrap_err()
                .contains("unknown class `fast`")
        );
        assert_eq!(be(7).to_string(), "best-effort:7");
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_bytes("512M"), Ok(512 << 20));
        assert_eq!(parse_bytes("1G"), Ok(1 << 30));
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert_eq!(parse_bytes(" 2 GiB"), Ok(2 << 30));
        assert!(parse_bytes("12X").unwrap_err().contains("unknown unit"));
        assert!(parse_bytes("M").is_err());
        assert!(
            parse_bytes("99999999999T")
                .unwrap_err()
                .contains("too large")
        );
        assert_eq!(show_bytes(512 << 20), "512 MiB");
        assert_eq!(show_bytes(1536 << 10), "1536 KiB");
        assert_eq!(show_bytes(1000), "1000 bytes");
    }

    #[test]
    fn limits_cross_json_and_bincode_whole() {
        let l = Limits {
            nice: Some(10),
            ionice: Some(IoNice {
                class: IoClass::Idle,
                level: 0,
            }),
            memory_max: Some(64 << 20),
            cpu_quota: Some(50),
            tasks_max: None,
        };
        let json = serde_json::to_string(&l).unwrap();
        assert!(json.contains(r#""class":"idle""#), "{json}");
        assert_eq!(serde_json::from_str::<Limits>(&json).unwrap(), l);
        let bin = bincode::serialize(&l).unwrap();
        assert_eq!(bincode::deserialize::<Limits>(&bin).unwrap(), l);
        assert!(Limits::default().is_empty() && !l.is_empty() && l.needs_group());
    }
}
