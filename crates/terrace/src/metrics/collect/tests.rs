//! Tests of one scrape: the families and series a status and latencies
//! give, read back from the rendered page.

use super::*;
use terrace_fuse::latency::{Op, RequestLatency};

fn status() -> Status {
    let mut v: serde_json::Value =
        serde_json::from_str(include_str!("../../../tests/data/status.json")).unwrap();
    v["bytes_written"] = 12345.into();
    v["writes"] = 3.into();
    v["cache"]["hits"] = 9.into();
    v["migration"]["bytes_down"] = (1u64 << 20).into();
    serde_json::from_value(v).unwrap()
}

/// The value of the series `name` (with its labels, as written).
fn value(page: &str, series: &str) -> Option<f64> {
    page.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.parse().unwrap())
}

#[test]
fn a_page_has_the_pool_tier_and_request_metrics_with_units_in_names() {
    let l = RequestLatency::default();
    l.record(Op::Write, 3_000);
    l.record(Op::Write, 40_000);
    l.record(Op::Lookup, 1_000);
    let page = render(Sample {
        status: status(),
        latency: l.snapshot(),
        read_only: false,
    })
    .unwrap();
    assert_eq!(value(&page, "terrace_written_bytes_total"), Some(12345.0));
    assert_eq!(value(&page, "terrace_writes_total"), Some(3.0));
    assert_eq!(value(&page, "terrace_cache_hits_total"), Some(9.0));
    assert_eq!(
        value(&page, "terrace_migration_bytes_total{direction=\"down\"}"),
        Some(1048576.0)
    );
    assert!(
        value(
            &page,
            "terrace_tier_capacity_bytes{tier=\"pm\",tier_id=\"0\"}"
        )
        .is_some_and(|v| v > 0.0),
        "{page}"
    );
    assert!(page.contains("# TYPE terrace_tier_written_bytes_total counter\n"));
    assert!(page.contains("# TYPE terrace_fuse_request_duration_seconds histogram\n"));
    // Buckets are cumulative: 3 µs is in le=5e-6 and above, 40 µs from
    // le=5e-5 on.
    let bucket = |le: &str| {
        value(
            &page,
            &format!("terrace_fuse_request_duration_seconds_bucket{{op=\"write\",le=\"{le}\"}}"),
        )
    };
    assert_eq!(bucket("2e-06"), Some(0.0), "{page}");
    assert_eq!(bucket("5e-06"), Some(1.0), "{page}");
    assert_eq!(bucket("5e-05"), Some(2.0), "{page}");
    assert_eq!(bucket("+Inf"), Some(2.0), "{page}");
    assert_eq!(
        value(
            &page,
            "terrace_fuse_request_duration_seconds_count{op=\"write\"}"
        ),
        Some(2.0)
    );
    assert_eq!(
        value(
            &page,
            "terrace_fuse_request_duration_seconds_sum{op=\"write\"}"
        ),
        Some(43e-6)
    );
    assert!(!page.contains("op=\"read\""), "ops never seen are left out");
    assert!(page.contains("terrace_pool_info{version="), "{page}");
    // No scrub yet, and no write amplification for PM: nothing made up.
    assert!(!page.contains("terrace_scrub_"));
    assert!(page.contains("terrace_tier_write_amplification_ratio{tier=\"ssd\",tier_id=\"1\"} 0"));
    assert!(!page.contains("terrace_tier_write_amplification_ratio{tier=\"pm\""));
    // Every sample line is `name{labels} value` of a family declared
    // above it.
    let mut declared = std::collections::HashSet::new();
    for line in page.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            declared.insert(rest.split(' ').next().unwrap().to_string());
        } else if !line.starts_with('#') {
            let name = line.split(['{', ' ']).next().unwrap();
            assert!(name.starts_with("terrace_"), "{line}");
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .filter(|f| declared.contains(*f))
                .unwrap_or(name);
            assert!(declared.contains(family), "undeclared: {line}");
            let v = line.rsplit(' ').next().unwrap();
            assert!(v.parse::<f64>().is_ok() || v == "+Inf", "{line}");
        }
    }
}

#[test]
fn an_object_tier_exports_its_requests_and_bytes_per_tier() {
    let page = render(Sample {
        status: status(),
        latency: Vec::new(),
        read_only: false,
    })
    .unwrap();
    assert!(!page.contains("terrace_object_"), "no object tier: {page}");
    let mut v = serde_json::to_value(status()).unwrap();
    let mut s3 = v["tiers"][1].clone();
    s3["id"] = 2.into();
    s3["kind"] = "s3".into();
    s3["object"] = serde_json::json!({
        "parts": 3, "stored_bytes": 3 << 20, "live_bytes": 2 << 20, "live_fraction": 0.66,
        "dead_parts": 0, "pending_bytes": 0,
        "requests": {"puts": 4, "put_bytes": 3 << 20, "gets": 7, "get_bytes": 1 << 20,
                     "deletes": 1, "lists": 2, "failures": 0, "failed_tries": 5}
    });
    v["tiers"].as_array_mut().unwrap().push(s3);
    v["cache"]["misses"] = 3.into();
    let page = render(Sample {
        status: serde_json::from_value(v).unwrap(),
        latency: Vec::new(),
        read_only: false,
    })
    .unwrap();
    let s3 = "tier=\"s3\",tier_id=\"2\"";
    for (series, want) in [
        (
            format!("terrace_object_requests_total{{{s3},op=\"put\"}}"),
            4.0,
        ),
        (
            format!("terrace_object_requests_total{{{s3},op=\"get\"}}"),
            7.0,
        ),
        (
            format!("terrace_object_requests_total{{{s3},op=\"delete\"}}"),
            1.0,
        ),
        (
            format!("terrace_object_requests_total{{{s3},op=\"list\"}}"),
            2.0,
        ),
        (
            format!("terrace_object_uploaded_bytes_total{{{s3}}}"),
            3145728.0,
        ),
        (
            format!("terrace_object_downloaded_bytes_total{{{s3}}}"),
            1048576.0,
        ),
        (format!("terrace_object_failed_requests_total{{{s3}}}"), 0.0),
        (format!("terrace_object_failed_tries_total{{{s3}}}"), 5.0),
        (format!("terrace_object_parts{{{s3}}}"), 3.0),
        (format!("terrace_object_unreachable{{{s3}}}"), 0.0),
        ("terrace_cache_hit_ratio".to_string(), 0.75),
    ] {
        assert_eq!(value(&page, &series), Some(want), "{series}: {page}");
    }
    // Only object tiers have object series.
    assert!(
        !page.contains("terrace_object_parts{tier=\"ssd\""),
        "{page}"
    );
}

#[test]
fn no_request_seen_means_no_histogram_family() {
    let page = render(Sample {
        status: status(),
        latency: Vec::new(),
        read_only: true,
    })
    .unwrap();
    assert!(!page.contains("terrace_fuse_request_duration_seconds"));
    assert!(page.contains("read_only=\"true\""));
}
