//! A key's [`Kind`] — how its text is parsed, which range it accepts and how
//! its value is written back as text — and the typed [`Value`] it holds.
//!
//! Invariant: [`Kind::format`] returns text that [`Kind::parse`] accepts back
//! with the same value.

use super::units::{format_duration, format_size, parse_duration, parse_size, parse_threshold};
use crate::migration::{ThresholdMode, BLOCK_BYTES};

/// A setting's value, typed by its key's [`Kind`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// A size, duration (ns) or whole number.
    Num(u64),
    /// On or off.
    Switch(bool),
    /// A name from a fixed list.
    Name(String),
    /// A migration threshold.
    Threshold(ThresholdMode),
}

impl Value {
    pub(super) fn num(&self) -> u64 {
        match self {
            Value::Num(n) => *n,
            _ => unreachable!("a numeric key stores numbers only"),
        }
    }
    pub(super) fn switch(&self) -> bool {
        match self {
            Value::Switch(b) => *b,
            _ => unreachable!("a switch stores booleans only"),
        }
    }
    pub(super) fn name(&self) -> String {
        match self {
            Value::Name(n) => n.clone(),
            _ => unreachable!("a name key stores names only"),
        }
    }
    pub(super) fn threshold(&self) -> ThresholdMode {
        match self {
            Value::Threshold(t) => *t,
            _ => unreachable!("a threshold key stores thresholds only"),
        }
    }
}

/// The type of a key: how its text is parsed, what range it accepts and how
/// its value is written back as text.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// A size in bytes (`4096`, `64K`, `1M`; binary units), from `min` to
    /// `max`, in whole 4K blocks when `blocks`.
    Size {
        /// Smallest value.
        min: u64,
        /// Largest value.
        max: u64,
        /// Must be a multiple of 4K.
        blocks: bool,
    },
    /// A duration in ns (`30s`, `500ms`, `2m`; a bare number is seconds,
    /// wherever it comes from; a config file's bare integer other than 0 is
    /// refused: [`Settings::config_text`](super::Settings::config_text)), at
    /// least `min`.
    Duration {
        /// Shortest value (ns).
        min: u64,
    },
    /// A whole number from `min` to `max`; with `percent` a trailing `%` is
    /// accepted.
    Number {
        /// Smallest value.
        min: u64,
        /// Largest value.
        max: u64,
        /// A percentage (`50%` is accepted).
        percent: bool,
    },
    /// `on` or `off` (also true/false, yes/no, 1/0).
    Switch,
    /// One of a list of names (case-insensitive).
    Name {
        /// What a name names, for messages ("policy", "order").
        noun: &'static str,
        /// The accepted names.
        names: fn() -> &'static [&'static str],
    },
    /// `dynamic` or a whole percentage from 1 to 99.
    Threshold,
}

impl Kind {
    /// Parses and range-checks `text`.
    pub fn parse(&self, text: &str) -> Result<Value, String> {
        let t = text.trim();
        let v = match *self {
            Kind::Size { .. } => Value::Num(parse_size(t)?),
            Kind::Duration { .. } => Value::Num(parse_duration(t)?),
            Kind::Number { percent, .. } => {
                let t = if percent {
                    t.strip_suffix('%').unwrap_or(t).trim()
                } else {
                    t
                };
                Value::Num(t.parse().map_err(|_| self.expected())?)
            }
            Kind::Switch => Value::Switch(match t.to_ascii_lowercase().as_str() {
                "on" | "true" | "1" | "yes" => true,
                "off" | "false" | "0" | "no" => false,
                _ => return Err(self.expected()),
            }),
            Kind::Name { .. } => Value::Name(t.to_ascii_lowercase()),
            Kind::Threshold => Value::Threshold(parse_threshold(t)?),
        };
        self.check(&v)?;
        Ok(v)
    }

    /// Checks that a value is in this kind's range.
    pub fn check(&self, v: &Value) -> Result<(), String> {
        let ok = match (*self, v) {
            (Kind::Size { min, max, blocks }, Value::Num(n)) => {
                (min..=max).contains(n) && (!blocks || n % BLOCK_BYTES == 0)
            }
            (Kind::Duration { min }, Value::Num(n)) => *n >= min,
            (Kind::Number { min, max, .. }, Value::Num(n)) => (min..=max).contains(n),
            (Kind::Switch, Value::Switch(_)) => true,
            (Kind::Name { names, .. }, Value::Name(n)) => names().contains(&n.as_str()),
            (Kind::Threshold, Value::Threshold(t)) => match t {
                ThresholdMode::Dynamic => true,
                ThresholdMode::Static(p) => (1..=99).contains(p),
            },
            _ => false,
        };
        if ok {
            Ok(())
        } else {
            Err(self.expected())
        }
    }

    /// The text form of a value of this kind (accepted back by `parse`).
    pub fn format(&self, v: &Value) -> String {
        match (*self, v) {
            (Kind::Size { .. }, Value::Num(n)) => format_size(*n),
            (Kind::Duration { .. }, Value::Num(n)) => format_duration(*n),
            (_, Value::Num(n)) => n.to_string(),
            (_, Value::Switch(b)) => if *b { "on" } else { "off" }.to_string(),
            (_, Value::Name(n)) => n.clone(),
            (_, Value::Threshold(t)) => t.to_string(),
        }
    }

    /// What this kind accepts, for error messages.
    pub fn expected(&self) -> String {
        match *self {
            Kind::Size { min, max, blocks } => {
                let whole = if blocks {
                    format!(" in whole {} blocks", format_size(BLOCK_BYTES))
                } else {
                    String::new()
                };
                match (min, max) {
                    (0, u64::MAX) => format!("expected a size such as 4096, 64K or 1M{whole}"),
                    (min, u64::MAX) => {
                        format!("expected a size of at least {}{whole}", format_size(min))
                    }
                    (min, max) => format!(
                        "expected a size from {} to {}{whole}",
                        format_size(min),
                        format_size(max)
                    ),
                }
            }
            Kind::Duration { min: 0 } => "expected a duration such as 30s, 500ms or 2m".into(),
            Kind::Duration { min } => {
                format!("expected a duration of at least {}", format_duration(min))
            }
            Kind::Number {
                min: 0,
                max: u64::MAX,
                ..
            } => "expected a whole number".into(),
            Kind::Number { min, max, .. } => {
                format!("expected a whole number from {min} to {max}")
            }
            Kind::Switch => "expected on or off".into(),
            Kind::Name { noun, names } => {
                format!("no such {noun}; known: {}", names().join(", "))
            }
            Kind::Threshold => "expected dynamic or a whole number from 1 to 99".into(),
        }
    }
}
