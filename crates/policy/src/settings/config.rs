//! Settings from a config file (TOML or any serde format): a value as the
//! file holds it ([`ConfigValue`], turned into the key's text by
//! [`Settings::config_text`]), and [`Settings`] deserialized from a map of
//! key → value as [`Settings`]' `Serialize` writes it (the daemon's status:
//! a duration is an integer of ns there), the whole checked by
//! [`Settings::with`] — the same parsers, ranges and rules as the command
//! line.

use std::fmt;

use serde::{Deserialize, Deserializer};

use super::kind::Kind;
use super::typed::Settings;

/// A value as a config file holds it (TOML or any serde format).
#[derive(Debug, Clone, PartialEq)]
pub enum ConfigValue {
    /// An integer: bytes for a size, a plain number; refused for a
    /// duration unless 0 (see [`Settings::config_text`]).
    Int(i128),
    /// A boolean (switches).
    Bool(bool),
    /// Text, parsed like `-o` text (`"1M"`, `"30s"`, `"dynamic"`).
    Text(String),
    /// Anything else (a float, an array, a table): refused, with its type.
    Other(&'static str),
}

impl<'de> Deserialize<'de> for ConfigValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ConfigValue, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = ConfigValue;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "a setting's value (an integer, a boolean or text)")
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<ConfigValue, E> {
                Ok(ConfigValue::Bool(v))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<ConfigValue, E> {
                Ok(ConfigValue::Int(v.into()))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<ConfigValue, E> {
                Ok(ConfigValue::Int(v.into()))
            }
            fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<ConfigValue, E> {
                Ok(ConfigValue::Other("a fractional number"))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ConfigValue, E> {
                Ok(ConfigValue::Text(v.to_string()))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                _: A,
            ) -> Result<ConfigValue, A::Error> {
                Ok(ConfigValue::Other("a list"))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                _: A,
            ) -> Result<ConfigValue, A::Error> {
                Ok(ConfigValue::Other("a table"))
            }
        }
        d.deserialize_any(V)
    }
}

/// Settings as `Serialize` writes them (the status the daemon sends): a
/// map of key → value, each value checked by its key's parser and the whole
/// validated once ([`Settings::with`]). An integer is what the field holds:
/// bytes for a size, ns for a duration. A config file is not read this way
/// (`terrace mount --config` uses [`Settings::config_text`], which asks
/// for a duration's unit).
impl<'de> Deserialize<'de> for Settings {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Settings, D::Error> {
        let map: std::collections::BTreeMap<String, ConfigValue> =
            std::collections::BTreeMap::deserialize(d)?;
        let mut pairs = Vec::with_capacity(map.len());
        for (k, v) in &map {
            let duration =
                Settings::key(k).is_some_and(|k| matches!(k.kind, Kind::Duration { .. }));
            let text = match v {
                ConfigValue::Int(n) if duration && *n >= 0 => format!("{n}ns"),
                _ => Settings::config_text(k, v).map_err(serde::de::Error::custom)?,
            };
            pairs.push((k.clone(), text));
        }
        Settings::default()
            .with(&pairs)
            .map_err(serde::de::Error::custom)
    }
}
