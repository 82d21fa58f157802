//! Object tiers (`--tier s3:URL[:SIZE]`, design §5n): the URL in the tier
//! record, the settings of the S3 client, and opening a tier for mount and
//! fsck with the same header check as a block tier's.
//!
//! Credentials come from the environment or `~/.aws/credentials` at every
//! open; Terrace never stores them.

use crate::tier_check;
use std::time::Duration;
use terrace_format::{Superblock, TierRecord, BLOCK_SIZE};
use terrace_media::{BlockMedia, ObjectConfig, ObjectMedia};

/// Default virtual size of an object tier. It bounds the tier's DRAM
/// tables: about 40 bytes per 16 MiB extent (2.5 MiB for 1 TiB) and the
/// checksum table's index, plus 4 bytes per 4 KiB block stored (§5n).
pub const DEFAULT_SIZE: u64 = 1 << 40;

/// Environment variable: seconds a failed S3 request is retried for (and
/// the time limit of one request); default 180 s of retries, 30 s a request.
pub const TIMEOUT_ENV: &str = "TERRACE_S3_TIMEOUT";

/// The client settings for `url`. `mkfs` retries briefly (an unreachable
/// endpoint fails within about 10 s); a mount retries for
/// [`TIMEOUT_ENV`] seconds if set.
pub fn config(url: &str, mkfs: bool) -> Result<ObjectConfig, String> {
    let mut cfg = ObjectConfig::from_url(url).map_err(|e| e.to_string())?;
    let limit = match std::env::var(TIMEOUT_ENV) {
        Ok(v) => Some(
            v.trim()
                .parse::<u64>()
                .map_err(|_| format!("{TIMEOUT_ENV}={v:?}: expected whole seconds"))?,
        ),
        Err(_) if mkfs => Some(10),
        Err(_) => None,
    };
    if let Some(secs) = limit {
        let d = Duration::from_secs(secs.max(1));
        cfg.retries = if mkfs { 2 } else { cfg.retries };
        cfg.retry_timeout = d;
        cfg.request_timeout = cfg.request_timeout.min(d);
    }
    Ok(cfg)
}

/// Opens object tier `t` of the pool `sb` and checks its tier header
/// (block 0, as for every block tier). The error starts with the tier.
pub fn open(t: &TierRecord, sb: &Superblock) -> Result<ObjectMedia, String> {
    let what = format!("tier {} ({}) {}", t.id, t.kind.name(), t.path);
    let cfg = config(&t.path, false).map_err(|e| format!("{what}: {e}"))?;
    let media = ObjectMedia::open(&cfg, sb.uuid).map_err(|e| format!("{what}: {e}"))?;
    if media.len() < t.size {
        return Err(format!(
            "{what}: the store's tier holds {} bytes, the pool expects {}",
            media.len(),
            t.size
        ));
    }
    let mut head = vec![0u8; BLOCK_SIZE as usize];
    media
        .read_blocks(0, &mut head)
        .map_err(|e| format!("{what}: cannot read the tier header: {e}"))?;
    tier_check::check_header(t, sb, &head)?;
    for k in media.ignored_keys() {
        crate::util::warn(format!("{what}: ignored object {k}"));
    }
    Ok(media)
}
