//! Unit tests of the settings registry: the table, the parsers, the
//! checks and the config-file path.

use serde::de::value::{Error as DeError, MapDeserializer};
use serde::de::IntoDeserializer;
use serde::Deserialize;

use super::*;
use crate::cleaner::CleanerParams;
use crate::migration::{MigrationParams, ThresholdMode};
use crate::nvmfs::{FlushOrder, NvmfsParams};
use crate::object_cleaner::ObjectCleanParams;
use crate::size_predictor::SizeParams;
use crate::sync_predictor::SyncParams;

/// Settings read from `pairs` by `Settings`' `Deserialize` (how the
/// daemon's status is read back: an integer is the field's value, ns for a
/// duration), or the error's text.
fn from_config<'a, V>(pairs: impl IntoIterator<Item = (&'a str, V)>) -> Result<Settings, String>
where
    V: IntoDeserializer<'a, DeError>,
{
    Settings::deserialize(MapDeserializer::new(pairs.into_iter())).map_err(|e| e.to_string())
}

/// Asserts that setting each `(key, value)` is refused with an error that
/// names both and contains `why`, and that the refusals changed nothing.
fn assert_refused(cases: &[(&str, &str, &str)]) {
    let mut s = Settings::default();
    for &(key, value, why) in cases {
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
    assert_refused(&cases);
}

#[test]
fn config_file_accepts_numbers_or_text_and_defaults_the_rest() {
    let s = from_config([
        ("sync_threshold_bytes", "4M"),
        ("sync_idle_reset_ns", "1m"),
        ("placement_policy", "pm-only"),
    ])
    .unwrap();
    assert_eq!(s.sync_threshold_bytes, 4 << 20);
    assert_eq!(s.sync_idle_reset_ns, 60_000_000_000);
    assert_eq!(s.placement_policy, "pm-only");
    assert_eq!(s.size_counter_threshold, 4);

    let s = from_config([
        ("sync_threshold_bytes", 4096u64),
        ("size_min_write_blocks", 8),
    ])
    .unwrap();
    assert_eq!(s.sync_threshold_bytes, 4096);
    assert_eq!(s.size_min_write_blocks, 8);
}

#[test]
fn config_file_refuses_unknown_keys_and_bad_text() {
    assert!(from_config([("sync_treshold", "1M")]).is_err());
    let e = from_config([("sync_idle_reset_ns", "soon")]).unwrap_err();
    assert!(
        e.contains("bad value \"soon\" for sync_idle_reset_ns"),
        "{e}"
    );
}

#[test]
fn migration_defaults_match_the_policies_defaults() {
    let s = Settings::default();
    assert_eq!(s.migration_params(), MigrationParams::default());
    assert_eq!(s.nvmfs_params(), NvmfsParams::default());
    assert_eq!(s.cleaner_params(), CleanerParams::default());
    assert_eq!(s.object_clean_params(), ObjectCleanParams::default());
    assert_eq!(s.get("object_clean_live_percent").as_deref(), Some("50"));
    assert_eq!(s.get("object_clean_bytes_per_pass").as_deref(), Some("64M"));
    assert_eq!(s.get("object_clean_interval_ns").as_deref(), Some("5s"));
    assert_eq!(s.migration().unwrap().name(), "default");
    assert_eq!(s.get("migration_threshold").as_deref(), Some("dynamic"));
    assert_eq!(s.get("group_migration_bytes").as_deref(), Some("16M"));
    assert_eq!(s.get("nvmfs_extent_bytes").as_deref(), Some("512K"));
    assert_eq!(s.get("migration_age_ns").as_deref(), Some("30s"));
}

#[test]
fn migration_keys_set_their_params() {
    let mut s = Settings::default();
    s.set("migration_threshold", "70").unwrap();
    assert_eq!(s.migration_params().threshold, ThresholdMode::Static(70));
    s.set("migration_threshold", " 60% ").unwrap();
    assert_eq!(s.get("migration_threshold").as_deref(), Some("60"));
    s.set("migration_threshold", "Dynamic").unwrap();
    assert_eq!(s.migration_threshold, ThresholdMode::Dynamic);
    s.set("migration_policy", "nvmfs").unwrap();
    assert_eq!(s.migration().unwrap().name(), "nvmfs");
    s.set("group_migration_bytes", "128K").unwrap();
    assert_eq!(s.migration_params().group_blocks(), 32);
    s.set("migration_threads", "0").unwrap();
    assert_eq!(s.migration_params().threads_for(6), 6);
    s.set("nvmfs_dirty_high_percent", "90").unwrap();
    s.set("nvmfs_dirty_low_percent", "85").unwrap();
    assert_eq!(s.nvmfs_params().dirty_low_percent, 85);
    s.set("nvmfs_extent_bytes", "1M").unwrap();
    assert_eq!(s.nvmfs_params().extent_blocks(), 256);
    assert_eq!(s.nvmfs_params().order, FlushOrder::Frequency);
    s.set("nvmfs_flush_order", " lru").unwrap();
    assert_eq!(s.nvmfs_params().order, FlushOrder::Lru);
    assert_eq!(s.get("nvmfs_flush_order").as_deref(), Some("lru"));
    s.set("cleaner_free_percent", "0").unwrap();
    assert_eq!(s.cleaner_params().free_percent, 0);
    s.set("object_clean_live_percent", "75").unwrap();
    s.set("object_clean_bytes_per_pass", "16M").unwrap();
    s.set("object_clean_interval_ns", "0").unwrap();
    assert_eq!(
        s.object_clean_params(),
        ObjectCleanParams {
            live_percent: 75,
            bytes_per_pass: 16 << 20,
            interval_ns: 0
        }
    );
    assert!(s.set("object_clean_live_percent", "101").is_err());
}

#[test]
fn bad_migration_values_are_refused_with_the_reason() {
    let cases = [
        (
            "migration_policy",
            "fastest",
            "known: default, ziggurat, nvmfs",
        ),
        (
            "migration_threshold",
            "100",
            "dynamic or a whole number from 1 to 99",
        ),
        (
            "migration_threshold",
            "0",
            "dynamic or a whole number from 1 to 99",
        ),
        ("migration_threshold", "static", "dynamic or a whole number"),
        ("migration_forced_percent", "49", "from 50 to 100"),
        ("group_migration_bytes", "6K", "in whole 4K blocks"),
        ("group_migration_bytes", "2G", "from 4K to 1G"),
        ("reverse_read_ratio", "-1", "whole number"),
        ("reverse_pm_low_percent", "100", "from 1 to 99"),
        ("migration_threads", "1025", "from 0 to 1024"),
        (
            "nvmfs_dirty_high_percent",
            "50",
            "nvmfs_dirty_low_percent (50) must be below nvmfs_dirty_high_percent (50)",
        ),
        (
            "nvmfs_dirty_low_percent",
            "80",
            "nvmfs_dirty_low_percent (80) must be below nvmfs_dirty_high_percent (80)",
        ),
        ("nvmfs_extent_bytes", "128M", "from 4K to 64M"),
        ("nvmfs_window_ns", "10us", "at least 1ms"),
        ("nvmfs_flush_order", "mru", "known: frequency, lru"),
        ("cleaner_free_percent", "101", "from 0 to 100"),
        ("cleaner_fragmentation_percent", "0", "from 1 to 100"),
    ];
    assert_refused(&cases);
}

#[test]
fn config_file_threshold_is_dynamic_or_a_number() {
    let s = from_config([("migration_threshold", "dynamic")]).unwrap();
    assert_eq!(s.migration_threshold, ThresholdMode::Dynamic);
    let s = from_config([("migration_threshold", 75u64)]).unwrap();
    assert_eq!(s.migration_threshold, ThresholdMode::Static(75));
    let e = from_config([("migration_threshold", 150u64)]).unwrap_err();
    assert!(
        e.contains("bad value \"150\" for migration_threshold: expected dynamic"),
        "{e}"
    );
    let s = from_config([("group_migration_bytes", "1M"), ("nvmfs_window_ns", "5s")]).unwrap();
    assert_eq!(s.group_migration_bytes, 1 << 20);
    assert_eq!(s.nvmfs_window_ns, 5_000_000_000);
}

fn low_high(first: (&str, &str), second: (&str, &str)) -> Result<Settings, String> {
    Settings::default().with(&[first, second])
}

#[test]
fn cross_key_rules_see_the_finished_settings_whatever_the_order() {
    // Low 30 / high 40 is valid, though each is not against the other's
    // default (low 50, high 80).
    let low = ("nvmfs_dirty_low_percent", "30");
    let high = ("nvmfs_dirty_high_percent", "40");
    let a = low_high(low, high).unwrap();
    let b = low_high(high, low).unwrap();
    assert_eq!(a, b);
    assert_eq!(
        (a.nvmfs_dirty_low_percent, a.nvmfs_dirty_high_percent),
        (30, 40)
    );
    // Low 60 / high 40 is refused in either order, naming both keys.
    for (x, y) in [
        (("nvmfs_dirty_low_percent", "60"), high),
        (high, ("nvmfs_dirty_low_percent", "60")),
    ] {
        let e = low_high(x, y).unwrap_err();
        assert!(
            e.contains("nvmfs_dirty_low_percent (60) must be below nvmfs_dirty_high_percent (40)"),
            "{e}"
        );
    }
    // One key at a time, `set` checks against the current other key.
    let mut s = a.clone();
    let e = s.set("nvmfs_dirty_high_percent", "20").unwrap_err();
    assert!(
        e.starts_with("bad value \"20\" for nvmfs_dirty_high_percent: "),
        "{e}"
    );
    assert_eq!(s, a, "a refused set changed something");
    s.set("nvmfs_dirty_high_percent", "90").unwrap();
    s.set("nvmfs_dirty_low_percent", "85").unwrap();
    // A key given twice takes its last value.
    let t = Settings::default()
        .with(&[("migration_threads", "3"), ("migration_threads", "5")])
        .unwrap();
    assert_eq!(t.migration_threads, 5);
}

#[test]
fn config_files_go_through_the_same_parsers_ranges_and_rules() {
    let cfg = |pairs: Vec<(&'static str, ConfigValue)>| {
        let m: std::collections::BTreeMap<String, ConfigValue> =
            pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        let text: Vec<(String, String)> = m
            .iter()
            .map(|(k, v)| Settings::config_text(k, v).map(|t| (k.clone(), t)))
            .collect::<Result<_, _>>()?;
        Settings::default().with(&text)
    };
    use ConfigValue::*;
    // Ranges: refused from a config file as from `-o`.
    for (key, v, why) in [
        ("migration_threads", Int(5000), "from 0 to 1024"),
        ("writeback_dirty_percent", Int(0), "from 1 to 100"),
        ("size_counter_threshold", Int(300), "from 0 to 255"),
        ("dram_cache_bytes", Int(4096), "at least 1M"),
        ("nvmfs_window_ns", Text("500us".into()), "at least 1ms"),
        (
            "placement_policy",
            Text("fastest".into()),
            "known: ziggurat",
        ),
        ("log_migration", Int(3), "on or off"),
        ("log_migration", Text("maybe".into()), "on or off"),
        ("sync_threshold_bytes", Bool(true), "expected a size"),
        ("sync_threshold_bytes", Int(-1), "must not be negative"),
        (
            "sync_threshold_bytes",
            Other("a fractional number"),
            "fractional",
        ),
        ("sync_treshold", Int(1), "unknown setting"),
    ] {
        let e = cfg(vec![(key, v.clone())]).unwrap_err();
        assert!(e.contains(why) && e.contains(key), "{key} = {v:?}: {e}");
    }
    // The same deserializer path (`toml::from_str::<Settings>`) refuses them.
    let e = from_config([("migration_threads", 5000u64)]).unwrap_err();
    assert!(e.contains("from 0 to 1024"), "{e}");
    // Cross-key rules: on the whole file, whatever the key order.
    let e = cfg(vec![
        ("nvmfs_dirty_high_percent", Int(40)),
        ("nvmfs_dirty_low_percent", Int(60)),
    ])
    .unwrap_err();
    assert!(e.contains("must be below"), "{e}");
    let s = cfg(vec![
        ("nvmfs_dirty_high_percent", Int(40)),
        ("nvmfs_dirty_low_percent", Int(30)),
    ])
    .unwrap();
    assert_eq!(
        (s.nvmfs_dirty_low_percent, s.nvmfs_dirty_high_percent),
        (30, 40)
    );
    // Typed values: integers are bytes and numbers, booleans switches,
    // durations text with their unit.
    let s = cfg(vec![
        ("sync_idle_reset_ns", Text("1500ns".into())),
        ("sync_threshold_bytes", Int(8192)),
        ("log_migration", Bool(false)),
        ("migration_threshold", Int(70)),
    ])
    .unwrap();
    assert_eq!(s.sync_idle_reset_ns, 1500);
    assert_eq!(s.sync_threshold_bytes, 8192);
    assert!(!s.log_migration);
    assert_eq!(s.migration_threshold, ThresholdMode::Static(70));
}

/// A value means the same from `-o key=value`, the config file and
/// `terrace set`: a bare number is seconds for a duration everywhere (the
/// `set` help says so). A config file's bare integer for a duration, which
/// meant ns there, is refused rather than read either way silently
/// (`writeback_age_ns = 5` gave 5 ns while `-o writeback_age_ns=5` gave
/// 5 s; found by a new user, 2026-12-07).
#[test]
fn a_bare_number_means_the_same_from_every_source() {
    use ConfigValue::*;
    for (key, bare) in [
        ("writeback_age_ns", "5"),
        ("migration_age_ns", "30"),
        ("s3_backoff_ns", "1"),
        ("sync_threshold_bytes", "8192"),
        ("migration_threads", "3"),
        ("migration_threshold", "70"),
    ] {
        let from_o = Settings::default().with(&[(key, bare)]).unwrap();
        let mut from_set = Settings::default();
        from_set.set(key, bare).unwrap();
        let text = Settings::config_text(key, &Text(bare.into())).unwrap();
        let from_file = from_config([(key, text.as_str())]).unwrap();
        assert_eq!(from_file, from_o, "{key} = \"{bare}\"");
        assert_eq!(from_set, from_o, "{key} {bare}");
        if key.ends_with("_ns") {
            assert_eq!(
                from_o.get(key).unwrap(),
                format!("{bare}s"),
                "a bare number is seconds"
            );
            // A TOML integer: refused, with the two readings named.
            let n: i128 = bare.parse().unwrap();
            let e = Settings::config_text(key, &Int(n)).unwrap_err();
            assert!(
                e.starts_with(&format!("bad value {bare} for {key}: "))
                    && e.contains(&format!("\"{bare}s\" or \"{bare}ns\"")),
                "{e}"
            );
            // The daemon's status holds the field's ns: read back as such.
            let ns = n as u64 * 1_000_000_000;
            assert_eq!(from_config([(key, ns)]).unwrap(), from_o);
        } else {
            // Sizes and numbers: the integer is the bare number.
            let n: i128 = bare.parse().unwrap();
            assert_eq!(Settings::config_text(key, &Int(n)).unwrap(), bare);
        }
    }
    // 0 is 0 in any unit: `discard_interval_ns = 0` turns discard off.
    assert_eq!(
        Settings::config_text("discard_interval_ns", &Int(0)).unwrap(),
        "0"
    );
    // With a unit, text reads alike everywhere.
    let s = from_config([("writeback_age_ns", "5s")]).unwrap();
    assert_eq!(s.writeback_age_ns, 5_000_000_000);
}

#[test]
fn s3_retry_keys_parse_durations_and_refuse_what_is_out_of_range() {
    let s = Settings::default()
        .with(&[
            ("s3_retries", "0"),
            ("s3_timeout_ns", "90s"),
            ("s3_request_timeout_ns", "250ms"),
            ("s3_backoff_ns", "5ms"),
        ])
        .unwrap();
    assert_eq!(s.s3_retries, 0);
    assert_eq!(s.s3_timeout_ns, 90_000_000_000);
    assert_eq!(s.s3_request_timeout_ns, 250_000_000);
    assert_eq!(s.s3_backoff_ns, 5_000_000);
    assert_eq!(s.get("s3_timeout_ns").as_deref(), Some("90s"));
    let d = Settings::default();
    assert_eq!(
        (d.s3_retries, d.s3_timeout_ns, d.s3_request_timeout_ns),
        (100, 180_000_000_000, 30_000_000_000)
    );
    let cases = [
        ("s3_retries", "101", "from 0 to 100"),
        ("s3_request_timeout_ns", "10ms", "at least 100ms"),
        ("s3_backoff_ns", "0", "at least 1ms"),
        ("s3_timeout_ns", "soon", "duration"),
    ];
    assert_refused(&cases);
}

#[test]
fn every_key_is_declared_once_with_a_valid_default_named_in_its_help() {
    let d = Settings::default();
    d.validate().unwrap();
    let mut names: Vec<&str> = KEYS.iter().map(|k| k.name).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), KEYS.len(), "a key is declared twice");
    for k in KEYS {
        let default = (k.default)();
        k.kind.check(&default).unwrap();
        let text = k.kind.format(&default);
        assert_eq!(k.kind.parse(&text).unwrap(), default, "{}", k.name);
        assert!(
            k.help.contains(&format!("default {text}")),
            "{}: the help does not name the default {text:?}",
            k.name
        );
        for r in RULES {
            for key in r.keys {
                assert!(Settings::key(key).is_some(), "rule names unknown key {key}");
            }
        }
    }
}

#[test]
fn every_range_fits_its_field() {
    // Storing a key's largest and smallest values must not overflow the
    // field (`put` would panic).
    for k in KEYS {
        let bounds = match k.kind {
            Kind::Number { min, max, .. } | Kind::Size { min, max, .. } => [min, max],
            Kind::Duration { min } => [min, u64::MAX],
            _ => continue,
        };
        for b in bounds {
            let mut s = Settings::default();
            (k.put)(&mut s, Value::Num(b));
            assert_eq!((k.get)(&s), Value::Num(b), "{}", k.name);
        }
    }
}

#[test]
fn validate_checks_settings_changed_field_by_field() {
    let s = Settings {
        writeback_dirty_percent: 0,
        ..Settings::default()
    };
    let e = s.validate().unwrap_err();
    assert!(
        e.contains("writeback_dirty_percent") && e.contains("from 1 to 100"),
        "{e}"
    );
    let s = Settings {
        placement_policy: "fastest".into(),
        ..Settings::default()
    };
    assert!(s.validate().unwrap_err().contains("known: ziggurat"));
    let s = Settings {
        nvmfs_dirty_low_percent: 90,
        ..Settings::default()
    };
    assert!(s.validate().unwrap_err().contains("must be below"));
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
