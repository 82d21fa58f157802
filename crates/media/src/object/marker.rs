//! The marker object `terrace-tier.json`: which pool a prefix belongs to and
//! the tier's geometry.
//!
//! Written once, by `ObjectMedia::create`, with `If-None-Match: *` so two
//! creates cannot both win; read by every open, which refuses a prefix
//! without one or with another pool's uuid. Never rewritten. It holds no
//! credentials and nothing secret:
//!
//! ```json
//! {"format":"terrace-object-tier","version":1,
//!  "pool_uuid":"01234567-89ab-cdef-0123-456789abcdef",
//!  "len":1099511627776,"segment_blocks":4096,"block_size":4096}
//! ```
//!
//! `version` changes when the meaning of part keys or of the marker
//! changes; an open of a newer version is refused.

use std::io;

use serde::{Deserialize, Serialize};

use crate::block::BLOCK_SIZE;

/// `format` of every marker.
pub const FORMAT: &str = "terrace-object-tier";

/// Version this build writes and reads.
pub const VERSION: u32 = 1;

/// Largest segment: 1 GiB of blocks (a part is one PUT, and S3 takes up to
/// 5 GiB in one).
pub const MAX_SEGMENT_BLOCKS: u64 = (1 << 30) / BLOCK_SIZE;

/// The marker's content.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Marker {
    /// Always [`FORMAT`].
    pub format: String,
    /// [`VERSION`] when written by this build.
    pub version: u32,
    /// The pool's uuid, `8-4-4-4-12` lowercase hex.
    pub pool_uuid: String,
    /// Size of the tier's block space in bytes.
    pub len: u64,
    /// Blocks per segment (the largest part).
    pub segment_blocks: u64,
    /// Always [`BLOCK_SIZE`].
    pub block_size: u64,
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

/// Checks a tier's geometry: `len` a non-zero multiple of [`BLOCK_SIZE`],
/// `segment_blocks` from 1 to [`MAX_SEGMENT_BLOCKS`].
pub fn check_geometry(len: u64, segment_blocks: u64) -> io::Result<()> {
    if len == 0 || len % BLOCK_SIZE != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("object tier of {len} bytes: not a non-zero multiple of {BLOCK_SIZE}"),
        ));
    }
    if !(1..=MAX_SEGMENT_BLOCKS).contains(&segment_blocks) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "object tier segments of {segment_blocks} blocks: not from 1 to {MAX_SEGMENT_BLOCKS}"
            ),
        ));
    }
    Ok(())
}

impl Marker {
    /// The marker of a new tier.
    pub fn new(pool_uuid: [u8; 16], len: u64, segment_blocks: u64) -> Marker {
        Marker {
            format: FORMAT.to_string(),
            version: VERSION,
            pool_uuid: uuid_string(&pool_uuid),
            len,
            segment_blocks,
            block_size: BLOCK_SIZE,
        }
    }

    /// JSON bytes.
    pub fn to_json(&self) -> Vec<u8> {
        // Serialising a struct of strings and integers cannot fail; fall back
        // to an empty object rather than panic if it ever did.
        serde_json::to_vec(self).unwrap_or_else(|_| b"{}".to_vec())
    }

    /// Parses and checks a marker read from `url`.
    pub fn parse(bytes: &[u8], url: &str) -> io::Result<Marker> {
        let m: Marker = serde_json::from_slice(bytes)
            .map_err(|e| invalid(format!("{url}: not a Terrace tier marker: {e}")))?;
        if m.format != FORMAT {
            return Err(invalid(format!(
                "{url}: format {:?}, expected {FORMAT:?}",
                m.format
            )));
        }
        if m.version > VERSION {
            return Err(invalid(format!(
                "{url}: tier format version {} is newer than this build's ({VERSION})",
                m.version
            )));
        }
        if m.block_size != BLOCK_SIZE {
            return Err(invalid(format!(
                "{url}: block size {} (this build uses {BLOCK_SIZE})",
                m.block_size
            )));
        }
        check_geometry(m.len, m.segment_blocks).map_err(|e| invalid(format!("{url}: {e}")))?;
        if parse_uuid(&m.pool_uuid).is_none() {
            return Err(invalid(format!(
                "{url}: pool uuid {:?} is malformed",
                m.pool_uuid
            )));
        }
        Ok(m)
    }

    /// The pool uuid (checked by [`parse`](Self::parse)).
    pub fn uuid(&self) -> Option<[u8; 16]> {
        parse_uuid(&self.pool_uuid)
    }
}

/// `8-4-4-4-12` lowercase hex.
pub fn uuid_string(u: &[u8; 16]) -> String {
    let h: String = u.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// Inverse of [`uuid_string`] (any case); `None` for anything else.
pub fn parse_uuid(s: &str) -> Option<[u8; 16]> {
    let groups: Vec<&str> = s.split('-').collect();
    if groups.iter().map(|g| g.len()).collect::<Vec<_>>() != [8, 4, 4, 4, 12] {
        return None;
    }
    let hex: String = groups.concat();
    let mut out = [0u8; 16];
    for (i, o) in out.iter_mut().enumerate() {
        let pair = hex.get(2 * i..2 * i + 2)?;
        if !pair.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        *o = u8::from_str_radix(pair, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marker_reads_back() {
        let u = [0xab; 16];
        let m = Marker::new(u, 1 << 30, 4096);
        let back = Marker::parse(&m.to_json(), "x").unwrap();
        assert_eq!(back, m);
        assert_eq!(back.uuid(), Some(u));
        assert_eq!(m.pool_uuid, "abababab-abab-abab-abab-abababababab");
    }

    #[test]
    fn bad_markers_are_refused() {
        let good = Marker::new([1; 16], 8192, 2);
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (b"not json".to_vec(), "not a Terrace tier marker"),
            (
                Marker {
                    format: "x".into(),
                    ..good.clone()
                }
                .to_json(),
                "format",
            ),
            (
                Marker {
                    version: VERSION + 1,
                    ..good.clone()
                }
                .to_json(),
                "newer than this build",
            ),
            (
                Marker {
                    block_size: 512,
                    ..good.clone()
                }
                .to_json(),
                "block size",
            ),
            (
                Marker {
                    len: 100,
                    ..good.clone()
                }
                .to_json(),
                "multiple",
            ),
            (
                Marker {
                    segment_blocks: 0,
                    ..good.clone()
                }
                .to_json(),
                "segments",
            ),
            (
                Marker {
                    pool_uuid: "0123".into(),
                    ..good.clone()
                }
                .to_json(),
                "malformed",
            ),
        ];
        for (bytes, why) in cases {
            let e = Marker::parse(&bytes, "s3 u").unwrap_err();
            assert!(e.to_string().contains(why), "{why}: {e}");
            assert!(e.to_string().starts_with("s3 u"), "{e}");
        }
    }

    #[test]
    fn uuids_parse_strictly() {
        assert_eq!(parse_uuid("00000000-0000-0000-0000-00000000000G"), None);
        assert_eq!(parse_uuid("00000000-0000-0000-000000000000-0000"), None);
        assert_eq!(parse_uuid("+0000000-0000-0000-0000-000000000000"), None);
        assert_eq!(parse_uuid("é0000000-0000-0000-0000-000000000000"), None);
        assert_eq!(
            parse_uuid("FFFFFFFF-0000-0000-0000-000000000001"),
            Some([0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1])
        );
    }
}
