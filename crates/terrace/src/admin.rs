//! `terrace status`, `terrace umount` and `terrace fsck`.

use crate::control::protocol::{
    self, DaemonStatus, GetStatus, ListSettings, SetSetting, Unmount, UnmountReply,
};
use crate::control::{self, ControlError};
use crate::util::{self, CliError, CliResult};
use serde_json::json;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use terrace_core::status::Status;
use terrace_media::{PmFile, PmMedia};

/// How long `terrace umount` waits for the mount to go and the daemon to exit.
const UMOUNT_TIMEOUT: Duration = Duration::from_secs(30);

pub(crate) fn no_daemon(mnt: &Path, shown: &Path) -> CliError {
    match util::mount_at(mnt) {
        Some(m) if m.fstype.starts_with("fuse") => CliError::at(
            shown,
            format!("mounted ({} from {}), but no terrace daemon answers; it may have died: run `terrace umount {}`", m.fstype, m.source, shown.display()),
        ),
        Some(m) => CliError::at(shown, format!("not a Terrace mount ({} from {})", m.fstype, m.source)),
        None => CliError::at(shown, "not mounted (no terrace daemon serves it)"),
    }
}

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

/// Renders a mount's status as the human table.
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
                format!("{bad} DAMAGED (reads of them failed with EIO; see the daemon log)")
            }
        ));
        line(format!(
            "  devices       {}",
            device_errors_line(st.device_errors, st.device_full_errors)
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
            util::human_bytes(lm.tier_log_blocks * 4096),
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
    if sp.promised_bytes > 0 || sp.waits > 0 || sp.promise_refusals > 0 {
        line(format!(
            "                {} of PM promised to write-back commits; {} waits for migration ({} ms, {} gave up), {} cached writes refused for log room",
            util::human_bytes(sp.promised_bytes),
            sp.waits,
            sp.wait_ms,
            sp.stalls,
            sp.promise_refusals
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
        if r.was_clean { "none needed" } else { "ran at mount" },
        r.rolled_back,
        r.orphans_freed,
        r.link_count_warnings
    ));
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
                if o.dead_parts > 0 {
                    format!(", {} dead parts to delete", o.dead_parts)
                } else {
                    String::new()
                }
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
                if r.failed_tries > 0 {
                    format!(" ({} HTTP tries failed, retried or not)", r.failed_tries)
                } else {
                    String::new()
                }
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
                c.efficiency
                    .map(|e| format!("{e:.2}"))
                    .unwrap_or_else(|| "-".into()),
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
        "  migration     policy {}, {}; PM threshold now {}%{}",
        m.policy,
        match (m.running, m.waiting.as_str()) {
            (true, "") => "running".to_string(),
            (true, w) => format!("waiting: {w}"),
            _ => "idle".to_string(),
        },
        m.pm_threshold_percent,
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
        "  recycling     {} extents recycled in {} rounds, {} valid blocks moved; efficiency {}",
        c.extents_recycled,
        c.rounds,
        c.moved_blocks,
        c.efficiency
            .map(|e| format!("{e:.2}"))
            .unwrap_or_else(|| "-".into())
    ));
    for t in &st.tiers {
        if let Some(wa) = t.write_amplification {
            line(format!(
                "  {:<13} write amplification {wa:.2} (bytes written to it / bytes applications wrote)",
                t.kind
            ));
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

/// The status of the daemon serving `mnt`, or the error to print (no
/// daemon, a failed or refused request). For `status` and `iostat`.
pub(crate) fn fetch_status(mnt: &Path) -> CliResult<DaemonStatus> {
    let abs = util::abs_path(mnt);
    match control::call(
        &util::control_socket(&abs),
        GetStatus {},
        Duration::from_secs(10),
    ) {
        Ok(r) => Ok(r.status),
        Err(ControlError::NoDaemon) => Err(no_daemon(&abs, mnt)),
        Err(ControlError::Failed(m)) => Err(CliError::at(mnt, m)),
        Err(ControlError::Refused(r)) => Err(CliError::at(mnt, r.error)),
    }
}

/// `terrace status MOUNTPOINT [--json]`.
pub fn status(mnt: &Path, as_json: bool) -> CliResult {
    let st = fetch_status(mnt)?;
    if as_json {
        // Through a JSON value, whose objects keep their keys sorted: the
        // output lists the fields in the same order as always.
        let v = serde_json::to_value(&st).unwrap_or_default();
        util::out(&serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        util::out(&render_status(&st));
    }
    Ok(())
}

fn wait_gone(mnt: &Path, pid: Option<i32>, timeout: Duration) -> bool {
    let start = Instant::now();
    loop {
        let mounted = util::mount_at(mnt).is_some_and(|m| m.fstype.starts_with("fuse"));
        let alive = pid.is_some_and(util::process_alive);
        if !mounted && !alive {
            return true;
        }
        if start.elapsed() > timeout {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `terrace umount MOUNTPOINT [--lazy]`.
pub fn umount(mnt: &Path, lazy: bool) -> CliResult {
    let abs = util::abs_path(mnt);
    let files = util::RunFiles {
        socket: util::control_socket(&abs),
        ..util::run_files(&abs)
    };
    match control::call(&files.socket, Unmount { lazy }, Duration::from_secs(120)) {
        Ok(UnmountReply::Detached { pid, .. }) => {
            util::out(&format!(
                "terrace: detached {}; the daemon (pid {pid}) closes the pool when the last open file closes",
                mnt.display(),
            ));
            Ok(())
        }
        Ok(UnmountReply::Done { pid, read_only, .. }) => {
            if !wait_gone(&abs, Some(pid as i32), UMOUNT_TIMEOUT) {
                return Err(CliError::at(
                    mnt,
                    format!(
                        "the daemon did not finish within {} s",
                        UMOUNT_TIMEOUT.as_secs()
                    ),
                ));
            }
            if read_only {
                util::out(&format!(
                    "terrace: unmounted {}; the mount was read-only: nothing was written",
                    mnt.display()
                ));
            } else {
                util::out(&format!(
                    "terrace: unmounted {}; the pool is persisted and marked clean",
                    mnt.display()
                ));
            }
            Ok(())
        }
        Err(ControlError::Refused(r)) => Err(CliError::new(r.error)),
        Err(ControlError::Failed(m)) => Err(CliError::at(mnt, m)),
        Err(ControlError::NoDaemon) => {
            let Some(m) = util::mount_at(&abs) else {
                return Err(CliError::at(mnt, "not mounted"));
            };
            if !m.fstype.starts_with("fuse") {
                return Err(CliError::at(
                    mnt,
                    format!("not a Terrace mount ({} from {})", m.fstype, m.source),
                ));
            }
            let r = match terrace_fuse::unmount(&abs, lazy) {
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) && !lazy => {
                    return Err(CliError::at(mnt, "target is busy (open files or a working directory inside); close them, or use --lazy"));
                }
                // umount2 failed for another reason: try detaching. A
                // failed fusermount (not privileged) fails the same way
                // lazily; its message is reported once, below.
                Err(e) if e.raw_os_error().is_some() && !lazy => terrace_fuse::unmount(&abs, true),
                ok => ok,
            };
            r.map_err(|e| CliError::at(mnt, format!("cannot unmount: {}", util::os_reason(&e))))?;
            let _ = std::fs::remove_file(&files.socket);
            let _ = std::fs::remove_file(&files.pid);
            util::warn(format!(
                "no terrace daemon answered for {}: unmounted it without marking the pool clean (the next mount recovers it)",
                mnt.display()
            ));
            Ok(())
        }
    }
}

/// `terrace fsck POOL [--repair] [--data] [--json]`. Exit codes: 0 clean, 1
/// problems remain, 2 cannot check.
pub fn fsck(pool: &Path, repair: bool, data: bool, as_json: bool, quiet: bool) -> CliResult {
    let cannot = |e: CliError| e.code(2);
    if let Err(e) = std::fs::metadata(pool) {
        return Err(cannot(CliError::at(pool, util::os_reason(&e))));
    }
    let abs = util::abs_path(pool);
    let head =
        util::read_head(&abs, 8192).map_err(|e| cannot(CliError::at(pool, util::os_reason(&e))))?;
    if util::detect_content(&head) != Some("a Terrace pool") {
        return Err(cannot(CliError::at(
            pool,
            "not a Terrace pool (no Terrace superblock)",
        )));
    }
    let _lock = util::lock_unmounted_pool(pool, &abs, "unmount it first").map_err(cannot)?;
    let pm = PmFile::open(&abs).map_err(|e| cannot(CliError::new(e.to_string())))?;
    let sb =
        terrace_core::recovery::read_superblock(&pm).map_err(|e| cannot(CliError::at(pool, e)))?;
    let bar = if sb.inode_count >= 100_000
        && !quiet
        && std::io::IsTerminal::is_terminal(&std::io::stderr())
    {
        let b = indicatif::ProgressBar::with_draw_target(
            Some(sb.inode_count),
            indicatif::ProgressDrawTarget::stderr(),
        );
        if let Ok(style) =
            indicatif::ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} inodes ({eta})")
        {
            b.set_style(style.progress_chars("=> "));
        }
        b.set_message(if repair { "repairing" } else { "checking" });
        Some(b)
    } else {
        None
    };
    let mut progress = |done: u64, total: u64| {
        if let Some(b) = &bar {
            b.set_length(total);
            b.set_position(done);
        }
    };
    // Logs that log migration moved live on the block tiers: fsck reads them
    // there. A tier that cannot be opened is left out (its logs are
    // reported as on a missing device, never repaired away).
    // A tier whose header does not name this pool and tier, or that is
    // missing or truncated, is a problem of the pool; nothing is read from it.
    let mut tier_problems: Vec<String> = Vec::new();
    let mut tiers: Vec<(u8, Arc<dyn terrace_media::BlockMedia>)> = Vec::new();
    for t in sb.tiers.iter().filter(|t| t.id != 0) {
        if t.kind == terrace_format::TierKind::S3 {
            match crate::object_tier::open(t, &sb, None) {
                Ok(m) => tiers.push((t.id, Arc::new(m))),
                Err(e) => tier_problems.push(e),
            }
            continue;
        }
        if let Err(e) = crate::tier_check::check_tier(t, &sb) {
            tier_problems.push(e);
            continue;
        }
        match terrace_media::BlockFile::open(&t.path) {
            Ok(f) => tiers.push((t.id, Arc::new(f))),
            Err(e) => util::warn(format!(
                "tier {} ({}) cannot be opened: {e}; logs stored there are not checked",
                t.id, t.path
            )),
        }
    }
    let result = if repair {
        let media: Arc<dyn PmMedia> = Arc::new(pm);
        let r = terrace_core::fsck::repair(media.clone(), &tiers, &mut progress);
        if let Err(e) = media.sync_all() {
            return Err(CliError::at(
                pool,
                format!("cannot persist the repairs: {}", util::os_reason(&e)),
            ));
        }
        match r {
            Ok(fixed) if data => terrace_core::fsck::check_data(&*media, &tiers, &mut progress)
                .map(|mut d| {
                    d.repaired = fixed.repaired;
                    d
                }),
            other => other,
        }
    } else if data {
        terrace_core::fsck::check_data(&pm, &tiers, &mut progress)
    } else {
        terrace_core::fsck::check(&pm, &tiers, &mut progress)
    };
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    let mut rep = result.map_err(|e| cannot(CliError::at(pool, e)))?;
    rep.problems.splice(0..0, tier_problems);
    let clean = rep.is_clean();
    if as_json {
        let mut v = serde_json::to_value(&rep).unwrap_or_else(|_| json!({}));
        if let Some(o) = v.as_object_mut() {
            o.insert("pool".into(), json!(abs.to_string_lossy()));
            o.insert("uuid".into(), json!(util::fmt_uuid(&sb.uuid)));
            o.insert("clean".into(), json!(clean));
        }
        util::out(&serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        util::out(&format!(
            "{}: Terrace pool {}",
            pool.display(),
            util::fmt_uuid(&sb.uuid)
        ));
        util::out(&format!(
            "  {} inodes, {} log pages, {} data blocks, {} free blocks",
            rep.inodes, rep.log_pages, rep.data_blocks, rep.free_blocks
        ));
        util::out(&format!(
            "  last unmount: {}",
            if rep.clean_unmount {
                "clean"
            } else {
                "not clean (the next mount recovers)"
            }
        ));
        if rep.open_transactions > 0 {
            util::out(&format!(
                "  {} open journal transactions ({})",
                rep.open_transactions,
                if repair {
                    "rolled back"
                } else {
                    "the next mount rolls them back"
                }
            ));
        }
        if !rep.orphans.is_empty() {
            let list: Vec<String> = rep.orphans.iter().take(20).map(|i| i.to_string()).collect();
            let more = if rep.orphans.len() > 20 {
                format!(" and {} more", rep.orphans.len() - 20)
            } else {
                String::new()
            };
            util::out(&format!(
                "  {} orphan inodes ({}{more}): {}",
                rep.orphans.len(),
                list.join(", "),
                if repair {
                    "freed"
                } else {
                    "the next mount frees them"
                }
            ));
        }
        if data {
            util::out(&format!(
                "  block-tier data: {} blocks verified, {} damaged{}",
                rep.checked_blocks,
                rep.bad_blocks,
                util::unverified_note(rep.unverified_blocks)
            ));
        }
        if rep.object_orphans > 0 {
            util::out(&format!(
                "  {} orphan parts ({}) on the object tier, from uploads never committed (the next mount deletes them; so does --repair)",
                rep.object_orphans,
                util::human_bytes(rep.object_orphan_bytes)
            ));
        }
        for r in &rep.repaired {
            util::out(&format!("  repaired: {r}"));
        }
        for p in &rep.problems {
            util::out(&format!("  problem: {p}"));
        }
        if clean {
            util::out("  result: clean");
        } else {
            let k = rep.problems.len();
            util::out(&format!(
                "  result: {k} {}{}",
                if k == 1 {
                    "problem remains"
                } else {
                    "problems remain"
                },
                if repair {
                    ""
                } else {
                    "; run `terrace fsck --repair` to fix what can be fixed"
                }
            ));
        }
    }
    if clean {
        Ok(())
    } else {
        Err(CliError::new("").code(1))
    }
}

/// `terrace set MOUNTPOINT [KEY [VALUE]]`: list, show or change settings of a
/// mounted pool at run time.
pub fn set(mnt: &Path, key: Option<&str>, value: Option<&str>) -> CliResult {
    let abs = util::abs_path(mnt);
    let files = util::RunFiles {
        socket: util::control_socket(&abs),
        ..util::run_files(&abs)
    };
    let failed = |e: ControlError| match e {
        ControlError::NoDaemon => no_daemon(&abs, mnt),
        ControlError::Failed(m) => CliError::at(mnt, m),
        ControlError::Refused(r) => CliError::at(mnt, r.error),
    };
    let timeout = Duration::from_secs(10);
    if let (Some(k), Some(v)) = (key, value) {
        let req = SetSetting {
            key: k.into(),
            value: v.into(),
        };
        let now = control::call(&files.socket, req, timeout).map_err(failed)?;
        util::out(&format!("{k} = {}", now.value));
        return Ok(());
    }
    let rows = control::call(&files.socket, ListSettings {}, timeout)
        .map_err(failed)?
        .settings;
    let mut found = false;
    for r in &rows {
        // The same names as `set MOUNTPOINT KEY VALUE` accepts (`policy`),
        // shown as typed.
        if key.is_some_and(|want| protocol::setting_name(want) != r.key) {
            continue;
        }
        found = true;
        util::out(&format!("{} = {}", key.unwrap_or(&r.key), r.value));
        if key.is_none() {
            util::out(&format!("    {}", r.help));
        }
    }
    if let (Some(k), false) = (key, found) {
        let known: Vec<&str> = rows.iter().map(|r| r.key.as_str()).collect();
        return Err(CliError::new(format!(
            "unknown setting {k:?}; known: {}",
            known.join(", ")
        )));
    }
    Ok(())
}
