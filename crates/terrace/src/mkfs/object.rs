//! The object (`s3`) tier of `mkfs` and `tier add`: where it may stand
//! among the tiers, its record (URL and whole segments) and its creation
//! with its tier header.

use crate::object_tier;
use crate::util::{self, CliError, CliResult};
use std::path::Path;
use terrace_format::{TierKind, TierRecord, BLOCK_SIZE, TIER_PATH_MAX};

use super::{tier_header, MkfsConfig, TierSpec};

/// Segment (part size and extent) of an object tier: 16 MiB.
const OBJECT_SEGMENT: u64 = terrace_media::object::DEFAULT_SEGMENT_BLOCKS * BLOCK_SIZE;

/// The `s3` tier of the command line, if any: at most one, last, after at
/// least one other block tier (which takes large writes and log blobs: the
/// object tier gets data only by migration), its URL fitting the record.
pub(super) fn check_object_tier(
    cfg: &MkfsConfig,
    file_tiers: usize,
) -> CliResult<Option<&TierSpec>> {
    let objects: Vec<usize> = (0..cfg.tiers.len())
        .filter(|&i| cfg.tiers[i].kind == TierKind::S3)
        .collect();
    let Some(&i) = objects.first() else {
        return Ok(None);
    };
    let spec = &cfg.tiers[i];
    if objects.len() > 1 || i + 1 != cfg.tiers.len() {
        return Err(CliError::usage(
            "an s3 tier must be the last tier given, and a pool has at most one",
        ));
    }
    if file_tiers < 2 {
        return Err(CliError::usage(
            "an s3 tier needs an ssd or hdd tier before it (the object tier only takes data that migration moves down)",
        ));
    }
    object_tier_record(spec, 0)?;
    Ok(Some(spec))
}

/// The record of object tier `spec` as tier `id`: its URL fits the record
/// and its size is whole segments, at least two.
pub(crate) fn object_tier_record(spec: &TierSpec, id: u8) -> CliResult<TierRecord> {
    let url = spec.path.to_string_lossy();
    if url.len() > TIER_PATH_MAX {
        return Err(CliError::at(
            &spec.path,
            format!("URL longer than {TIER_PATH_MAX} bytes cannot be recorded in the superblock"),
        )
        .code(2));
    }
    let size = spec.size.unwrap_or(object_tier::DEFAULT_SIZE);
    if size % OBJECT_SEGMENT != 0 || size < 2 * OBJECT_SEGMENT {
        return Err(CliError::at(
            &spec.path,
            format!(
                "an s3 tier's size must be a multiple of its {} segments, at least two",
                util::human_bytes(OBJECT_SEGMENT)
            ),
        )
        .code(2));
    }
    Ok(TierRecord {
        id,
        kind: TierKind::S3,
        size,
        extent_size: OBJECT_SEGMENT as u32,
        path: url.into_owned(),
        // An object tier's header is never restamped (design.md §3).
        epoch: 0,
    })
}

/// Creates the object tier of record `r` (refused on a prefix that holds a
/// tier or parts already) and writes its tier header as block 0.
pub(crate) fn create_object_tier(r: &TierRecord, uuid: [u8; 16]) -> CliResult {
    let at = |e: String| CliError::at(Path::new(&r.path), e);
    let cfg = object_tier::config(&r.path, true, None).map_err(at)?;
    let media = terrace_media::ObjectMedia::create(
        &cfg,
        uuid,
        r.size,
        u64::from(r.extent_size) / BLOCK_SIZE,
    )
    .map_err(|e| {
        // The media's own messages name the tier (`s3 tier URL: …`).
        let e = e.to_string();
        if e.starts_with("s3 tier ") {
            CliError::new(e)
        } else {
            at(e)
        }
    })?;
    use terrace_media::BlockMedia;
    media
        .write_blocks(0, &tier_header(r, uuid).encode())
        .and_then(|()| media.sync())
        .map_err(|e| at(format!("cannot write the tier header: {e}")))
}
