//! `ObjectMedia` against a real S3 server (MinIO): `make test-s3`, or
//!
//! ```sh
//! eval "$(tests/minio/minio.sh start)"
//! cargo test --release -p terrace-media --test object_minio
//! tests/minio/minio.sh stop
//! ```
//!
//! The server is named by `TERRACE_S3_URL` (`http://HOST:PORT/BUCKET`) and
//! the usual `AWS_*` variables. Without `TERRACE_S3_URL` every test FAILS,
//! unless `TERRACE_S3_SKIP=1` says skipping is intended — so this file can
//! never pass without having talked to S3 by accident. Each test works under
//! its own fresh prefix and deletes what it made.
//!
//! `measure_put_and_ranged_get` (ignored by default) prints the numbers of
//! docs/design.md §5n: `cargo test ... -- --ignored --nocapture`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, PutMode, PutOptions, PutPayload};
use terrace_media::object::DEFAULT_SEGMENT_BLOCKS;
use terrace_media::{BlockMedia, ObjectConfig, ObjectMedia, SweepReport, BLOCK_SIZE};

const BLOCK: usize = BLOCK_SIZE as usize;
const UUID: [u8; 16] = *b"terrace-s3-test!";

/// The config for a fresh prefix under `TERRACE_S3_URL`, or `None` when
/// skipping was asked for. Panics when neither is set.
fn config(test: &str) -> Option<ObjectConfig> {
    let url = match std::env::var("TERRACE_S3_URL") {
        Ok(u) if !u.is_empty() => u,
        _ => {
            if std::env::var("TERRACE_S3_SKIP").as_deref() == Ok("1") {
                eprintln!("skipped {test}: TERRACE_S3_SKIP=1 and no TERRACE_S3_URL");
                return None;
            }
            panic!(
                "TERRACE_S3_URL is not set: run `make test-s3`, or \
                 `eval \"$(tests/minio/minio.sh start)\"` first; set TERRACE_S3_SKIP=1 to skip \
                 the S3 tests on purpose"
            );
        }
    };
    let mut cfg = ObjectConfig::from_url(&url).expect("TERRACE_S3_URL");
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let unique = format!("{test}-{}-{nanos}", std::process::id());
    cfg.prefix = if cfg.prefix.is_empty() {
        unique
    } else {
        format!("{}/{unique}", cfg.prefix)
    };
    // Fail within about two minutes when the server is gone instead of
    // retrying for longer; a try that times out (30 s: a loaded machine
    // once kept a bulk delete that long) is still retried once.
    cfg.network.retries = 2;
    cfg.network.retry_timeout = Duration::from_secs(45);
    Some(cfg)
}

fn pattern(start: u64, n: u64, v: u8) -> Vec<u8> {
    let mut d = vec![v; n as usize * BLOCK];
    for i in 0..n {
        let at = i as usize * BLOCK;
        d[at..at + 8].copy_from_slice(&(start + i).to_le_bytes());
    }
    d
}

fn read(m: &ObjectMedia, start: u64, n: u64) -> Vec<u8> {
    let mut b = vec![0xee; n as usize * BLOCK];
    m.read_blocks(start, &mut b).unwrap();
    b
}

/// Keys and sizes of the part objects under the media's prefix, listed
/// straight from the store (not through the media's index).
fn listed_parts(m: &ObjectMedia) -> Vec<(String, u64)> {
    let store: Arc<dyn ObjectStore> = m.bucket().store();
    let prefix = Path::from(m.bucket().prefix());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut v: Vec<(String, u64)> = rt
        .block_on(store.list(Some(&prefix)).try_collect::<Vec<_>>())
        .unwrap()
        .into_iter()
        .map(|m| (m.location.to_string(), m.size))
        .filter(|(k, _)| k.contains("/seg-"))
        .collect();
    v.sort();
    v
}

/// Deletes every object of the media's prefix (parts and marker).
fn remove_all(m: ObjectMedia) {
    let used: [(u64, u64); 0] = [];
    m.retain(&used).unwrap();
    let store: Arc<dyn ObjectStore> = m.bucket().store();
    let marker = Path::from(format!("{}/terrace-tier.json", m.bucket().prefix()));
    drop(m);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(object_store::ObjectStoreExt::delete(&store, &marker))
        .unwrap();
}

#[test]
fn round_trip_reopen_and_pool_identity() {
    let Some(cfg) = config("roundtrip") else {
        return;
    };
    let m = ObjectMedia::create(&cfg, UUID, 1024 * BLOCK_SIZE, 64).unwrap();
    assert_eq!(m.describe(), format!("s3 {}", cfg.url()));
    m.write_blocks(60, &pattern(60, 10, 1)).unwrap(); // two segments: two parts
    m.write_blocks(500, &pattern(500, 1, 2)).unwrap();
    m.sync().unwrap();
    assert_eq!(read(&m, 60, 10), pattern(60, 10, 1));
    let parts = listed_parts(&m);
    assert_eq!(parts.len(), 3, "{parts:?}");
    assert!(parts.iter().all(|(_, size)| size % BLOCK_SIZE == 0));
    m.write_blocks(0, &pattern(0, 1, 3)).unwrap(); // never synced
    drop(m);

    let m = ObjectMedia::open(&cfg, UUID).unwrap();
    assert_eq!(read(&m, 60, 10), pattern(60, 10, 1));
    assert_eq!(read(&m, 500, 1), pattern(500, 1, 2));
    assert_eq!(
        read(&m, 0, 1),
        vec![0; BLOCK],
        "unsynced write lost at the reopen"
    );
    assert!(m.ignored_keys().is_empty(), "{:?}", m.ignored_keys());

    let e = ObjectMedia::open(&cfg, [9; 16]).unwrap_err();
    assert!(e.to_string().contains("belongs to pool"), "{e}");
    let e = ObjectMedia::create(&cfg, [9; 16], 1024 * BLOCK_SIZE, 64).unwrap_err();
    assert!(e.to_string().contains("holds a tier marker already"), "{e}");
    // The server honours If-None-Match, which keeps two creates from both
    // writing a marker.
    let store: Arc<dyn ObjectStore> = m.bucket().store();
    let marker = Path::from(format!("{}/terrace-tier.json", m.bucket().prefix()));
    let opts = PutOptions {
        mode: PutMode::Create,
        ..PutOptions::default()
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let r = rt.block_on(store.put_opts(&marker, PutPayload::from("clobber"), opts));
    assert!(
        matches!(r, Err(object_store::Error::AlreadyExists { .. })),
        "{r:?}"
    );
    let mut elsewhere = cfg.clone();
    elsewhere.prefix.push_str("-none");
    let e = ObjectMedia::open(&elsewhere, UUID).unwrap_err();
    assert!(e.to_string().contains("no Terrace tier here"), "{e}");
    remove_all(m);
}

#[test]
fn a_64_mib_write_in_16_mib_segments_then_trims_delete_objects() {
    let Some(cfg) = config("segments") else {
        return;
    };
    let seg = DEFAULT_SEGMENT_BLOCKS; // 16 MiB
    let m = ObjectMedia::create(&cfg, UUID, 16 * seg * BLOCK_SIZE, seg).unwrap();
    let n = 4 * seg; // 64 MiB
    let data = pattern(0, n, 7);
    m.write_blocks(0, &data).unwrap();
    m.sync().unwrap();
    let parts = listed_parts(&m);
    assert_eq!(parts.len(), 4, "{parts:?}");
    assert!(parts.iter().all(|(_, size)| *size == 16 << 20), "{parts:?}");
    drop(m);
    let m = ObjectMedia::open(&cfg, UUID).unwrap();
    let before = m.object_stats().requests;
    assert!(read(&m, 0, n) == data, "64 MiB read back");
    assert_eq!(read(&m, seg + 5, 1), pattern(seg + 5, 1, 7));
    let s = m.object_stats().requests;
    // Each 16 MiB part comes as ranged GETs of at most 2 MiB (8 of them, in
    // flight together), and one GET for the block.
    assert_eq!(
        s.gets - before.gets,
        4 * 8 + 1,
        "eight 2 MiB ranged GETs per part, one for the block"
    );
    assert_eq!(
        s.get_bytes - before.get_bytes,
        (n + 1) * BLOCK_SIZE,
        "not a byte more"
    );

    // Segment 1 trimmed whole, segment 2 in part, segment 3 superseded.
    m.trim(seg, seg).unwrap();
    m.trim(2 * seg, 10).unwrap();
    m.write_blocks(3 * seg, &pattern(3 * seg, seg, 8)).unwrap();
    m.sync().unwrap();
    let parts = listed_parts(&m);
    assert_eq!(
        parts.len(),
        3,
        "segment 1's and old segment 3's objects deleted: {parts:?}"
    );
    assert!(
        !parts
            .iter()
            .any(|(k, _)| k.contains("seg-0000000000000001/")),
        "{parts:?}"
    );
    let s = m.object_stats();
    assert_eq!(s.stored_bytes, 48 << 20);
    assert_eq!(s.live_bytes, (3 * seg - 10) * BLOCK_SIZE);
    assert_eq!(read(&m, 3 * seg, 2), pattern(3 * seg, 2, 8));
    // The rest of segment 2 goes with a reclaim.
    m.trim(2 * seg + 10, seg - 10).unwrap();
    assert_eq!(
        m.reclaim().unwrap(),
        SweepReport {
            parts: 1,
            bytes: 16 << 20
        }
    );
    assert_eq!(listed_parts(&m).len(), 2);
    remove_all(m);
}

#[test]
fn retain_deletes_orphans_on_the_server() {
    let Some(cfg) = config("retain") else {
        return;
    };
    let m = ObjectMedia::create(&cfg, UUID, 256 * BLOCK_SIZE, 16).unwrap();
    for s in [0u64, 16, 32, 48] {
        m.write_blocks(s, &pattern(s, 4, 1)).unwrap();
    }
    m.sync().unwrap();
    drop(m);
    let m = ObjectMedia::open(&cfg, UUID).unwrap();
    let used = [(0, 4), (50, 1)];
    let orphans = m.orphans(&used);
    assert_eq!(
        orphans.iter().map(|o| o.block).collect::<Vec<_>>(),
        vec![16, 32]
    );
    assert_eq!(listed_parts(&m).len(), 4, "orphans() deletes nothing");
    let r = m.retain(&used).unwrap();
    assert_eq!(
        r,
        SweepReport {
            parts: 2,
            bytes: 8 * BLOCK_SIZE
        }
    );
    let left: Vec<String> = listed_parts(&m).into_iter().map(|(k, _)| k).collect();
    assert_eq!(left.len(), 2, "{left:?}");
    assert!(left.iter().all(|k| !orphans.iter().any(|o| &o.key == k)));
    assert_eq!(read(&m, 0, 4), pattern(0, 4, 1));
    assert_eq!(read(&m, 50, 1), pattern(50, 1, 1));
    remove_all(m);
}

#[test]
fn a_server_that_is_not_there_is_a_clear_error() {
    let Some(mut cfg) = config("down") else {
        return;
    };
    // A port nothing listens on (bound and closed again).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap();
    cfg.endpoint = format!("http://127.0.0.1:{port}");
    cfg.network.retries = 0;
    let e = ObjectMedia::create(&cfg, UUID, 16 * BLOCK_SIZE, 16).unwrap_err();
    let m = e.to_string();
    eprintln!("the error: {m}");
    assert!(m.contains(&cfg.endpoint), "{m}");
    assert!(
        m.to_lowercase().contains("connect"),
        "the cause is named: {m}"
    );
}

/// PUT throughput by object size and ranged-GET latency (docs/design.md §5n).
#[test]
#[ignore]
fn measure_put_and_ranged_get() {
    let Some(cfg) = config("measure") else {
        return;
    };
    for mib in [4u64, 16, 64] {
        let seg = (mib << 20) / BLOCK_SIZE;
        let mut c = cfg.clone();
        c.prefix.push_str(&format!("-{mib}"));
        let m = ObjectMedia::create(&c, UUID, 64 * seg * BLOCK_SIZE, seg).unwrap();
        let data = pattern(0, seg, 1);
        // 256 MiB in objects of this size, 1 and 4 in flight.
        for conc in [1usize, 4] {
            let rounds = 256 / mib;
            let objects_per_sync = conc as u64;
            let mut best = f64::MAX;
            let mut total = Duration::ZERO;
            let mut block = 0;
            for _ in 0..rounds / objects_per_sync {
                for _ in 0..objects_per_sync {
                    m.write_blocks(block % (64 * seg), &data).unwrap();
                    block += seg;
                }
                let t = Instant::now();
                m.sync().unwrap();
                let d = t.elapsed();
                total += d;
                best = best.min(d.as_secs_f64());
            }
            let mb = (rounds * mib) as f64 * 1.048576;
            println!(
                "PUT {mib:>2} MiB objects, {conc} per sync: {:.0} MB/s overall, best sync {:.1} ms",
                mb / total.as_secs_f64(),
                best * 1e3
            );
        }
        drop(m);
        let m = ObjectMedia::open(&c, UUID).unwrap();
        let written = (256 / mib) * seg;
        for (what, blocks) in [("4 KiB", 1u64), ("1 MiB", 256)] {
            let mut lat: Vec<f64> = Vec::new();
            let mut buf = vec![0u8; blocks as usize * BLOCK];
            for i in 0..200u64 {
                let at = (i * 7919 * blocks) % (written - blocks);
                let t = Instant::now();
                m.read_blocks(at, &mut buf).unwrap();
                lat.push(t.elapsed().as_secs_f64() * 1e6);
            }
            lat.sort_by(|a, b| a.total_cmp(b));
            println!(
                "ranged GET {what} from {mib} MiB objects: median {:.0} us, p90 {:.0} us, p99 {:.0} us",
                lat[lat.len() / 2],
                lat[lat.len() * 9 / 10],
                lat[lat.len() * 99 / 100]
            );
        }
        remove_all(m);
    }
}
