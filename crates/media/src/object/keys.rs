//! Object names of an object tier: what a key says, and how to read it back.
//!
//! Under the tier's prefix there are exactly two kinds of Terrace objects:
//!
//! - the marker `terrace-tier.json` ([`MARKER_NAME`]), written once by
//!   `ObjectMedia::create` (docs/design.md §5n);
//! - parts, `seg-{segment:016x}/{seq:016x}-{first:08x}-{count:08x}`: the
//!   `count` blocks starting at block `first` of segment `segment`, uploaded
//!   by the `seq`-th upload of the tier.
//!
//! A part's key says everything the index needs, so opening a tier is one
//! LIST and never reads a part. Every number is lowercase hex of fixed
//! width, so keys sort by segment and then by upload number, and a key is
//! either exactly what [`PartKey::name`] makes or not a part at all.
//!
//! Parsing never panics: a key under `seg-` that does not follow the pattern
//! is [`Parsed::Malformed`] with the reason (reported and ignored by `open`),
//! any other key is [`Parsed::Foreign`].

use std::fmt;

/// Name of the marker object, relative to the prefix.
pub const MARKER_NAME: &str = "terrace-tier.json";

/// Directory (relative to the prefix) of every part of one segment starts
/// with this.
pub const SEGMENT_DIR: &str = "seg-";

/// What a part's key encodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PartKey {
    /// Upload number: unique in the tier, larger is newer.
    pub seq: u64,
    /// Segment the part lies in.
    pub segment: u64,
    /// First block, counted from the start of the segment.
    pub first: u32,
    /// Number of blocks (at least 1).
    pub count: u32,
}

impl PartKey {
    /// The key relative to the prefix.
    pub fn name(&self) -> String {
        format!(
            "{SEGMENT_DIR}{:016x}/{:016x}-{:08x}-{:08x}",
            self.segment, self.seq, self.first, self.count
        )
    }
}

impl fmt::Display for PartKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// What a key found under the prefix is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// The tier's marker.
    Marker,
    /// A part.
    Part(PartKey),
    /// Under `seg-` but not a part's name; the reason.
    Malformed(String),
    /// Not a Terrace name (left alone).
    Foreign,
}

/// `prefix/name`, or `name` when the prefix is empty.
pub fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}/{name}")
    }
}

/// Classifies `key` (a full key as LIST returns it) found under `prefix`.
/// A key outside the prefix is [`Parsed::Foreign`].
pub fn parse(prefix: &str, key: &str) -> Parsed {
    let rel = if prefix.is_empty() {
        key
    } else {
        match key.strip_prefix(prefix).and_then(|r| r.strip_prefix('/')) {
            Some(r) => r,
            None => return Parsed::Foreign,
        }
    };
    if rel == MARKER_NAME {
        return Parsed::Marker;
    }
    match rel.strip_prefix(SEGMENT_DIR) {
        Some(rest) => match parse_part(rest) {
            Ok(k) => Parsed::Part(k),
            Err(why) => Parsed::Malformed(why),
        },
        None => Parsed::Foreign,
    }
}

/// Parses `{segment:016x}/{seq:016x}-{first:08x}-{count:08x}`.
fn parse_part(rest: &str) -> Result<PartKey, String> {
    let (segment, file) = rest
        .split_once('/')
        .ok_or_else(|| "no '/' after the segment number".to_string())?;
    let segment = hex(segment, 16, "segment")?;
    let mut fields = file.split('-');
    let (Some(seq), Some(first), Some(count), None) =
        (fields.next(), fields.next(), fields.next(), fields.next())
    else {
        return Err("part name is not SEQ-FIRST-COUNT".to_string());
    };
    let seq = hex(seq, 16, "upload number")?;
    let first = hex(first, 8, "first block")? as u32;
    let count = hex(count, 8, "block count")? as u32;
    if count == 0 {
        return Err("block count 0".to_string());
    }
    if first.checked_add(count).is_none() {
        return Err("first block + count overflows".to_string());
    }
    Ok(PartKey {
        seq,
        segment,
        first,
        count,
    })
}

/// `text` as exactly `width` lowercase hex digits.
fn hex(text: &str, width: usize, what: &str) -> Result<u64, String> {
    let ok = text.len() == width
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if !ok {
        return Err(format!(
            "{what} {text:?} is not {width} lowercase hex digits"
        ));
    }
    u64::from_str_radix(text, 16).map_err(|e| format!("{what} {text:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_part_key_reads_back_as_itself() {
        let k = PartKey {
            seq: 0x1234,
            segment: 7,
            first: 16,
            count: 4096,
        };
        assert_eq!(
            k.name(),
            "seg-0000000000000007/0000000000001234-00000010-00001000"
        );
        assert_eq!(parse("a/b", &join("a/b", &k.name())), Parsed::Part(k));
        assert_eq!(parse("", &k.name()), Parsed::Part(k));
    }

    #[test]
    fn the_marker_and_foreign_keys_are_told_apart() {
        assert_eq!(parse("p", "p/terrace-tier.json"), Parsed::Marker);
        assert_eq!(parse("", "terrace-tier.json"), Parsed::Marker);
        assert_eq!(parse("p", "p/README"), Parsed::Foreign);
        assert_eq!(parse("p", "q/terrace-tier.json"), Parsed::Foreign);
        // "p" is a path segment: "pq/..." is not under it.
        assert_eq!(parse("p", "pq/terrace-tier.json"), Parsed::Foreign);
        assert_eq!(parse("p", "p/sub/terrace-tier.json"), Parsed::Foreign);
    }

    #[test]
    fn malformed_part_names_are_reported_not_parsed() {
        let bad = [
            ("seg-0000000000000007", "no '/'"),
            ("seg-7/0000000000001234-00000010-00001000", "segment"),
            (
                "seg-0000000000000007/1234-00000010-00001000",
                "upload number",
            ),
            (
                "seg-0000000000000007/0000000000001234-00000010",
                "SEQ-FIRST-COUNT",
            ),
            (
                "seg-0000000000000007/0000000000001234-00000010-00001000-1",
                "SEQ-FIRST-COUNT",
            ),
            (
                "seg-0000000000000007/0000000000001234-0000001G-00001000",
                "first block",
            ),
            (
                "seg-0000000000000007/0000000000001234-0000001A-00001000",
                "first block",
            ),
            (
                "seg-0000000000000007/0000000000001234-00000010-00000000",
                "count 0",
            ),
            (
                "seg-0000000000000007/0000000000001234-ffffffff-00000002",
                "overflows",
            ),
            (
                "seg-0000000000000007/+000000000001234-00000010-00000001",
                "upload number",
            ),
            (
                "seg-000000000000000é/0000000000001234-00000010-00000001",
                "segment",
            ),
        ];
        for (key, why) in bad {
            match parse("", key) {
                Parsed::Malformed(m) => assert!(m.contains(why), "{key}: {m}"),
                other => panic!("{key}: {other:?}"),
            }
        }
    }

    proptest! {
        #[test]
        fn every_part_key_round_trips(seq: u64, segment: u64, first: u32, count in 1u32..) {
            prop_assume!(first.checked_add(count).is_some());
            let k = PartKey { seq, segment, first, count };
            prop_assert_eq!(parse("x/y", &join("x/y", &k.name())), Parsed::Part(k));
        }

        #[test]
        fn keys_sort_by_segment_then_upload(a: (u64, u64), b: (u64, u64)) {
            let ka = PartKey { segment: a.0, seq: a.1, first: 0, count: 1 };
            let kb = PartKey { segment: b.0, seq: b.1, first: 0, count: 1 };
            prop_assert_eq!(ka.name().cmp(&kb.name()), a.cmp(&b));
        }

        #[test]
        fn parsing_any_text_never_panics(s in "\\PC{0,80}") {
            let _ = parse("", &s);
            let _ = parse("p", &format!("p/seg-{s}"));
        }
    }
}
