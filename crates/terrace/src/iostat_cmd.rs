//! `terrace iostat MNT [INTERVAL [COUNT]] [--json]`: a live view of a mounted
//! pool's I/O, like `zpool iostat -v`: every INTERVAL seconds, per tier the
//! read and write requests and bandwidth and the device syncs, and for the
//! pool the FUSE reads and writes, migration down and up, and DRAM cache
//! hits, and per object (S3) tier the GETs, PUTs and deletes it sent to its
//! store and their bytes — each as a rate over the interval, computed from
//! two `status` answers of the daemon (its counters since mount).

use crate::admin::fetch_status;
use crate::control::protocol::DaemonStatus;
use crate::util::{self, CliError, CliResult};
use serde::Serialize;
use std::path::Path;
use std::time::{Duration, Instant};

/// One tier's rates over an interval.
#[derive(Debug, Serialize, PartialEq)]
pub struct TierRates {
    /// Tier id.
    pub id: u8,
    /// pm, ssd or hdd.
    pub kind: String,
    /// Read requests per second.
    pub read_ops_s: f64,
    /// Bytes read per second.
    pub read_bytes_s: f64,
    /// Write requests per second.
    pub write_ops_s: f64,
    /// Bytes written per second.
    pub write_bytes_s: f64,
    /// Device syncs per second.
    pub syncs_s: f64,
    /// An object tier's requests to its store (absent for other tiers).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object: Option<ObjectRates>,
}

/// An object tier's requests to its store over an interval.
#[derive(Debug, Serialize, PartialEq)]
pub struct ObjectRates {
    /// GETs per second.
    pub gets_s: f64,
    /// Bytes the GETs fetched per second.
    pub get_bytes_s: f64,
    /// PUTs per second.
    pub puts_s: f64,
    /// Bytes the PUTs uploaded per second.
    pub put_bytes_s: f64,
    /// Deletes per second.
    pub deletes_s: f64,
    /// Requests that failed (after their retries) per second.
    pub failures_s: f64,
}

/// One line of `--json` output: the rates over one interval.
#[derive(Debug, Serialize, PartialEq)]
pub struct Rates {
    /// Seconds the rates are over.
    pub interval_s: f64,
    /// Per tier.
    pub tiers: Vec<TierRates>,
    /// FUSE reads per second.
    pub reads_s: f64,
    /// FUSE writes per second.
    pub writes_s: f64,
    /// Bytes read through the mount per second.
    pub read_bytes_s: f64,
    /// Bytes written through the mount per second.
    pub write_bytes_s: f64,
    /// Migration down (towards slower tiers), bytes per second.
    pub migrated_down_bytes_s: f64,
    /// Migration up (reverse migration), bytes per second.
    pub migrated_up_bytes_s: f64,
    /// DRAM cache hits per second.
    pub cache_hits_s: f64,
    /// DRAM cache misses per second.
    pub cache_misses_s: f64,
}

/// The rates between two status answers `secs` seconds apart (counters
/// that went down — a remount in between — count as zero).
pub fn rates(a: &DaemonStatus, b: &DaemonStatus, secs: f64) -> Rates {
    let secs = secs.max(1e-9);
    let r = |x: u64, y: u64| y.saturating_sub(x) as f64 / secs;
    let tiers = b
        .core
        .tiers
        .iter()
        .map(|t| {
            let now = t.io.unwrap_or_default();
            let before = a.core.tiers.iter().find(|o| o.id == t.id);
            let object = t.object.as_ref().map(|o| {
                let now = o.requests;
                let before = before
                    .and_then(|b| b.object.as_ref())
                    .map(|b| b.requests)
                    .unwrap_or_default();
                ObjectRates {
                    gets_s: r(before.gets, now.gets),
                    get_bytes_s: r(before.get_bytes, now.get_bytes),
                    puts_s: r(before.puts, now.puts),
                    put_bytes_s: r(before.put_bytes, now.put_bytes),
                    deletes_s: r(before.deletes, now.deletes),
                    failures_s: r(before.failures, now.failures),
                }
            });
            let before = before.and_then(|o| o.io).unwrap_or_default();
            TierRates {
                id: t.id,
                kind: t.kind.to_string(),
                read_ops_s: r(before.read_requests, now.read_requests),
                read_bytes_s: r(before.read_bytes, now.read_bytes),
                write_ops_s: r(before.write_requests, now.write_requests),
                write_bytes_s: r(before.write_bytes, now.write_bytes),
                syncs_s: r(before.syncs, now.syncs),
                object,
            }
        })
        .collect();
    let (ca, cb) = (&a.core, &b.core);
    Rates {
        interval_s: secs,
        tiers,
        reads_s: r(ca.reads, cb.reads),
        writes_s: r(ca.writes, cb.writes),
        read_bytes_s: r(ca.bytes_read, cb.bytes_read),
        write_bytes_s: r(ca.bytes_written, cb.bytes_written),
        migrated_down_bytes_s: r(ca.migration.bytes_down, cb.migration.bytes_down),
        migrated_up_bytes_s: r(ca.migration.bytes_up, cb.migration.bytes_up),
        cache_hits_s: r(ca.cache.hits, cb.cache.hits),
        cache_misses_s: r(ca.cache.misses, cb.cache.misses),
    }
}

/// Bytes per second in a column of 9 characters (K/M/G, powers of 1024).
fn bw(x: f64) -> String {
    let (v, unit) = if x >= (1u64 << 30) as f64 {
        (x / (1u64 << 30) as f64, "G")
    } else if x >= (1u64 << 20) as f64 {
        (x / (1u64 << 20) as f64, "M")
    } else if x >= 1024.0 {
        (x / 1024.0, "K")
    } else {
        (x, "")
    };
    format!("{:>8.1}{unit:1}", v)
}

/// The table of one interval (header included).
pub fn render(r: &Rates) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "{:<6} {:>9} {:>9} {:>9} {:>9} {:>8}\n",
        "tier", "read/s", "read B/s", "write/s", "write B/s", "syncs/s"
    ));
    for t in &r.tiers {
        out.push_str(&format!(
            "{:<6} {:>9.0} {} {:>9.0} {} {:>8.0}\n",
            format!("{}:{}", t.id, t.kind),
            t.read_ops_s,
            bw(t.read_bytes_s),
            t.write_ops_s,
            bw(t.write_bytes_s),
            t.syncs_s
        ));
    }
    for t in &r.tiers {
        if let Some(o) = &t.object {
            out.push_str(&format!(
                "{:<6} object store: GET {:.0}/s {}/s, PUT {:.0}/s {}/s, DELETE {:.0}/s{}\n",
                format!("{}:{}", t.id, t.kind),
                o.gets_s,
                bw(o.get_bytes_s).trim(),
                o.puts_s,
                bw(o.put_bytes_s).trim(),
                o.deletes_s,
                if o.failures_s > 0.0 {
                    format!(", FAILED {:.0}/s", o.failures_s)
                } else {
                    String::new()
                }
            ));
        }
    }
    let hits = r.cache_hits_s + r.cache_misses_s;
    out.push_str(&format!(
        "mount  {:>9.0} {} {:>9.0} {}   migration down {}/s up {}/s, cache hits {}",
        r.reads_s,
        bw(r.read_bytes_s),
        r.writes_s,
        bw(r.write_bytes_s),
        bw(r.migrated_down_bytes_s).trim(),
        bw(r.migrated_up_bytes_s).trim(),
        if hits > 0.0 {
            format!("{:.0}%", r.cache_hits_s * 100.0 / hits)
        } else {
            "-".to_string()
        }
    ));
    out
}

/// `terrace iostat`.
pub fn run(mnt: &Path, interval: f64, count: Option<u64>, json: bool) -> CliResult {
    if !(interval.is_finite() && (0.01..=86_400.0).contains(&interval)) {
        return Err(CliError::usage(format!(
            "interval {interval}: must be a number of seconds from 0.01 to 86400"
        )));
    }
    if count == Some(0) {
        return Err(CliError::usage(
            "count 0: nothing to show (omit COUNT to run until Ctrl-C)",
        ));
    }
    let fetch = || fetch_status(mnt).map(|st| (st, Instant::now()));
    let (mut prev, mut at) = fetch()?;
    let mut shown = 0u64;
    loop {
        std::thread::sleep(Duration::from_secs_f64(interval));
        let (cur, now) = fetch()?;
        let r = rates(&prev, &cur, now.duration_since(at).as_secs_f64());
        if json {
            util::out(&serde_json::to_string(&r).unwrap_or_default());
        } else {
            util::out(&render(&r));
            util::out("");
        }
        shown += 1;
        if count.is_some_and(|c| shown >= c) {
            return Ok(());
        }
        (prev, at) = (cur, now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(bytes_written: u64, pm_write_bytes: u64, down: u64) -> DaemonStatus {
        let mut v: serde_json::Value =
            serde_json::from_str(include_str!("../tests/data/status.json")).unwrap();
        v["bytes_written"] = bytes_written.into();
        v["tiers"][0]["io"]["write_bytes"] = pm_write_bytes.into();
        v["migration"]["bytes_down"] = down.into();
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn rates_are_counter_differences_over_the_interval_and_never_negative() {
        let a = status(1000, 4096, 0);
        let b = status(3000, 4096 * 3, 1 << 20);
        let r = rates(&a, &b, 2.0);
        assert_eq!(r.write_bytes_s, 1000.0);
        assert_eq!(r.tiers[0].write_bytes_s, 4096.0);
        assert_eq!(r.migrated_down_bytes_s, (1 << 19) as f64);
        // A remount in between resets the counters: no negative rates.
        let back = rates(&b, &a, 1.0);
        assert_eq!(back.write_bytes_s, 0.0);
        assert!(render(&r).contains("0:pm"));
        assert!(r.tiers.iter().all(|t| t.object.is_none()));
        assert!(!serde_json::to_string(&r).unwrap().contains("gets_s"));
    }

    #[test]
    fn an_object_tier_shows_its_gets_and_puts_per_interval() {
        let with_s3 = |puts: u64, put_bytes: u64, gets: u64| {
            let mut v = serde_json::to_value(status(0, 0, 0)).unwrap();
            let mut s3 = v["tiers"][1].clone();
            s3["id"] = 2.into();
            s3["kind"] = "s3".into();
            s3["object"] = serde_json::json!({
                "parts": 1, "stored_bytes": 0, "live_bytes": 0, "live_fraction": 1.0,
                "dead_parts": 0, "pending_bytes": 0,
                "requests": {"puts": puts, "put_bytes": put_bytes, "gets": gets, "get_bytes": 0,
                             "deletes": 0, "lists": 0, "failures": 0}
            });
            v["tiers"].as_array_mut().unwrap().push(s3);
            serde_json::from_value::<DaemonStatus>(v).unwrap()
        };
        let r = rates(&with_s3(1, 0, 0), &with_s3(5, 8 << 20, 2), 2.0);
        let o = r.tiers[2].object.as_ref().unwrap();
        assert_eq!(
            (o.puts_s, o.put_bytes_s, o.gets_s),
            (2.0, (4 << 20) as f64, 1.0)
        );
        assert!(r.tiers[0].object.is_none());
        let table = render(&r);
        assert!(
            table.contains("2:s3   object store: GET 1/s 0.0/s, PUT 2/s 4.0M/s, DELETE 0/s"),
            "{table}"
        );
        let json: serde_json::Value = serde_json::to_value(&r).unwrap();
        assert_eq!(json["tiers"][2]["object"]["puts_s"], 2.0);
    }
}
