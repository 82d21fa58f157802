//! The human text of `terrace status` ([`render_status`]): a mount's
//! status as the table the command prints and the control socket serves.

use crate::control::protocol::DaemonStatus;
use crate::util;
use terrace_core::status::Status;

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The kind (pm, ssd, hdd) of tier `id` in a status.
fn tier_kind(st: &Status, id: u8) -> String {
    st.tiers
        .iter()
        .find(|t| t.id == id)
        .map_or_else(|| format!("tier {id}"), |t| t.kind.to_string())
}

fn pct(used: u64, total: u64) -> String {
    if total == 0 {
        "-".into()
    } else {
        format!("{:.1}%", used as f64 * 100.0 / total as f64)
    }
}

/// `text(n)` when `n` is not zero, else nothing.
fn if_any(n: u64, text: impl FnOnce(u64) -> String) -> String {
    if n > 0 {
        text(n)
    } else {
        String::new()
    }
}

/// A ratio with two decimals, `-` when there is none yet.
fn two_places(x: Option<f64>) -> String {
    x.map(|e| format!("{e:.2}")).unwrap_or_else(|| "-".into())
}

/// The `devices` line of `status`: errors block-tier devices returned since
/// mount (the operations failed with them; the daemon log names each).
fn device_errors_line(io_errors: u64, full_errors: u64) -> String {
    if io_errors == 0 && full_errors == 0 {
        return "no device errors since mount".to_string();
    }
    let plural = |n: u64| if n == 1 { "" } else { "s" };
    format!(
        "{io_errors} I/O error{} and {full_errors} device-full error{} since mount \
         (the operations failed with them; see the daemon log)",
        plural(io_errors),
        plural(full_errors)
    )
}

/// Application bytes written since mount below which `status` shows no
/// write amplification.
const WRITE_AMPLIFICATION_MIN_BYTES: u64 = 1 << 20;

/// Renders a mount's status as the human table.
pub fn render_status(daemon: &DaemonStatus) -> String {
    let st = &daemon.core;
    let mut o = String::new();
    let mut line = |l: String| {
        o.push_str(&l);
        o.push('\n');
    };
    line(format!("Terrace pool {}", util::fmt_uuid_hex(&st.uuid)));
    line(format!(
        "  mounted on    {}  (daemon pid {})",
        daemon.mountpoint, daemon.pid
    ));
    line(format!("  pool          {}", daemon.pool));
    if let Some(url) = &daemon.metrics {
        line(format!("  metrics       {url}"));
    }
    line(format!("  media         {}", st.media));
    line(format!(
        "  last unmount  {}",
        if st.clean_last_time {
            "clean"
        } else if st.recovery.recovered_in_memory {
            // `-o ro`: nothing was written, the media still need recovery.
            "NOT clean (recovered in memory only: read-only mount, media untouched; the next read-write mount recovers them)"
        } else {
            "NOT clean (recovered at this mount)"
        }
    ));
    line(format!("  mounts        {}", st.mount_count));
    if st.frozen {
        line(
            "  frozen        remounted read-only: the pool is clean on media and nothing is written until `mount -o remount,rw`"
                .into(),
        );
    }
    line(String::new());
    line(format!(
        "  {:<4} {:<4} {:>11} {:>11} {:>6}  {:<7} {}",
        "TIER", "KIND", "CAPACITY", "USED", "USE", "ACTIVE", "PATH"
    ));
    for t in &st.tiers {
        line(format!(
            "  {:<4} {:<4} {:>11} {:>11} {:>6}  {:<7} {}",
            t.id,
            t.kind,
            util::human_bytes(t.capacity),
            util::human_bytes(t.used),
            pct(t.used, t.capacity),
            if t.active { "yes" } else { "not yet" },
            t.path
        ));
    }
    line(String::new());
    let (iu, it) = (st.inodes_used, st.inodes_total);
    line(format!(
        "  inodes        {iu} used of {it} ({})",
        pct(iu, it)
    ));
    line(format!(
        "  room          {} for new data (dirty cached pages hold {})",
        util::human_bytes(st.room_bytes),
        util::human_bytes(st.cache.dirty_bytes)
    ));
    line(format!(
        "  logs          {} pages ({})",
        st.log_pages,
        util::human_bytes(st.log_bytes)
    ));
    if st.tiers.len() > 1 {
        let bad = st.checksum_errors;
        line(format!(
            "  checksums     {} block-tier blocks read and verified, {}",
            st.checksummed_reads,
            if bad == 0 {
                "no damage found".to_string()
            } else {
                // Counted per mismatch seen (a block read twice counts
                // twice; a damaged clean copy counts though no read failed).
                format!(
                    "DAMAGED data found: {bad} checksum mismatch{} since mount (never served: a read with no good copy fails with EIO, a damaged copy is dropped; `terrace scrub` lists and repairs what it can; the daemon log names tier and block)",
                    if bad == 1 { "" } else { "es" }
                )
            }
        ));
        line(format!(
            "  devices       {}",
            device_errors_line(st.device_errors, st.device_full_errors)
        ));
    }
    for t in &st.tiers {
        if let Some(f) = t.device_full {
            let next = match f.next_try_in_secs {
                0 => "with the next write that needs it".to_string(),
                n => format!("in {n} s"),
            };
            line(format!(
                "  FULL DEVICE   tier {} ({}): its device, or the file system holding {}, \
                 has been full for {} s: its free space does not count as room for new data; \
                 writes to it are tried again {next}, or as soon as that file system has room",
                t.id, t.kind, t.path, f.full_for_secs
            ));
        }
    }
    if st.background_panics > 0 {
        line(format!(
            "  BUG           {} background pass{} (write-back, migration) panicked since mount; \
             the threads went on (see the daemon log, and please report it)",
            st.background_panics,
            if st.background_panics == 1 { "" } else { "es" }
        ));
    }
    if let Some(sc) = &st.scrub {
        line(if sc.running {
            format!(
                "  scrub         running: {} of {} blocks read, {} damaged, {} repaired",
                sc.read_blocks, sc.total_blocks, sc.bad_blocks, sc.repaired_blocks
            )
        } else {
            format!(
                "  scrub         last {} {} s ago: {} blocks verified, {} damaged, {} repaired, {} not repairable",
                if sc.stopped { "stopped" } else { "finished" },
                unix_now().saturating_sub(sc.finished_unix),
                sc.checked_blocks,
                sc.bad_blocks,
                sc.repaired_blocks,
                sc.unrepairable.len()
            )
        });
    }
    let lm = &st.log_migration;
    if lm.logs_on_tiers > 0 || lm.moved > 0 {
        line(format!(
            "  cold logs     {} on block tiers ({}); {} moved off PM since mount, freeing {} of PM",
            lm.logs_on_tiers,
            util::human_bytes(lm.tier_log_bytes),
            lm.moved,
            util::human_bytes(lm.pm_bytes_freed)
        ));
    }
    let sp = &st.space;
    let (meta, logs) = (sp.pm_metadata_bytes, sp.pm_log_bytes);
    line(format!(
        "  metadata      {} of PM: superblocks, journal and inode table {}, log blocks {}{}",
        util::human_bytes(meta),
        util::human_bytes(meta - logs.min(meta)),
        util::human_bytes(logs),
        logs.checked_div(iu)
            .map(|b| format!(" ({} per inode in use)", util::human_bytes(b)))
            .unwrap_or_default()
    ));
    if sp.promised_bytes > 0 || sp.waits > 0 || sp.promise_refusals > 0 || sp.metadata_refused > 0 {
        line(format!(
            "                {} of PM promised to write-back commits; {} waits for migration ({} ms, {} gave up), {} cached writes refused for log room, {} metadata changes refused to keep room for cached data",
            util::human_bytes(sp.promised_bytes),
            sp.waits,
            sp.wait_ms,
            sp.stalls,
            sp.promise_refusals,
            sp.metadata_refused
        ));
    }
    if sp.rescued_bytes > 0 {
        line(format!(
            "                {} of PM data moved into the recycling reserve so that removals on a pool full on every tier could go on",
            util::human_bytes(sp.rescued_bytes)
        ));
    }
    if sp.pins_yielded_bytes > 0 {
        line(format!(
            "                {} of data pinned to PM by rules moved to a block tier to make room for metadata (those rules unmet until PM has room)",
            util::human_bytes(sp.pins_yielded_bytes)
        ));
    }
    if !sp.state.is_empty() {
        line(format!(
            "  PM            {} ({} free, {} kept for logs)",
            sp.state,
            util::human_bytes(sp.pm_free_bytes),
            util::human_bytes(sp.pm_reserve_bytes)
        ));
    }
    line(format!(
        "  data on PM    {} blocks ({})",
        st.data_blocks,
        util::human_bytes(st.data_blocks * 4096)
    ));
    let r = &st.recovery;
    line(format!(
        "  recovery      {}: {} transactions rolled back, {} orphan inodes freed, {} link-count warnings",
        if r.recovered_in_memory {
            "in memory only, the media untouched"
        } else if r.was_clean {
            "none needed"
        } else {
            "ran at mount"
        },
        r.rolled_back,
        r.orphans_freed,
        r.link_count_warnings
    ));
    if !r.damaged.is_empty() {
        line(format!(
            "  damage        {} problems served around read-only (data of damaged files returns EIO); run `terrace fsck --repair` after unmounting",
            r.damaged.len()
        ));
        for d in r.damaged.iter().take(5) {
            line(format!("                {d}"));
        }
    }
    line(format!(
        "  since mount   {} writes ({}), {} reads ({}), {} fsyncs{}",
        st.writes,
        util::human_bytes(st.bytes_written),
        st.reads,
        util::human_bytes(st.bytes_read),
        st.fsyncs,
        if st.fsync_in_kernel {
            " (PM only: writes are durable on return, so the kernel completes fsync without asking)"
        } else {
            ""
        }
    ));
    line(format!(
        "                {} log commits ({} journaled), {} log compactions",
        st.commits, st.journaled_commits, st.compactions
    ));
    if st.cache_fills > 0 || st.cache_fill_bytes > 0 {
        line(format!(
            "                {} files ({}) stored into the kernel's page cache after their writers closed them",
            st.cache_fills,
            util::human_bytes(st.cache_fill_bytes)
        ));
    }
    line(String::new());
    line(format!(
        "  {:<4} {:>9} {:>11} {:>11} {:>10} {:>10} {:>9}",
        "I/O", "ENTRIES", "WRITTEN", "READ", "AVG WRITE", "AVG READ", "FRAG"
    ));
    for t in &st.tiers {
        let io = |f: fn(&terrace_core::status::IoStats) -> u64| {
            util::human_bytes(t.io.as_ref().map_or(0, f))
        };
        // Extent use of the extents holding data (100% = no fragmentation);
        // a tier without data has none to measure.
        let frag = t
            .extents
            .filter(|e| e.valid_blocks > 0)
            .map(|e| format!("{}%", e.fragmentation_pct))
            .unwrap_or_else(|| "-".into());
        line(format!(
            "  {:<4} {:>9} {:>11} {:>11} {:>10} {:>10} {:>9}",
            t.kind,
            t.write_entries,
            io(|io| io.write_bytes),
            io(|io| io.read_bytes),
            io(|io| io.avg_write_bytes),
            io(|io| io.avg_read_bytes),
            frag
        ));
    }
    for t in &st.tiers {
        let discarded = t.io.as_ref().map_or(0, |io| io.discard_bytes);
        if discarded > 0 {
            line(format!(
                "  {:<4} {} of free extents discarded since mount (fstrim{})",
                t.kind,
                util::human_bytes(discarded),
                if st.discard.interval_ns > 0 {
                    ", online discard"
                } else {
                    ""
                }
            ));
        }
    }
    if st.discard.interval_ns > 0 {
        line(discard_line(&st.discard));
    }
    for t in &st.tiers {
        if let Some(e) = t.extents.filter(|e| e.dead_blocks > 0) {
            line(format!(
                "  {:<4} {} in dead blocks (freed inside extents that still hold data; recycling reclaims them)",
                t.kind,
                util::human_bytes(e.dead_blocks * terrace_format::BLOCK_SIZE)
            ));
        }
    }
    for t in st.tiers.iter().filter(|t| t.shared_saved_bytes > 0) {
        line(format!(
            "  {:<4} {} shared by copies (copy_file_range clones), saving {}",
            t.kind,
            util::human_bytes(t.shared_bytes),
            util::human_bytes(t.shared_saved_bytes)
        ));
    }
    for t in &st.tiers {
        if let Some(o) = &t.object {
            line(format!(
                "  {:<4} {} parts, {} stored, {} live ({:.0}% live){}",
                t.kind,
                o.parts,
                util::human_bytes(o.stored_bytes),
                util::human_bytes(o.live_bytes),
                o.live_fraction * 100.0,
                if_any(o.dead_parts, |n| format!(", {n} dead parts to delete"))
            ));
            let r = &o.requests;
            line(format!(
                "  {:<4} requests: {} GETs ({} down), {} PUTs ({} up), {} deletes, {} lists, {} failed{}",
                t.kind,
                r.gets,
                util::human_bytes(r.get_bytes),
                r.puts,
                util::human_bytes(r.put_bytes),
                r.deletes,
                r.lists,
                r.failures,
                if_any(r.failed_tries, |n| format!(
                    " ({n} HTTP tries failed, retried or not)"
                ))
            ));
            let c = &o.cleaning;
            line(format!(
                "  {:<4} cleaning: {} parts cleaned in {} passes, {} rewritten, {} reclaimed; \
                 efficiency {} (parts under {}% live, up to {} per pass)",
                t.kind,
                c.parts_cleaned,
                c.passes,
                util::human_bytes(c.bytes_rewritten),
                util::human_bytes(c.bytes_reclaimed),
                two_places(c.efficiency),
                st.settings.object_clean_live_percent,
                util::human_bytes(st.settings.object_clean_bytes_per_pass)
            ));
            if let (Some(since), Some(err)) = (o.unreachable_since_unix, &o.last_error) {
                line(format!(
                    "  {:<4} UNREACHABLE for {} s (reads of its data fail with EIO; other tiers are served): {err}",
                    t.kind,
                    unix_now().saturating_sub(since)
                ));
            }
        }
    }
    let c = &st.cache;
    line(String::new());
    line(format!(
        "  DRAM cache    {} of {} ({} dirty, {} clean, peak {}); hit ratio {}",
        util::human_bytes(c.dirty_bytes + c.clean_bytes),
        util::human_bytes(c.bound_bytes),
        util::human_bytes(c.dirty_bytes),
        util::human_bytes(c.clean_bytes),
        util::human_bytes(c.peak_bytes),
        pct(c.hits, c.hits + c.misses)
    ));
    line(format!(
        "                {} write-backs, {} in {} requests",
        c.writebacks,
        util::human_bytes(c.writeback_bytes),
        c.writeback_requests
    ));
    let m = &st.migration;
    line(format!(
        "  migration     policy {}, {}; PM threshold now {}%{}{}",
        m.policy,
        match (m.running, m.waiting.as_str()) {
            (true, "") => "running".to_string(),
            (true, w) => format!("waiting: {w}"),
            _ => "idle".to_string(),
        },
        m.pm_threshold_percent,
        // Block tiers drain only into a tier below them.
        if st.tiers.iter().filter(|t| t.id != 0).count() > 1 {
            format!(", block tiers {}%", m.block_threshold_percent)
        } else {
            String::new()
        },
        match m.reason.as_str() {
            "" => String::new(),
            r => format!(" (last: {r})"),
        }
    ));
    line(format!(
        "                {} moved down, {} moved up, {} entries in {} groups, {}/s while copying",
        util::human_bytes(m.bytes_down),
        util::human_bytes(m.bytes_up),
        m.entries_moved,
        m.groups,
        util::human_bytes(m.bandwidth_bytes_per_sec)
    ));
    line(format!(
        "                {} passes since mount; {} looks for work in them (at PM data, logs, rules)",
        m.passes, m.looks
    ));
    if m.reshared_bytes > 0 {
        line(format!(
            "                {} of copy_file_range clones followed the blocks they share",
            util::human_bytes(m.reshared_bytes)
        ));
    }
    let per: Vec<String> = m
        .per_tier
        .iter()
        .map(|t| {
            format!(
                "{} {} at {}/s",
                tier_kind(st, t.tier),
                util::human_bytes(t.bytes),
                util::human_bytes(t.bandwidth_bytes_per_sec)
            )
        })
        .collect();
    if !per.is_empty() {
        line(format!("                copied into: {}", per.join(", ")));
    }
    line(format!(
        "                clean copies: {} of PM data has a copy on disk; {} copied, {} evicted for free; clean-hit ratio {}",
        util::human_bytes(m.clean_pm_blocks * 4096),
        util::human_bytes(m.bytes_copied),
        util::human_bytes(m.bytes_evicted),
        m.clean_hit_ratio
            .map(|r| format!("{:.0}%", r * 100.0))
            .unwrap_or_else(|| "-".into())
    ));
    let c = &st.cleaner;
    line(format!(
        "  recycling     {} extents recycled in {} rounds ({} to make room for data), {} valid blocks moved; efficiency {}",
        c.extents_recycled,
        c.rounds,
        c.urgent_rounds,
        c.moved_blocks,
        two_places(c.efficiency)
    ));
    for t in &st.tiers {
        if let Some(wa) = t.write_amplification {
            // Below a mebibyte the tier's own writes at mount (its header's
            // epoch, 4 KiB) make a ratio that says nothing (1024 for 4 bytes).
            let shown = if st.bytes_written < WRITE_AMPLIFICATION_MIN_BYTES {
                "- (applications wrote under 1 MiB since mount)".to_string()
            } else {
                format!("{wa:.2} (bytes written to it / bytes applications wrote)")
            };
            line(format!("  {:<13} write amplification {shown}", t.kind));
        }
    }
    let sp = &st.sync_predictions;
    line(format!(
        "  placement     policy {}: {} writes to PM, {} to block tiers, {} overflowed",
        st.placement_policy, st.placed_pm, st.placed_block, st.placement_overflows
    ));
    let pc = &st.placement_by_class;
    for (name, c) in [
        ("synchronous", &pc.sync),
        ("async small", &pc.async_small),
        ("async large", &pc.async_large),
    ] {
        if c.pm_writes + c.block_writes + c.overflow_writes == 0 {
            continue;
        }
        line(format!(
            "    {name:<11} {} to PM ({}), {} to block tiers by choice ({}), {} to block tiers because PM was full ({})",
            c.pm_writes,
            util::human_bytes(c.pm_bytes),
            c.block_writes,
            util::human_bytes(c.block_bytes),
            c.overflow_writes,
            util::human_bytes(c.overflow_bytes)
        ));
    }
    if st.prealloc_in_place_writes > 0 {
        line(format!(
            "    {:<11} {} into their preallocated blocks (no room left for a copy)",
            "in place", st.prealloc_in_place_writes
        ));
    }
    line(format!(
        "  predictions   synchronous right {} of {}, asynchronous right {} of {}",
        sp.predicted_sync_correct,
        sp.predicted_sync_total,
        sp.predicted_async_correct,
        sp.predicted_async_total
    ));
    o.pop();
    o
}

/// `terrace status`'s line for online discard (`-o discard`).
fn discard_line(d: &terrace_core::trim::DiscardStatus) -> String {
    let mut text = format!(
        "  online discard: free extents discarded at most every {}; {} in {} pass{}",
        terrace_policy::settings::format_duration(d.interval_ns),
        util::human_bytes(d.bytes),
        d.passes,
        if d.passes == 1 { "" } else { "es" }
    );
    if d.unsupported_tiers > 0 {
        text += &format!(
            "; {} tier(s) skipped: their device cannot discard",
            d.unsupported_tiers
        );
    }
    if d.errors > 0 {
        text += &format!(
            "; {} pass(es) stopped by a device error (see the daemon's log)",
            d.errors
        );
    }
    text
}

#[cfg(test)]
mod tests {
    use super::render_status;
    use crate::control::protocol::DaemonStatus;
    use std::sync::Arc;
    use terrace_media::{MemMedia, PmMedia};

    /// The status of a PM-only pool in memory, as the daemon sends it.
    fn status() -> DaemonStatus {
        let pm = Arc::new(MemMedia::new(4 << 20));
        let params = terrace_core::FormatParams {
            uuid: [7; 16],
            inode_count: 64,
            tiers: vec![terrace_format::TierRecord {
                id: 0,
                kind: terrace_format::TierKind::Pm,
                size: pm.len(),
                extent_size: 0,
                path: "/dev/shm/pool".into(),
                epoch: 0,
            }],
            root_uid: 0,
            root_gid: 0,
        };
        terrace_core::format(&*pm, &params).expect("format");
        let fs = terrace_core::Fs::mount(pm).expect("mount");
        let core = fs.status();
        fs.unmount().unwrap();
        DaemonStatus {
            core,
            pid: 1,
            mountpoint: "/mnt/t".into(),
            pool: "/dev/shm/pool".into(),
            read_only: false,
            metrics: None,
        }
    }

    fn line<'a>(text: &'a str, label: &str) -> &'a str {
        text.lines()
            .find(|l| l.trim_start().starts_with(label))
            .unwrap_or_else(|| panic!("no {label} line in {text}"))
    }

    /// `-o ro` of a pool that was not cleanly unmounted recovers it in
    /// memory only: the status says so, not that recovery ran (which reads
    /// as if the media had been repaired).
    #[test]
    fn an_ro_mount_recovered_in_memory_says_the_media_are_untouched() {
        let mut st = status();
        st.read_only = true;
        st.core.clean_last_time = false;
        st.core.recovery.was_clean = false;
        st.core.recovery.recovered_in_memory = true;
        st.core.recovery.rolled_back = 2;
        let text = render_status(&st);
        let last = line(&text, "last unmount");
        assert!(
            last.contains("NOT clean (recovered in memory only")
                && last.contains("media untouched")
                && !last.contains("recovered at this mount"),
            "{last}"
        );
        let rec = line(&text, "recovery ");
        assert!(
            rec.contains("in memory only, the media untouched: 2 transactions rolled back")
                && !rec.contains("ran at mount"),
            "{rec}"
        );
        // A read-write mount after a crash recovered the pool on media.
        st.read_only = false;
        st.core.recovery.recovered_in_memory = false;
        let text = render_status(&st);
        assert!(
            line(&text, "last unmount").ends_with("NOT clean (recovered at this mount)"),
            "{text}"
        );
        assert!(line(&text, "recovery ").contains("ran at mount"), "{text}");
        // And a clean one needed none.
        let text = render_status(&status());
        assert!(line(&text, "last unmount").ends_with("clean"), "{text}");
        assert!(line(&text, "recovery ").contains("none needed"), "{text}");
    }
}
