//! Every tunable of the policies in one key/value registry.
//!
//! One table serves the three ways of changing a setting — the command line
//! (`-o key=value`), the config file (TOML, one `key = value` per setting) and
//! run-time changes (`terrace set MOUNTPOINT KEY VALUE`) — so a key means the
//! same thing and accepts the same values everywhere, and the help text lives
//! next to the parser. Values are text in [`Settings::set`] and
//! [`Settings::get`] (sizes like `1M`, durations like `30s`), and `get` returns
//! text that `set` accepts back. In a config file a size or duration may be a
//! plain integer (bytes, ns) or such a string.
//!
//! Settings are values; the components they tune (predictor parameters, the
//! placement policy object) are built from them with [`Settings::sync_params`],
//! [`Settings::size_params`] and [`Settings::placement`].

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};

use crate::placement::{placement_policy, placement_policy_names, PlacementPolicy};
use crate::size_predictor::SizeParams;
use crate::sync_predictor::SyncParams;

/// The policies' tunables.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// Synchronicity predictor: an interval between `fsync`s shorter than this
    /// (bytes) makes a file synchronous.
    #[serde(deserialize_with = "de_size")]
    pub sync_threshold_bytes: u64,
    /// Synchronicity predictor: quiet time after which a file is asynchronous
    /// again (ns).
    #[serde(deserialize_with = "de_duration")]
    pub sync_idle_reset_ns: u64,
    /// Write-size predictor: a counter larger than this is "large".
    pub size_counter_threshold: u8,
    /// Write-size predictor: writes shorter than this many blocks are small.
    pub size_min_write_blocks: u64,
    /// Name of the placement policy (see
    /// [`placement_policy_names`]).
    pub placement_policy: String,
    /// Bound of the DRAM page cache for block-tier data (bytes).
    #[serde(deserialize_with = "de_size")]
    pub dram_cache_bytes: u64,
    /// Dirty data older than this is written back even when the cache is not
    /// under pressure (ns).
    #[serde(deserialize_with = "de_duration")]
    pub writeback_age_ns: u64,
    /// Write-back starts when dirty data passes this percentage of the cache.
    pub writeback_dirty_percent: u8,
    /// Largest read from a block tier into the cache (bytes): a miss reads the
    /// rest of the write entry it falls in, up to this much.
    #[serde(deserialize_with = "de_size")]
    pub max_read_unit_bytes: u64,
}

impl Default for Settings {
    fn default() -> Self {
        let sync = SyncParams::default();
        let size = SizeParams::default();
        Settings {
            sync_threshold_bytes: sync.threshold_bytes,
            sync_idle_reset_ns: sync.idle_reset_ns,
            size_counter_threshold: size.threshold,
            size_min_write_blocks: size.min_write_blocks,
            placement_policy: placement_policy_names()[0].to_string(),
            dram_cache_bytes: 256 << 20,
            writeback_age_ns: 5_000_000_000,
            writeback_dirty_percent: 25,
            max_read_unit_bytes: 1 << 20,
        }
    }
}

const KEYS: &[(&str, &str)] = &[
    (
        "sync_threshold_bytes",
        "size; fewer bytes than this between two fsyncs make a file synchronous, its small \
         writes stay on PM (default 1M, the authors' code; the paper used 4M)",
    ),
    (
        "sync_idle_reset_ns",
        "duration; a file quiet this long is predicted asynchronous again (default 30s)",
    ),
    (
        "size_counter_threshold",
        "0-255; a write entry counter larger than this marks rewrites of a range as large \
         and stable, sent to a block tier when asynchronous (default 4, the paper's)",
    ),
    (
        "size_min_write_blocks",
        "blocks; shorter writes are small and reset the counter (default 4, the slides'; \
         0 = no size check)",
    ),
    (
        "placement_policy",
        "where new writes go: ziggurat (sync or small to PM, large async to disk), \
         pm-only, block-first (default ziggurat)",
    ),
    (
        "dram_cache_bytes",
        "size; bound of the DRAM page cache in front of the block tiers (default 256M; \
         `terrace mount --dram-cache` sets it at mount; lowering it at run time writes back \
         and evicts down to the new bound)",
    ),
    (
        "writeback_age_ns",
        "duration; dirty cached data older than this is written back (default 5s)",
    ),
    (
        "writeback_dirty_percent",
        "1-100; write-back starts when dirty data passes this share of the cache (default 25)",
    ),
    (
        "max_read_unit_bytes",
        "size; a cache miss reads the rest of the write entry it falls in, up to this much \
         (default 1M)",
    ),
];

impl Settings {
    /// Every key with a one-line help text, in a stable order.
    pub fn keys() -> &'static [(&'static str, &'static str)] {
        KEYS
    }

    /// Sets `key` from its text form. On error nothing changes and the message
    /// names the key and says what is accepted.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        let bad = |why: String| format!("bad value {value:?} for {key}: {why}");
        match key {
            "sync_threshold_bytes" => self.sync_threshold_bytes = parse_size(value).map_err(bad)?,
            "sync_idle_reset_ns" => self.sync_idle_reset_ns = parse_duration(value).map_err(bad)?,
            "size_counter_threshold" => {
                self.size_counter_threshold = value
                    .trim()
                    .parse()
                    .map_err(|_| bad("expected a whole number from 0 to 255".into()))?
            }
            "size_min_write_blocks" => {
                self.size_min_write_blocks = value
                    .trim()
                    .parse()
                    .map_err(|_| bad("expected a whole number of blocks".into()))?
            }
            "placement_policy" => {
                let name = value.trim();
                if placement_policy(name).is_none() {
                    return Err(bad(format!(
                        "no such policy; known: {}",
                        placement_policy_names().join(", ")
                    )));
                }
                self.placement_policy = name.to_string();
            }
            "dram_cache_bytes" => {
                let v = parse_size(value).map_err(bad)?;
                if v < 1 << 20 {
                    return Err(bad("the DRAM cache needs at least 1M".into()));
                }
                self.dram_cache_bytes = v;
            }
            "writeback_age_ns" => self.writeback_age_ns = parse_duration(value).map_err(bad)?,
            "writeback_dirty_percent" => {
                let v: u8 = value
                    .trim()
                    .parse()
                    .map_err(|_| bad("expected a whole number from 1 to 100".into()))?;
                if !(1..=100).contains(&v) {
                    return Err(bad("expected a whole number from 1 to 100".into()));
                }
                self.writeback_dirty_percent = v;
            }
            "max_read_unit_bytes" => {
                let v = parse_size(value).map_err(bad)?;
                if !(4096..=64 << 20).contains(&v) {
                    return Err(bad("expected a size from 4K to 64M".into()));
                }
                self.max_read_unit_bytes = v;
            }
            _ => return Err(unknown_key(key)),
        }
        Ok(())
    }

    /// The text form of `key`'s value (accepted back by [`set`](Self::set)), or
    /// `None` for an unknown key.
    pub fn get(&self, key: &str) -> Option<String> {
        Some(match key {
            "sync_threshold_bytes" => format_size(self.sync_threshold_bytes),
            "sync_idle_reset_ns" => format_duration(self.sync_idle_reset_ns),
            "size_counter_threshold" => self.size_counter_threshold.to_string(),
            "size_min_write_blocks" => self.size_min_write_blocks.to_string(),
            "placement_policy" => self.placement_policy.clone(),
            "dram_cache_bytes" => format_size(self.dram_cache_bytes),
            "writeback_age_ns" => format_duration(self.writeback_age_ns),
            "writeback_dirty_percent" => self.writeback_dirty_percent.to_string(),
            "max_read_unit_bytes" => format_size(self.max_read_unit_bytes),
            _ => return None,
        })
    }

    /// The synchronicity predictor's parameters.
    pub fn sync_params(&self) -> SyncParams {
        SyncParams {
            threshold_bytes: self.sync_threshold_bytes,
            idle_reset_ns: self.sync_idle_reset_ns,
        }
    }

    /// The write-size predictor's parameters.
    pub fn size_params(&self) -> SizeParams {
        SizeParams {
            threshold: self.size_counter_threshold,
            min_write_blocks: self.size_min_write_blocks,
        }
    }

    /// The placement policy named by `placement_policy`, or an error if the
    /// name is unknown (possible after deserializing a config file).
    pub fn placement(&self) -> Result<Box<dyn PlacementPolicy + Send + Sync>, String> {
        placement_policy(&self.placement_policy).ok_or_else(|| {
            format!(
                "unknown placement_policy {:?}; known: {}",
                self.placement_policy,
                placement_policy_names().join(", ")
            )
        })
    }
}

fn unknown_key(key: &str) -> String {
    let names: Vec<&str> = KEYS.iter().map(|(k, _)| *k).collect();
    format!(
        "unknown setting {key:?}; known settings: {}",
        names.join(", ")
    )
}

/// Parses a size: a whole number with an optional binary unit `K`, `M`, `G`,
/// `T` (also `KiB`, `KB`, …; all powers of 1024; case-insensitive). No unit
/// means bytes.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let (n, unit) = split_number(s, "a size such as 4096, 64K or 1M")?;
    let shift = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(format!("unknown size unit {unit:?} (use K, M, G or T)")),
    };
    n.checked_mul(1 << shift)
        .ok_or_else(|| "size is too large".to_string())
}

/// Parses a duration into ns: a whole number with a unit `ns`, `us`, `ms`,
/// `s`, `m` (minutes) or `h`. No unit means seconds.
pub fn parse_duration(s: &str) -> Result<u64, String> {
    let (n, unit) = split_number(s, "a duration such as 30s, 500ms or 2m")?;
    let scale: u64 = match unit.to_ascii_lowercase().as_str() {
        "ns" => 1,
        "us" | "µs" => 1_000,
        "ms" => 1_000_000,
        "" | "s" | "sec" => 1_000_000_000,
        "m" | "min" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => {
            return Err(format!(
                "unknown duration unit {unit:?} (use ns, us, ms, s, m or h)"
            ))
        }
    };
    n.checked_mul(scale)
        .ok_or_else(|| "duration is too long".to_string())
}

/// Splits `"64K"` into `(64, "K")`.
fn split_number<'a>(s: &'a str, example: &str) -> Result<(u64, &'a str), String> {
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    if digits == 0 {
        return Err(format!("expected {example}"));
    }
    let n = t[..digits]
        .parse()
        .map_err(|_| "number is too large".to_string())?;
    Ok((n, t[digits..].trim()))
}

/// Formats a size in the largest binary unit that divides it exactly (`1M`,
/// `1536K`, `100`).
pub fn format_size(bytes: u64) -> String {
    for (shift, unit) in [(40, "T"), (30, "G"), (20, "M"), (10, "K")] {
        if bytes != 0 && bytes % (1u64 << shift) == 0 {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// Formats ns in the largest unit that divides them exactly (`30s`, `1500ms`).
pub fn format_duration(ns: u64) -> String {
    for (scale, unit) in [
        (3_600_000_000_000, "h"),
        (60_000_000_000, "m"),
        (1_000_000_000, "s"),
        (1_000_000, "ms"),
        (1_000, "us"),
    ] {
        if ns != 0 && ns % scale == 0 {
            return format!("{}{unit}", ns / scale);
        }
    }
    format!("{ns}ns")
}

/// A config-file value that is an integer or a string to parse: a `noun` such
/// as "size", with an `example` of the text form.
fn de_number_or_text<'de, D: Deserializer<'de>>(
    d: D,
    noun: &'static str,
    example: &'static str,
    parse: fn(&str) -> Result<u64, String>,
) -> Result<u64, D::Error> {
    struct V {
        noun: &'static str,
        example: &'static str,
        parse: fn(&str) -> Result<u64, String>,
    }
    impl serde::de::Visitor<'_> for V {
        type Value = u64;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(
                f,
                "a {} (an integer, or text such as {:?})",
                self.noun, self.example
            )
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<u64, E> {
            Ok(v)
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<u64, E> {
            u64::try_from(v).map_err(|_| E::custom(format!("a {} must not be negative", self.noun)))
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<u64, E> {
            (self.parse)(v).map_err(|e| E::custom(format!("bad {} {v:?}: {e}", self.noun)))
        }
    }
    d.deserialize_any(V {
        noun,
        example,
        parse,
    })
}

fn de_size<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    de_number_or_text(d, "size", "1M", parse_size)
}

fn de_duration<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    de_number_or_text(d, "duration", "30s", parse_duration)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::de::value::{Error as DeError, MapDeserializer};

    #[test]
    fn defaults_match_the_predictors_defaults() {
        let s = Settings::default();
        assert_eq!(s.sync_params(), SyncParams::default());
        assert_eq!(s.size_params(), SizeParams::default());
        assert_eq!(s.placement().unwrap().name(), "ziggurat");
        assert_eq!(s.get("sync_threshold_bytes").as_deref(), Some("1M"));
        assert_eq!(s.get("sync_idle_reset_ns").as_deref(), Some("30s"));
    }

    #[test]
    fn every_key_gets_and_sets_back_its_own_value() {
        let mut s = Settings::default();
        for (key, help) in Settings::keys() {
            assert!(!help.is_empty());
            let v = s.get(key).unwrap();
            s.set(key, &v).unwrap();
            assert_eq!(s, Settings::default(), "{key}");
        }
    }

    #[test]
    fn set_parses_sizes_and_durations() {
        let mut s = Settings::default();
        s.set("sync_threshold_bytes", "4M").unwrap();
        assert_eq!(s.sync_threshold_bytes, 4 << 20);
        s.set("sync_threshold_bytes", " 64 KiB ").unwrap();
        assert_eq!(s.sync_threshold_bytes, 64 << 10);
        s.set("sync_idle_reset_ns", "500ms").unwrap();
        assert_eq!(s.sync_idle_reset_ns, 500_000_000);
        assert_eq!(s.get("sync_idle_reset_ns").as_deref(), Some("500ms"));
        s.set("sync_idle_reset_ns", "2m").unwrap();
        assert_eq!(s.sync_idle_reset_ns, 120_000_000_000);
        s.set("sync_idle_reset_ns", "10").unwrap();
        assert_eq!(s.sync_idle_reset_ns, 10_000_000_000);
        s.set("size_counter_threshold", "8").unwrap();
        s.set("placement_policy", "block-first").unwrap();
        assert_eq!(s.placement().unwrap().name(), "block-first");
    }

    #[test]
    fn unknown_key_error_lists_known_keys() {
        let mut s = Settings::default();
        let e = s.set("sync_treshold", "1M").unwrap_err();
        assert!(e.contains("unknown setting \"sync_treshold\""), "{e}");
        assert!(e.contains("sync_threshold_bytes"), "{e}");
        assert_eq!(s.get("sync_treshold"), None);
    }

    #[test]
    fn bad_values_are_refused_with_the_reason_and_change_nothing() {
        let mut s = Settings::default();
        let cases = [
            ("sync_threshold_bytes", "lots", "expected a size"),
            ("sync_threshold_bytes", "1X", "unknown size unit"),
            ("sync_threshold_bytes", "99999999999T", "too large"),
            ("sync_idle_reset_ns", "30 days", "unknown duration unit"),
            ("size_counter_threshold", "256", "0 to 255"),
            ("size_min_write_blocks", "-1", "whole number"),
            (
                "placement_policy",
                "fastest",
                "known: ziggurat, pm-only, block-first",
            ),
        ];
        for (key, value, why) in cases {
            let e = s.set(key, value).unwrap_err();
            assert!(
                e.starts_with(&format!("bad value {value:?} for {key}: ")),
                "{e}"
            );
            assert!(e.contains(why), "{e}");
        }
        assert_eq!(s, Settings::default());
    }

    #[test]
    fn config_file_accepts_numbers_or_text_and_defaults_the_rest() {
        let text = MapDeserializer::<_, DeError>::new(
            [
                ("sync_threshold_bytes", "4M"),
                ("sync_idle_reset_ns", "1m"),
                ("placement_policy", "pm-only"),
            ]
            .into_iter(),
        );
        let s = Settings::deserialize(text).unwrap();
        assert_eq!(s.sync_threshold_bytes, 4 << 20);
        assert_eq!(s.sync_idle_reset_ns, 60_000_000_000);
        assert_eq!(s.placement_policy, "pm-only");
        assert_eq!(s.size_counter_threshold, 4);

        let numbers = MapDeserializer::<_, DeError>::new(
            [
                ("sync_threshold_bytes", 4096u64),
                ("size_min_write_blocks", 8),
            ]
            .into_iter(),
        );
        let s = Settings::deserialize(numbers).unwrap();
        assert_eq!(s.sync_threshold_bytes, 4096);
        assert_eq!(s.size_min_write_blocks, 8);
    }

    #[test]
    fn config_file_refuses_unknown_keys_and_bad_text() {
        let unknown = MapDeserializer::<_, DeError>::new([("sync_treshold", "1M")].into_iter());
        assert!(Settings::deserialize(unknown).is_err());
        let bad = MapDeserializer::<_, DeError>::new([("sync_idle_reset_ns", "soon")].into_iter());
        let e = Settings::deserialize(bad).unwrap_err().to_string();
        assert!(e.contains("bad duration \"soon\""), "{e}");
    }

    #[test]
    fn formats_use_the_largest_exact_unit() {
        assert_eq!(format_size(0), "0");
        assert_eq!(format_size(100), "100");
        assert_eq!(format_size(1536 << 10), "1536K");
        assert_eq!(format_size(4 << 30), "4G");
        assert_eq!(format_duration(0), "0ns");
        assert_eq!(format_duration(7), "7ns");
        assert_eq!(format_duration(1_500_000_000), "1500ms");
        assert_eq!(format_duration(7_200_000_000_000), "2h");
    }
}
