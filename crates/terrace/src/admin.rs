//! `terrace status`, `terrace umount` and `terrace fsck`.

use crate::control::{self, ControlError};
use crate::util::{self, CliError, CliResult};
use serde_json::{json, Value};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
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

fn n(v: &Value, k: &str) -> u64 {
    v.get(k).and_then(Value::as_u64).unwrap_or(0)
}

fn s<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or("?")
}

/// The kind (pm, ssd, hdd) of tier `id` in a status document.
fn tier_kind(st: &Value, id: u64) -> String {
    st.get("tiers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|t| n(t, "id") == id)
        .map_or_else(|| format!("tier {id}"), |t| s(t, "kind").to_string())
}

fn pct(used: u64, total: u64) -> String {
    if total == 0 {
        "-".into()
    } else {
        format!("{:.1}%", used as f64 * 100.0 / total as f64)
    }
}

/// Renders a status object as the human table.
pub fn render_status(st: &Value) -> String {
    let mut o = String::new();
    let mut line = |l: String| {
        o.push_str(&l);
        o.push('\n');
    };
    line(format!(
        "Terrace pool {}",
        util::fmt_uuid_hex(s(st, "uuid"))
    ));
    line(format!(
        "  mounted on    {}  (daemon pid {})",
        s(st, "mountpoint"),
        n(st, "pid")
    ));
    line(format!("  pool          {}", s(st, "pool")));
    line(format!("  media         {}", s(st, "media")));
    let clean = st
        .get("clean_last_time")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    line(format!(
        "  last unmount  {}",
        if clean {
            "clean"
        } else {
            "NOT clean (recovered at this mount)"
        }
    ));
    line(format!("  mounts        {}", n(st, "mount_count")));
    line(String::new());
    line(format!(
        "  {:<4} {:<4} {:>11} {:>11} {:>6}  {:<7} {}",
        "TIER", "KIND", "CAPACITY", "USED", "USE", "ACTIVE", "PATH"
    ));
    for t in st
        .get("tiers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let (cap, used) = (n(t, "capacity"), n(t, "used"));
        let active = t.get("active").and_then(Value::as_bool).unwrap_or(false);
        line(format!(
            "  {:<4} {:<4} {:>11} {:>11} {:>6}  {:<7} {}",
            n(t, "id"),
            s(t, "kind"),
            util::human_bytes(cap),
            util::human_bytes(used),
            pct(used, cap),
            if active { "yes" } else { "not yet" },
            s(t, "path")
        ));
    }
    line(String::new());
    let (iu, it) = (n(st, "inodes_used"), n(st, "inodes_total"));
    line(format!(
        "  inodes        {iu} used of {it} ({})",
        pct(iu, it)
    ));
    line(format!(
        "  room          {} for new data (dirty cached pages hold {})",
        util::human_bytes(n(st, "room_bytes")),
        util::human_bytes(st.get("cache").map(|c| n(c, "dirty_bytes")).unwrap_or(0))
    ));
    line(format!(
        "  logs          {} pages ({})",
        n(st, "log_pages"),
        util::human_bytes(n(st, "log_bytes"))
    ));
    if st
        .get("tiers")
        .and_then(|t| t.as_array())
        .is_some_and(|t| t.len() > 1)
    {
        let bad = n(st, "checksum_errors");
        line(format!(
            "  checksums     {} block-tier blocks read and verified, {}",
            n(st, "checksummed_reads"),
            if bad == 0 {
                "no damage found".to_string()
            } else {
                format!("{bad} DAMAGED (reads of them failed with EIO; see the daemon log)")
            }
        ));
    }
    if let Some(sc) = st
        .get("scrub")
        .and_then(|v| serde_json::from_value::<terrace_core::scrub::ScrubReport>(v.clone()).ok())
    {
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
    if let Some(lm) = st.get("log_migration") {
        if n(lm, "logs_on_tiers") > 0 || n(lm, "moved") > 0 {
            line(format!(
                "  cold logs     {} on block tiers ({}); {} moved off PM since mount, freeing {} of PM",
                n(lm, "logs_on_tiers"),
                util::human_bytes(n(lm, "tier_log_blocks") * 4096),
                n(lm, "moved"),
                util::human_bytes(n(lm, "pm_bytes_freed"))
            ));
        }
    }
    if let Some(sp) = st.get("space") {
        let (meta, logs) = (n(sp, "pm_metadata_bytes"), n(sp, "pm_log_bytes"));
        line(format!(
            "  metadata      {} of PM: superblocks, journal and inode table {}, log blocks {}{}",
            util::human_bytes(meta),
            util::human_bytes(meta - logs.min(meta)),
            util::human_bytes(logs),
            logs.checked_div(iu)
                .map(|b| format!(" ({} per inode in use)", util::human_bytes(b)))
                .unwrap_or_default()
        ));
        if n(sp, "promised_bytes") > 0 || n(sp, "waits") > 0 || n(sp, "promise_refusals") > 0 {
            line(format!(
                "                {} of PM promised to write-back commits; {} waits for migration ({} ms, {} gave up), {} cached writes refused for log room",
                util::human_bytes(n(sp, "promised_bytes")),
                n(sp, "waits"),
                n(sp, "wait_ms"),
                n(sp, "stalls"),
                n(sp, "promise_refusals")
            ));
        }
        if !s(sp, "state").is_empty() {
            line(format!(
                "  PM            {} ({} free, {} kept for logs)",
                s(sp, "state"),
                util::human_bytes(n(sp, "pm_free_bytes")),
                util::human_bytes(n(sp, "pm_reserve_bytes"))
            ));
        }
    }
    line(format!(
        "  data on PM    {} blocks ({})",
        n(st, "data_blocks"),
        util::human_bytes(n(st, "data_blocks") * 4096)
    ));
    if let Some(r) = st.get("recovery") {
        let was_clean = r.get("was_clean").and_then(Value::as_bool).unwrap_or(false);
        line(format!(
            "  recovery      {}: {} transactions rolled back, {} orphan inodes freed, {} link-count warnings",
            if was_clean { "none needed" } else { "ran at mount" },
            n(r, "rolled_back"),
            n(r, "orphans_freed"),
            n(r, "link_count_warnings")
        ));
    }
    line(format!(
        "  since mount   {} writes ({}), {} reads ({}), {} fsyncs{}",
        n(st, "writes"),
        util::human_bytes(n(st, "bytes_written")),
        n(st, "reads"),
        util::human_bytes(n(st, "bytes_read")),
        n(st, "fsyncs"),
        if st["fsync_in_kernel"].as_bool() == Some(true) {
            " (PM only: writes are durable on return, so the kernel completes fsync without asking)"
        } else {
            ""
        }
    ));
    line(format!(
        "                {} log commits ({} journaled), {} log compactions",
        n(st, "commits"),
        n(st, "journaled_commits"),
        n(st, "compactions")
    ));
    line(String::new());
    line(format!(
        "  {:<4} {:>9} {:>11} {:>11} {:>10} {:>10} {:>9}",
        "I/O", "ENTRIES", "WRITTEN", "READ", "AVG WRITE", "AVG READ", "FRAG"
    ));
    for t in st
        .get("tiers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let io = t.get("io").cloned().unwrap_or(Value::Null);
        let frag = t
            .get("extents")
            .and_then(|e| e.get("fragmentation_pct"))
            .and_then(Value::as_u64)
            .map(|f| format!("{f}%"))
            .unwrap_or_else(|| "-".into());
        line(format!(
            "  {:<4} {:>9} {:>11} {:>11} {:>10} {:>10} {:>9}",
            s(t, "kind"),
            n(t, "write_entries"),
            util::human_bytes(n(&io, "write_bytes")),
            util::human_bytes(n(&io, "read_bytes")),
            util::human_bytes(n(&io, "avg_write_bytes")),
            util::human_bytes(n(&io, "avg_read_bytes")),
            frag
        ));
    }
    if let Some(c) = st.get("cache") {
        line(String::new());
        let (hits, misses) = (n(c, "hits"), n(c, "misses"));
        line(format!(
            "  DRAM cache    {} of {} ({} dirty, {} clean, peak {}); hit ratio {}",
            util::human_bytes(n(c, "dirty_bytes") + n(c, "clean_bytes")),
            util::human_bytes(n(c, "bound_bytes")),
            util::human_bytes(n(c, "dirty_bytes")),
            util::human_bytes(n(c, "clean_bytes")),
            util::human_bytes(n(c, "peak_bytes")),
            pct(hits, hits + misses)
        ));
        line(format!(
            "                {} write-backs, {} in {} requests",
            n(c, "writebacks"),
            util::human_bytes(n(c, "writeback_bytes")),
            n(c, "writeback_requests")
        ));
    }
    if let Some(m) = st.get("migration") {
        line(format!(
            "  migration     policy {}, {}; PM threshold now {}%{}",
            s(m, "policy"),
            match (m.get("running").and_then(Value::as_bool), s(m, "waiting")) {
                (Some(true), "") => "running".to_string(),
                (Some(true), w) => format!("waiting: {w}"),
                _ => "idle".to_string(),
            },
            n(m, "pm_threshold_percent"),
            match s(m, "reason") {
                "" => String::new(),
                r => format!(" (last: {r})"),
            }
        ));
        line(format!(
            "                {} moved down, {} moved up, {} entries in {} groups, {}/s while copying",
            util::human_bytes(n(m, "bytes_down")),
            util::human_bytes(n(m, "bytes_up")),
            n(m, "entries_moved"),
            n(m, "groups"),
            util::human_bytes(n(m, "bandwidth_bytes_per_sec"))
        ));
        let per: Vec<String> = m
            .get("per_tier")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|t| {
                let id = n(t, "tier");
                let name = tier_kind(st, id);
                format!(
                    "{name} {} at {}/s",
                    util::human_bytes(n(t, "bytes")),
                    util::human_bytes(n(t, "bandwidth_bytes_per_sec"))
                )
            })
            .collect();
        if !per.is_empty() {
            line(format!("                copied into: {}", per.join(", ")));
        }
        line(format!(
            "                clean copies: {} of PM data has a copy on disk; {} copied, {} evicted for free; clean-hit ratio {}",
            util::human_bytes(n(m, "clean_pm_blocks") * 4096),
            util::human_bytes(n(m, "bytes_copied")),
            util::human_bytes(n(m, "bytes_evicted")),
            m.get("clean_hit_ratio")
                .and_then(Value::as_f64)
                .map(|r| format!("{:.0}%", r * 100.0))
                .unwrap_or_else(|| "-".into())
        ));
    }
    if let Some(c) = st.get("cleaner") {
        line(format!(
            "  recycling     {} extents recycled in {} rounds, {} valid blocks moved; efficiency {}",
            n(c, "extents_recycled"),
            n(c, "rounds"),
            n(c, "moved_blocks"),
            c.get("efficiency")
                .and_then(Value::as_f64)
                .map(|e| format!("{e:.2}"))
                .unwrap_or_else(|| "-".into())
        ));
    }
    for t in st
        .get("tiers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(wa) = t.get("write_amplification").and_then(Value::as_f64) {
            line(format!(
                "  {:<13} write amplification {wa:.2} (bytes written to it / bytes applications wrote)",
                s(t, "kind")
            ));
        }
    }
    let sp = st.get("sync_predictions").cloned().unwrap_or(Value::Null);
    line(format!(
        "  placement     policy {}: {} writes to PM, {} to block tiers, {} overflowed",
        s(st, "placement_policy"),
        n(st, "placed_pm"),
        n(st, "placed_block"),
        n(st, "placement_overflows")
    ));
    line(format!(
        "  predictions   synchronous right {} of {}, asynchronous right {} of {}",
        n(&sp, "predicted_sync_correct"),
        n(&sp, "predicted_sync_total"),
        n(&sp, "predicted_async_correct"),
        n(&sp, "predicted_async_total")
    ));
    o.pop();
    o
}

/// `terrace status MOUNTPOINT [--json]`.
pub fn status(mnt: &Path, as_json: bool) -> CliResult {
    let abs = util::abs_path(mnt);
    let files = util::run_files(&abs);
    let v = match control::request(
        &files.socket,
        &json!({"cmd": "status"}),
        Duration::from_secs(10),
    ) {
        Ok(v) => v,
        Err(ControlError::NoDaemon) => return Err(no_daemon(&abs, mnt)),
        Err(ControlError::Failed(m)) => return Err(CliError::at(mnt, m)),
    };
    if let Some(e) = control::answer_error(&v) {
        return Err(CliError::at(mnt, e));
    }
    let st = v.get("status").cloned().unwrap_or(Value::Null);
    if as_json {
        util::out(&serde_json::to_string_pretty(&st).unwrap_or_default());
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
    let files = util::run_files(&abs);
    let pid_file: Option<i32> = std::fs::read_to_string(&files.pid)
        .ok()
        .and_then(|s| s.trim().parse().ok());
    match control::request(
        &files.socket,
        &json!({"cmd": "umount", "lazy": lazy}),
        Duration::from_secs(120),
    ) {
        Ok(v) => {
            if let Some(e) = control::answer_error(&v) {
                return Err(CliError::new(e));
            }
            let pid = v
                .get("pid")
                .and_then(Value::as_i64)
                .map(|p| p as i32)
                .or(pid_file);
            if v.get("detached").and_then(Value::as_bool) == Some(true) {
                util::out(&format!(
                    "terrace: detached {}; the daemon (pid {}) closes the pool when the last open file closes",
                    mnt.display(),
                    pid.unwrap_or(0)
                ));
                return Ok(());
            }
            if !wait_gone(&abs, pid, UMOUNT_TIMEOUT) {
                return Err(CliError::at(
                    mnt,
                    format!(
                        "the daemon did not finish within {} s",
                        UMOUNT_TIMEOUT.as_secs()
                    ),
                ));
            }
            if v.get("read_only").and_then(Value::as_bool) == Some(true) {
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
                Err(_) => terrace_fuse::unmount(&abs, true),
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
pub fn fsck(pool: &Path, repair: bool, data: bool, as_json: bool) -> CliResult {
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
    if let Some(m) = util::mounts_of_pool(&abs).first() {
        return Err(cannot(CliError::at(
            pool,
            format!(
                "the pool is mounted on {}; unmount it first (terrace umount {})",
                m.mount_point.display(),
                m.mount_point.display()
            ),
        )));
    }
    let _lock = match util::lock_pool(&abs) {
        Ok(Some(l)) => l,
        Ok(None) => return Err(cannot(CliError::at(pool, util::busy_reason(&abs)))),
        Err(e) => return Err(cannot(CliError::at(pool, util::os_reason(&e)))),
    };
    let pm = PmFile::open(&abs).map_err(|e| cannot(CliError::new(e.to_string())))?;
    let sb =
        terrace_core::recovery::read_superblock(&pm).map_err(|e| cannot(CliError::at(pool, e)))?;
    let bar = if sb.inode_count >= 100_000 {
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
                if rep.unverified_blocks > 0 {
                    format!(
                        ", {} without a checksum (written before format 5)",
                        rep.unverified_blocks
                    )
                } else {
                    String::new()
                }
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
    let files = util::run_files(&abs);
    let req = match (key, value) {
        (Some(k), Some(v)) => json!({"cmd": "set", "key": k, "value": v}),
        _ => json!({"cmd": "settings"}),
    };
    let v = match control::request(&files.socket, &req, Duration::from_secs(10)) {
        Ok(v) => v,
        Err(ControlError::NoDaemon) => return Err(no_daemon(&abs, mnt)),
        Err(ControlError::Failed(m)) => return Err(CliError::at(mnt, m)),
    };
    if let Some(e) = control::answer_error(&v) {
        return Err(CliError::at(mnt, e));
    }
    if let (Some(k), Some(_)) = (key, value) {
        util::out(&format!("{k} = {}", s(&v, "value")));
        return Ok(());
    }
    let rows = v
        .get("settings")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut found = false;
    for r in &rows {
        let k = s(r, "key");
        if key.is_some_and(|want| want != k) {
            continue;
        }
        found = true;
        util::out(&format!("{k} = {}", s(r, "value")));
        if key.is_none() {
            util::out(&format!("    {}", s(r, "help")));
        }
    }
    if let (Some(k), false) = (key, found) {
        let known: Vec<&str> = rows.iter().map(|r| s(r, "key")).collect();
        return Err(CliError::new(format!(
            "unknown setting {k:?}; known: {}",
            known.join(", ")
        )));
    }
    Ok(())
}
