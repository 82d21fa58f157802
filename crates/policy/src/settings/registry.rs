//! Reading and changing [`Settings`] through the table of [`KEYS`]: the
//! text form of a key's value (`get`), one key changed (`set`), a batch
//! applied (`with`), the two checking steps (`check_value` per value,
//! `validate` on the finished settings) and config-file values turned into
//! text (`config_text`).
//!
//! Invariant: whatever changes settings here leaves them valid — a change is
//! applied to a copy, the copy validated, then returned or swapped in.

use super::config::ConfigValue;
use super::keys::{Key, KEYS, RULES};
use super::kind::Kind;
use super::typed::Settings;

impl Settings {
    /// Every key with its one-line help text, in a stable order.
    pub fn keys() -> Vec<(&'static str, &'static str)> {
        KEYS.iter().map(|k| (k.name, k.help)).collect()
    }

    /// The declaration of `key`.
    pub fn key(key: &str) -> Option<&'static Key> {
        KEYS.iter().find(|k| k.name == key)
    }

    fn known(key: &str) -> Result<&'static Key, String> {
        Settings::key(key).ok_or_else(|| unknown_key(key))
    }

    /// Parses and range-checks one value on its own (no cross-key rule):
    /// `Ok` when [`with`](Self::with) would accept it for `key` — unless a
    /// rule tying it to other keys fails on the finished settings.
    pub fn check_value(key: &str, value: &str) -> Result<(), String> {
        let k = Settings::known(key)?;
        k.kind
            .parse(value)
            .map(|_| ())
            .map_err(|why| format!("bad value {value:?} for {key}: {why}"))
    }

    /// The text form of a config-file value for `key`, read by the same
    /// parser as `-o key=value` and `terrace set` ([`Kind::parse`]): text
    /// is as on the command line (`"30s"`; a bare number `"5"` is seconds
    /// for a duration, as there), an integer is that number written as text
    /// (bytes for a size), a boolean is a switch. A bare integer for a
    /// duration other than 0 is refused: it meant ns here until 2026-12-07
    /// while a bare number means seconds everywhere else, so it is asked
    /// for with its unit (`"5s"`, `"5000000000ns"`) rather than read either
    /// way silently.
    pub fn config_text(key: &str, value: &ConfigValue) -> Result<String, String> {
        let k = Settings::known(key)?;
        let text = match value {
            ConfigValue::Text(t) => t.clone(),
            ConfigValue::Bool(b) if matches!(k.kind, Kind::Switch) => {
                if *b { "on" } else { "off" }.to_string()
            }
            ConfigValue::Bool(b) => {
                return Err(format!("bad value {b} for {key}: {}", k.kind.expected()))
            }
            ConfigValue::Int(n) if *n < 0 => {
                return Err(format!("bad value {n} for {key}: must not be negative"))
            }
            ConfigValue::Int(n) if *n != 0 && matches!(k.kind, Kind::Duration { .. }) => {
                return Err(format!(
                    "bad value {n} for {key}: a duration in a config file needs its unit, \
                     e.g. \"{n}s\" or \"{n}ns\" (a bare number is seconds on the command \
                     line, but a bare integer here used to mean ns)"
                ))
            }
            ConfigValue::Int(n) => n.to_string(),
            ConfigValue::Other(what) => {
                return Err(format!(
                    "bad value for {key}: {what}; {}",
                    k.kind.expected()
                ))
            }
        };
        Settings::check_value(key, &text)?;
        Ok(text)
    }

    /// These settings with every `(key, text)` applied in order (a key given
    /// twice takes its last value), each parsed and range-checked by its key,
    /// then the result validated as a whole ([`validate`](Self::validate)).
    /// `self` is not changed; the first problem is the error.
    pub fn with<K: AsRef<str>, V: AsRef<str>>(&self, pairs: &[(K, V)]) -> Result<Settings, String> {
        let mut next = self.clone();
        for (key, value) in pairs {
            let (key, value) = (key.as_ref(), value.as_ref());
            let k = Settings::known(key)?;
            let v = k
                .kind
                .parse(value)
                .map_err(|why| format!("bad value {value:?} for {key}: {why}"))?;
            (k.put)(&mut next, v);
        }
        next.validate()?;
        Ok(next)
    }

    /// Checks finished settings: every value in its key's range, then every
    /// rule that ties keys together ([`RULES`]).
    pub fn validate(&self) -> Result<(), String> {
        for k in KEYS {
            let v = (k.get)(self);
            k.kind.check(&v).map_err(|why| {
                format!("bad value {:?} for {}: {why}", k.kind.format(&v), k.name)
            })?;
        }
        for r in RULES {
            (r.check)(self)?;
        }
        Ok(())
    }

    /// Sets `key` from its text form: applied to a copy, the copy validated
    /// as a whole, then swapped in. On error nothing changes and the message
    /// names the key and says what is accepted (or which rule the new value
    /// breaks).
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        Settings::check_value(key, value)?;
        let next = self
            .with(&[(key, value)])
            .map_err(|why| format!("bad value {value:?} for {key}: {why}"))?;
        *self = next;
        Ok(())
    }

    /// The text form of `key`'s value (accepted back by [`set`](Self::set)), or
    /// `None` for an unknown key.
    pub fn get(&self, key: &str) -> Option<String> {
        let k = Settings::key(key)?;
        Some(k.kind.format(&(k.get)(self)))
    }
}

fn unknown_key(key: &str) -> String {
    let names: Vec<&str> = KEYS.iter().map(|k| k.name).collect();
    format!(
        "unknown setting {key:?}; known settings: {}",
        names.join(", ")
    )
}
