//! One scrape: the core's status and the FUSE request latencies, taken at
//! the scrape, as Prometheus metric families (names `terrace_*`, units in
//! the names, counters ending in `_total`).
//!
//! Tiers are labelled `tier` (`pm`, `ssd`, `hdd`) and `tier_id` (the id
//! `terrace status` shows: two tiers of one kind differ by it). Counters
//! count since the mount. Values that are not counters of events — sums
//! over the files that exist now, like the predictor's accuracy, or a
//! throughput the core measured — are gauges. A metric the core has no
//! value for (no block tier, no scrub yet) is left out rather than
//! exported as 0.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::fmt;
use terrace_core::status::Status;
use terrace_fuse::latency::{OpHistogram, BOUNDS_NS};

/// What one scrape exports.
#[derive(Debug, Clone)]
pub struct Sample {
    /// The core's status.
    pub status: Status,
    /// The request latencies per FUSE operation (operations seen so far).
    pub latency: Vec<OpHistogram>,
    /// The mount is read-only.
    pub read_only: bool,
}

/// The sample as a page of the Prometheus text format.
pub fn render(sample: Sample) -> Result<String, fmt::Error> {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(sample));
    let mut page = String::new();
    prometheus_client::encoding::prometheus_text::encode(&mut page, &registry)?;
    Ok(page)
}

/// Labels of one series.
type Labels = Vec<(&'static str, String)>;

/// Writes metric families into one encoder.
struct Families<'a> {
    enc: DescriptorEncoder<'a>,
}

impl Families<'_> {
    fn family(
        &mut self,
        name: &str,
        help: &str,
        kind: MetricType,
        each: impl FnOnce(&mut MetricEncoder) -> fmt::Result,
    ) -> fmt::Result {
        let mut m = self.enc.encode_descriptor(name, help, None, kind)?;
        each(&mut m)
    }

    /// A gauge without labels.
    fn gauge(&mut self, name: &str, help: &str, v: f64) -> fmt::Result {
        self.family(name, help, MetricType::Gauge, |m| m.encode_gauge(&v))
    }

    /// A counter without labels; `name` without the `_total` the encoder adds.
    fn counter(&mut self, name: &str, help: &str, v: u64) -> fmt::Result {
        self.family(name, help, MetricType::Counter, |m| {
            m.encode_counter::<NoLabelSet, _, u64>(&v, None)
        })
    }

    /// A gauge with one series per label set (none: the family is left out).
    fn gauges(&mut self, name: &str, help: &str, rows: &[(Labels, f64)]) -> fmt::Result {
        if rows.is_empty() {
            return Ok(());
        }
        self.family(name, help, MetricType::Gauge, |m| {
            for (labels, v) in rows {
                m.encode_family(labels)?.encode_gauge(v)?;
            }
            Ok(())
        })
    }

    /// A counter with one series per label set (none: left out).
    fn counters(&mut self, name: &str, help: &str, rows: &[(Labels, u64)]) -> fmt::Result {
        if rows.is_empty() {
            return Ok(());
        }
        self.family(name, help, MetricType::Counter, |m| {
            for (labels, v) in rows {
                m.encode_family(labels)?
                    .encode_counter::<NoLabelSet, _, u64>(v, None)?;
            }
            Ok(())
        })
    }
}

fn tier_labels(kind: &str, id: u8) -> Labels {
    vec![("tier", kind.to_string()), ("tier_id", id.to_string())]
}

fn bool_gauge(b: bool) -> f64 {
    if b {
        1.0
    } else {
        0.0
    }
}

impl Collector for Sample {
    fn encode(&self, enc: DescriptorEncoder) -> fmt::Result {
        let mut f = Families { enc };
        self.pool(&mut f)?;
        self.tiers(&mut f)?;
        self.object_tiers(&mut f)?;
        self.application(&mut f)?;
        self.placement(&mut f)?;
        self.migration(&mut f)?;
        self.cache(&mut f)?;
        self.predictor(&mut f)?;
        self.errors(&mut f)?;
        self.fuse(&mut f)
    }
}

impl Sample {
    fn pool(&self, f: &mut Families) -> fmt::Result {
        let s = &self.status;
        f.family(
            "terrace_pool",
            "The mounted pool (always 1): its id, policies, and whether the mount is read-only.",
            MetricType::Info,
            |m| {
                let labels: Labels = vec![
                    ("version", env!("CARGO_PKG_VERSION").to_string()),
                    ("uuid", s.uuid.clone()),
                    ("placement_policy", s.placement_policy.clone()),
                    ("migration_policy", s.migration.policy.clone()),
                    ("read_only", self.read_only.to_string()),
                ];
                m.encode_info(&labels)
            },
        )?;
        f.gauge("terrace_inodes_used", "Live inodes.", s.inodes_used as f64)?;
        f.gauge(
            "terrace_inodes_total",
            "Inode slots of the pool.",
            s.inodes_total as f64,
        )?;
        f.gauge(
            "terrace_available_bytes",
            "Bytes new data can still get over every tier (what df shows as available).",
            s.room_bytes as f64,
        )?;
        f.gauge(
            "terrace_log_bytes",
            "PM bytes the per-file logs take.",
            s.log_bytes as f64,
        )
    }

    fn tiers(&self, f: &mut Families) -> fmt::Result {
        let tiers = &self.status.tiers;
        let rows = |v: &dyn Fn(&terrace_core::status::TierStatus) -> Option<f64>| {
            tiers
                .iter()
                .filter_map(|t| v(t).map(|x| (tier_labels(t.kind, t.id), x)))
                .collect::<Vec<_>>()
        };
        let io_rows = |v: &dyn Fn(&terrace_core::status::IoStats) -> u64| {
            tiers
                .iter()
                .filter_map(|t| t.io.map(|io| (tier_labels(t.kind, t.id), v(&io))))
                .collect::<Vec<_>>()
        };
        f.gauges(
            "terrace_tier_capacity_bytes",
            "Capacity of each tier (for PM: its data pool).",
            &rows(&|t| Some(t.capacity as f64)),
        )?;
        f.gauges(
            "terrace_tier_used_bytes",
            "Bytes in use on each tier.",
            &rows(&|t| Some(t.used as f64)),
        )?;
        f.gauges(
            "terrace_tier_dead_bytes",
            "Bytes of each block tier freed inside extents that still hold data: not free until extent recycling reclaims them.",
            &rows(&|t| t.extents.map(|e| (e.dead_blocks * terrace_format::BLOCK_SIZE) as f64)),
        )?;
        f.gauges(
            "terrace_tier_active",
            "1 when the tier is in use by this mount (a block tier needs its device).",
            &rows(&|t| Some(bool_gauge(t.active))),
        )?;
        f.gauges(
            "terrace_tier_device_full",
            "1 while a block tier's device (or the file system holding its image) is full: its free space is no room for new data.",
            &rows(&|t| (t.id != 0).then(|| bool_gauge(t.device_full.is_some()))),
        )?;
        f.counters(
            "terrace_tier_read_requests",
            "Read requests each tier served since mount (PM: data loads by the file system).",
            &io_rows(&|io| io.read_requests),
        )?;
        f.counters(
            "terrace_tier_read_bytes",
            "Bytes read from each tier since mount.",
            &io_rows(&|io| io.read_bytes),
        )?;
        f.counters(
            "terrace_tier_write_requests",
            "Write requests each tier served since mount (PM: data stores by the file system).",
            &io_rows(&|io| io.write_requests),
        )?;
        f.counters(
            "terrace_tier_written_bytes",
            "Bytes written to each tier since mount.",
            &io_rows(&|io| io.write_bytes),
        )?;
        f.counters(
            "terrace_tier_syncs",
            "Device cache flushes (fdatasync) of each tier since mount.",
            &io_rows(&|io| io.syncs),
        )?;
        f.counters(
            "terrace_tier_discarded_bytes",
            "Bytes of free extents discarded on each block tier since mount (fstrim and online discard).",
            &io_rows(&|io| io.discard_bytes),
        )?;
        f.gauges(
            "terrace_tier_write_amplification_ratio",
            "Bytes written to each block tier / bytes applications wrote, since mount.",
            &rows(&|t| t.write_amplification),
        )
    }

    /// The requests each object (S3) tier sent to its store, and what it
    /// stores: one series per object tier (none without one).
    fn object_tiers(&self, f: &mut Families) -> fmt::Result {
        let objects: Vec<_> = self
            .status
            .tiers
            .iter()
            .filter_map(|t| t.object.as_ref().map(|o| (tier_labels(t.kind, t.id), o)))
            .collect();
        if objects.is_empty() {
            return Ok(());
        }
        let with_op = |labels: &Labels, op: &str| {
            let mut l = labels.clone();
            l.push(("op", op.to_string()));
            l
        };
        let mut requests = Vec::new();
        for (labels, o) in &objects {
            let r = &o.requests;
            for (op, n) in [
                ("get", r.gets),
                ("put", r.puts),
                ("delete", r.deletes),
                ("list", r.lists),
            ] {
                requests.push((with_op(labels, op), n));
            }
        }
        let counters = |v: &dyn Fn(&terrace_core::status::ObjectTierStatus) -> u64| {
            objects
                .iter()
                .map(|(l, o)| (l.clone(), v(o)))
                .collect::<Vec<_>>()
        };
        let gauges = |v: &dyn Fn(&terrace_core::status::ObjectTierStatus) -> f64| {
            objects
                .iter()
                .map(|(l, o)| (l.clone(), v(o)))
                .collect::<Vec<_>>()
        };
        f.counters(
            "terrace_object_requests",
            "Successful requests each object tier sent to its store since mount, by op (get: ranged reads and the marker; put: parts and the marker; delete; list). GETs and PUTs are what object stores charge for.",
            &requests,
        )?;
        f.counters(
            "terrace_object_downloaded_bytes",
            "Bytes each object tier's GETs fetched since mount.",
            &counters(&|o| o.requests.get_bytes),
        )?;
        f.counters(
            "terrace_object_uploaded_bytes",
            "Bytes each object tier's PUTs uploaded since mount.",
            &counters(&|o| o.requests.put_bytes),
        )?;
        f.counters(
            "terrace_object_failed_requests",
            "Requests to the store that failed after their retries (reads of its data failed with EIO).",
            &counters(&|o| o.requests.failures),
        )?;
        f.counters(
            "terrace_object_failed_tries",
            "HTTP tries that failed (5xx or 429 answers, connection errors, time-outs), retried or not.",
            &counters(&|o| o.requests.failed_tries),
        )?;
        f.gauges(
            "terrace_object_parts",
            "Parts (objects) each object tier has in its store.",
            &gauges(&|o| o.parts as f64),
        )?;
        f.gauges(
            "terrace_object_stored_bytes",
            "Bytes of those parts.",
            &gauges(&|o| o.stored_bytes as f64),
        )?;
        f.gauges(
            "terrace_object_live_bytes",
            "Bytes of those parts that files still read (the rest is what cleaning wins back).",
            &gauges(&|o| o.live_bytes as f64),
        )?;
        f.gauges(
            "terrace_object_pending_bytes",
            "Bytes written to each object tier but not yet uploaded.",
            &gauges(&|o| o.pending_bytes as f64),
        )?;
        f.gauges(
            "terrace_object_unreachable",
            "1 while the store fails requests (until one succeeds).",
            &gauges(&|o| bool_gauge(o.unreachable_since_unix.is_some())),
        )?;
        f.counters(
            "terrace_object_cleaning_reclaimed_bytes",
            "Bytes of the parts object cleaning emptied (by rewriting their live data) and deleted, since mount.",
            &counters(&|o| o.cleaning.bytes_reclaimed),
        )?;
        f.counters(
            "terrace_object_cleaning_rewritten_bytes",
            "Live bytes object cleaning copied into new parts, since mount.",
            &counters(&|o| o.cleaning.bytes_rewritten),
        )
    }

    fn application(&self, f: &mut Families) -> fmt::Result {
        let s = &self.status;
        f.counter(
            "terrace_reads",
            "Reads through the mount that reached the daemon.",
            s.reads,
        )?;
        f.counter(
            "terrace_read_bytes",
            "Bytes read through the mount that reached the daemon.",
            s.bytes_read,
        )?;
        f.counter("terrace_writes", "Writes through the mount.", s.writes)?;
        f.counter(
            "terrace_written_bytes",
            "Bytes written through the mount.",
            s.bytes_written,
        )?;
        f.counter(
            "terrace_fsyncs",
            "fsync calls the daemon handled (none reach it once fsync is known to be a no-op on this pool).",
            s.fsyncs,
        )?;
        f.counter("terrace_commits", "Log commits.", s.commits)?;
        f.counter(
            "terrace_journaled_commits",
            "Commits that went through the journal (several inodes at once).",
            s.journaled_commits,
        )?;
        f.counter("terrace_log_compactions", "Log compactions.", s.compactions)?;
        let sp = &s.space;
        f.counter(
            "terrace_pm_room_waits",
            "Writes that waited for PM room.",
            sp.waits,
        )?;
        f.counter(
            "terrace_pm_room_wait_milliseconds",
            "Time writes spent waiting for PM room, ms.",
            sp.wait_ms,
        )?;
        f.counter(
            "terrace_pm_room_stalls",
            "Waits for PM room that gave up.",
            sp.stalls,
        )?;
        f.counter(
            "terrace_pm_rescued_bytes",
            "PM data moved into a block tier's recycling reserve so that removals on a pool full on every tier could go on.",
            sp.rescued_bytes,
        )?;
        let d = &s.discard;
        f.gauge(
            "terrace_online_discard_interval_seconds",
            "Least time between two online discards (-o discard); 0: online discard is off.",
            d.interval_ns as f64 / 1e9,
        )?;
        f.counter(
            "terrace_online_discard_passes",
            "Online discards of the block tiers' free extents since mount.",
            d.passes,
        )?;
        f.counter(
            "terrace_online_discard_errors",
            "Online discards a device error stopped.",
            d.errors,
        )
    }

    fn placement(&self, f: &mut Families) -> fmt::Result {
        let p = &self.status.placement_by_class;
        let mut writes = Vec::new();
        let mut bytes = Vec::new();
        for (class, c) in [
            ("sync", &p.sync),
            ("async_small", &p.async_small),
            ("async_large", &p.async_large),
        ] {
            for (landing, w, b) in [
                ("pm", c.pm_writes, c.pm_bytes),
                ("block", c.block_writes, c.block_bytes),
                ("block_overflow", c.overflow_writes, c.overflow_bytes),
            ] {
                let labels: Labels = vec![
                    ("class", class.to_string()),
                    ("landing", landing.to_string()),
                ];
                writes.push((labels.clone(), w));
                bytes.push((labels, b));
            }
        }
        f.counters(
            "terrace_placed_writes",
            "Writes per class (sync, async_small, async_large) by where they landed: pm, a block tier the policy chose (block), or a block tier because PM was full (block_overflow).",
            &writes,
        )?;
        f.counters("terrace_placed_bytes", "Bytes of those writes.", &bytes)
    }

    fn migration(&self, f: &mut Families) -> fmt::Result {
        let m = &self.status.migration;
        f.counters(
            "terrace_migration_bytes",
            "Bytes migration moved: down to slower tiers, up to PM.",
            &[
                (vec![("direction", "down".to_string())], m.bytes_down),
                (vec![("direction", "up".to_string())], m.bytes_up),
            ],
        )?;
        f.counter(
            "terrace_migration_copied_bytes",
            "Bytes written to block tiers as clean copies (the PM copy stays).",
            m.bytes_copied,
        )?;
        f.counter(
            "terrace_migration_evicted_bytes",
            "PM bytes freed by dropping the PM side of data with a clean copy.",
            m.bytes_evicted,
        )?;
        let kind = |id: u8| {
            self.status
                .tiers
                .iter()
                .find(|t| t.id == id)
                .map_or("unknown", |t| t.kind)
        };
        f.counters(
            "terrace_migration_tier_bytes",
            "Bytes migration wrote to each target tier.",
            &m.per_tier
                .iter()
                .map(|t| (tier_labels(kind(t.tier), t.tier), t.bytes))
                .collect::<Vec<_>>(),
        )?;
        f.gauge(
            "terrace_migration_bandwidth_bytes_per_second",
            "Migration throughput while copying (copy, device sync and commit), as the core measured it; 0 before any migration.",
            m.bandwidth_bytes_per_sec as f64,
        )?;
        f.gauge(
            "terrace_migration_running",
            "1 while some tier is being drained.",
            bool_gauge(m.running),
        )?;
        if let Some(r) = m.clean_hit_ratio {
            f.gauge(
                "terrace_migration_clean_hit_ratio",
                "PM reads that hit data with a clean copy / all PM reads (NVMFS policy).",
                r,
            )?;
        }
        Ok(())
    }

    fn cache(&self, f: &mut Families) -> fmt::Result {
        let c = &self.status.cache;
        f.counter(
            "terrace_cache_hits",
            "Block-tier reads served from the DRAM page cache.",
            c.hits,
        )?;
        f.counter(
            "terrace_cache_misses",
            "Block-tier reads that went to a device.",
            c.misses,
        )?;
        if c.hits + c.misses > 0 {
            f.gauge(
                "terrace_cache_hit_ratio",
                "Hits / (hits + misses) of the DRAM page cache since mount (what `terrace status` shows; rate() of the two counters gives it over a window).",
                c.hits as f64 / (c.hits + c.misses) as f64,
            )?;
        }
        f.gauges(
            "terrace_cache_bytes",
            "Bytes in the DRAM page cache, dirty and clean.",
            &[
                (vec![("state", "dirty".to_string())], c.dirty_bytes as f64),
                (vec![("state", "clean".to_string())], c.clean_bytes as f64),
            ],
        )?;
        f.gauge(
            "terrace_cache_bound_bytes",
            "Bound of the DRAM page cache.",
            c.bound_bytes as f64,
        )?;
        f.counter(
            "terrace_cache_writeback_bytes",
            "Bytes the DRAM page cache wrote back to block tiers.",
            c.writeback_bytes,
        )?;
        f.counter(
            "terrace_cache_evictions",
            "Clean pages evicted from the DRAM page cache.",
            c.evictions,
        )
    }

    fn predictor(&self, f: &mut Families) -> fmt::Result {
        let p = &self.status.sync_predictions;
        let rows = |sync: u64, asyn: u64| {
            vec![
                (vec![("predicted", "sync".to_string())], sync as f64),
                (vec![("predicted", "async".to_string())], asyn as f64),
            ]
        };
        f.gauges(
            "terrace_sync_predictions_settled",
            "Synchronicity predictions settled, summed over the files that exist now.",
            &rows(p.predicted_sync_total, p.predicted_async_total),
        )?;
        f.gauges(
            "terrace_sync_predictions_correct",
            "Of those, the predictions that were right.",
            &rows(p.predicted_sync_correct, p.predicted_async_correct),
        )?;
        if let Some(r) = p.ratio() {
            f.gauge(
                "terrace_sync_prediction_accuracy_ratio",
                "Correct / settled synchronicity predictions over the files that exist now.",
                r,
            )?;
        }
        Ok(())
    }

    fn errors(&self, f: &mut Families) -> fmt::Result {
        let s = &self.status;
        f.counter(
            "terrace_checksummed_reads",
            "Block-tier data blocks read and verified against their checksum.",
            s.checksummed_reads,
        )?;
        f.counter(
            "terrace_checksum_errors",
            "Block-tier data blocks whose checksum did not match (the read failed with EIO).",
            s.checksum_errors,
        )?;
        f.counter(
            "terrace_device_full_errors",
            "Writes or syncs a block tier's device refused with ENOSPC.",
            s.device_full_errors,
        )?;
        f.counter(
            "terrace_device_errors",
            "Reads, writes or syncs of a block tier's device that failed with another error (EIO ...).",
            s.device_errors,
        )?;
        if let Some(r) = &s.scrub {
            f.gauge(
                "terrace_scrub_running",
                "1 while a scrub runs (the scrub_* values are the running or the last scrub's).",
                bool_gauge(r.running),
            )?;
            f.gauge(
                "terrace_scrub_checked_blocks",
                "Blocks whose checksum matched.",
                r.checked_blocks as f64,
            )?;
            f.gauge(
                "terrace_scrub_bad_blocks",
                "Blocks that were damaged or could not be read.",
                r.bad_blocks as f64,
            )?;
            f.gauge(
                "terrace_scrub_repaired_blocks",
                "Damaged blocks repaired from a good copy.",
                r.repaired_blocks as f64,
            )?;
        }
        Ok(())
    }

    fn fuse(&self, f: &mut Families) -> fmt::Result {
        if self.latency.is_empty() {
            return Ok(());
        }
        let bounds: Vec<f64> = BOUNDS_NS.iter().map(|&ns| ns as f64 / 1e9).collect();
        f.family(
            "terrace_fuse_request_duration_seconds",
            "Time the daemon took to answer FUSE requests, per operation (from the handler's start to its reply; kernel queueing not included).",
            MetricType::Histogram,
            |m| {
                for h in &self.latency {
                    let buckets: Vec<(f64, u64)> = bounds
                        .iter()
                        .copied()
                        .chain(std::iter::once(f64::INFINITY))
                        .zip(h.buckets.iter().copied())
                        .collect();
                    let labels: Labels = vec![("op", h.op.name().to_string())];
                    m.encode_family(&labels)?.encode_histogram::<NoLabelSet>(
                        h.sum_ns as f64 / 1e9,
                        h.count(),
                        &buckets,
                        None,
                    )?;
                }
                Ok(())
            },
        )
    }
}

#[cfg(test)]
mod tests;
