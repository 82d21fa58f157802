//! Object tiers (`--tier s3:URL[:SIZE]`, design §5n): the URL in the tier
//! record, the settings of the S3 client (retries and time-outs: the `s3_*`
//! settings, [`TIMEOUT_ENV`]), and opening a tier for mount and fsck with
//! the same header check as a block tier's.
//!
//! The URL may carry options (`?region=…&path_style=…&credentials_file=…
//! &profile=…&ca_file=…`, `terrace_media::UrlOptions`), stored with it:
//! none is secret. Credentials come from that file, the environment or
//! `~/.aws/credentials` at every open, and `ca_file`'s certificates are
//! read then too; Terrace never stores either.

use crate::tier_check;
use std::time::Duration;
use terrace_format::{Superblock, TierRecord, BLOCK_SIZE};
use terrace_media::{BlockMedia, NetworkParams, ObjectConfig, ObjectMedia};

/// Default virtual size of an object tier. It bounds the tier's DRAM
/// tables: about 40 bytes per 16 MiB extent (2.5 MiB for 1 TiB) and the
/// checksum table's index, plus 4 bytes per 4 KiB block stored (§5n).
pub const DEFAULT_SIZE: u64 = 1 << 40;

/// Environment variable, SECONDS: the default of the `s3_timeout_ns`
/// setting (the retry budget of a request), and of `s3_request_timeout_ns`
/// (one try's time limit) when shorter than its own default. Older than the
/// settings; a config file, `-o` and `terrace set` win over it.
pub const TIMEOUT_ENV: &str = "TERRACE_S3_TIMEOUT";

/// The settings [`TIMEOUT_ENV`] stands for, to apply before the config
/// file and `-o` (nothing when it is unset).
pub fn env_settings() -> Result<Vec<(String, String)>, String> {
    let Ok(v) = std::env::var(TIMEOUT_ENV) else {
        return Ok(Vec::new());
    };
    let secs = v
        .trim()
        .parse::<u64>()
        .map_err(|_| format!("{TIMEOUT_ENV}={v:?}: expected whole seconds"))?
        .max(1);
    let request = Duration::from_secs(secs)
        .min(terrace_media::NetworkParams::default().request_timeout)
        .as_secs();
    Ok(vec![
        ("s3_timeout_ns".to_string(), format!("{secs}s")),
        ("s3_request_timeout_ns".to_string(), format!("{request}s")),
    ])
}

/// The retries and time-outs of commands that take no settings (fsck,
/// `tier` commands): the settings' defaults, with [`TIMEOUT_ENV`] applied.
pub fn default_network() -> Result<NetworkParams, String> {
    let s = terrace_policy::Settings::default().with(&env_settings()?)?;
    Ok(terrace_core::fs::object_network(&s))
}

/// mkfs retries briefly, so that an unreachable endpoint fails within about
/// 10 s (or [`TIMEOUT_ENV`] seconds).
fn mkfs_network() -> Result<NetworkParams, String> {
    let mut net = default_network()?;
    if std::env::var_os(TIMEOUT_ENV).is_none() {
        net.retry_timeout = Duration::from_secs(10);
        net.request_timeout = net.request_timeout.min(net.retry_timeout);
    }
    net.retries = net.retries.min(2);
    Ok(net)
}

/// Opening a tier (its marker, LIST and header) retries as briefly as
/// mkfs: at most 2 retries within 10 s (or `net`'s budget if shorter), so a
/// mount whose store is down fails in seconds with the reason, instead of
/// after the minutes `net` allows a request of a running mount.
pub fn opening_network(net: NetworkParams) -> NetworkParams {
    let mut n = net;
    n.retries = n.retries.min(2);
    n.retry_timeout = n.retry_timeout.min(Duration::from_secs(10));
    n.request_timeout = n.request_timeout.min(n.retry_timeout);
    n
}

/// The client settings for `url`: `mkfs`'s short retries, else `net`
/// (a mount's settings, [`default_network`] elsewhere).
pub fn config(url: &str, mkfs: bool, net: Option<NetworkParams>) -> Result<ObjectConfig, String> {
    let mut cfg = ObjectConfig::from_url(url).map_err(|e| e.to_string())?;
    cfg.network = match (mkfs, net) {
        (true, _) => mkfs_network()?,
        (false, Some(n)) => n,
        (false, None) => default_network()?,
    };
    Ok(cfg)
}

/// `e` after `what` (the tier), unless it names the tier itself: the
/// media's one-line messages about configuration problems start with
/// `s3 tier URL:` (terrace_media::object::diagnose).
pub fn named(what: &str, e: impl std::fmt::Display) -> String {
    let e = e.to_string();
    if e.starts_with("s3 tier ") {
        e
    } else {
        format!("{what}: {e}")
    }
}

/// Opens object tier `t` of the pool `sb` and checks its tier header
/// (block 0, as for every block tier), with the retries and time-outs of
/// `net` ([`default_network`] if `None`) — [`opening_network`]'s shorter
/// ones while opening. The error names the tier.
pub fn open(
    t: &TierRecord,
    sb: &Superblock,
    net: Option<NetworkParams>,
) -> Result<ObjectMedia, String> {
    let what = format!("tier {} ({}) {}", t.id, t.kind.name(), t.path);
    let net = match net {
        Some(n) => n,
        None => default_network().map_err(|e| format!("{what}: {e}"))?,
    };
    let cfg =
        config(&t.path, false, Some(opening_network(net))).map_err(|e| format!("{what}: {e}"))?;
    let media = ObjectMedia::open(&cfg, sb.uuid).map_err(|e| named(&what, e))?;
    if media.len() < t.size {
        return Err(format!(
            "{what}: the store's tier holds {} bytes, the pool expects {}",
            media.len(),
            t.size
        ));
    }
    let mut head = vec![0u8; BLOCK_SIZE as usize];
    media.read_blocks(0, &mut head).map_err(|e| {
        let e = e.to_string();
        if e.starts_with("s3 tier ") {
            e
        } else {
            format!("{what}: cannot read the tier header: {e}")
        }
    })?;
    tier_check::check_header(t, sb, &head)?;
    for k in media.ignored_keys() {
        crate::util::warn(format!("{what}: ignored object {k}"));
    }
    media.set_network(net).map_err(|e| format!("{what}: {e}"))?;
    Ok(media)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opening_retries_briefly_whatever_the_settings() {
        let slow = NetworkParams {
            retries: 10,
            retry_timeout: Duration::from_secs(180),
            request_timeout: Duration::from_secs(30),
            backoff: Duration::from_millis(100),
        };
        let o = opening_network(slow);
        assert_eq!((o.retries, o.retry_timeout), (2, Duration::from_secs(10)));
        assert_eq!(o.request_timeout, Duration::from_secs(10));
        assert!(o.bound() <= Duration::from_secs(30), "{:?}", o.bound());
        // A shorter budget stays.
        let quick = NetworkParams {
            retries: 1,
            retry_timeout: Duration::from_secs(3),
            request_timeout: Duration::from_secs(3),
            backoff: Duration::from_millis(100),
        };
        assert_eq!(opening_network(quick), quick);
    }

    #[test]
    fn a_tier_s_own_message_is_not_named_twice() {
        assert_eq!(
            named(
                "tier 2 (s3) http://h/b",
                "s3 tier http://h/b: access denied (x)"
            ),
            "s3 tier http://h/b: access denied (x)"
        );
        assert_eq!(
            named("tier 2 (s3) http://h/b", "S3 credentials: only one of …"),
            "tier 2 (s3) http://h/b: S3 credentials: only one of …"
        );
    }
}
