//! Text forms of the values settings hold: sizes (`64K`, binary units),
//! durations (`30s`, in ns), percentages and migration thresholds
//! (`dynamic` or a percentage), parsed and formatted.
//!
//! Invariant: `format_*` writes the largest unit that divides the value
//! exactly, and `parse_*` reads it back to the same value.

use serde::Serializer;

use crate::migration::ThresholdMode;

/// Parses a whole percentage from `lo` to `hi` (an optional `%` is allowed).
fn parse_percent(s: &str, lo: u8, hi: u8) -> Result<u8, String> {
    let why = || format!("expected a whole number from {lo} to {hi}");
    let t = s.trim();
    let t = t.strip_suffix('%').unwrap_or(t).trim();
    let v: u8 = t.parse().map_err(|_| why())?;
    if !(lo..=hi).contains(&v) {
        return Err(why());
    }
    Ok(v)
}

/// Parses a migration threshold: `dynamic`, or a whole percentage from 1 to
/// 99 (an optional `%` is allowed).
pub fn parse_threshold(s: &str) -> Result<ThresholdMode, String> {
    if s.trim().eq_ignore_ascii_case("dynamic") {
        return Ok(ThresholdMode::Dynamic);
    }
    parse_percent(s, 1, 99)
        .map(ThresholdMode::Static)
        .map_err(|_| "expected dynamic or a whole number from 1 to 99".to_string())
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

/// A threshold as a number, or the string `"dynamic"`.
pub(super) fn ser_threshold<S: Serializer>(t: &ThresholdMode, s: S) -> Result<S::Ok, S::Error> {
    match *t {
        ThresholdMode::Static(p) => s.serialize_u8(p),
        ThresholdMode::Dynamic => s.serialize_str("dynamic"),
    }
}
