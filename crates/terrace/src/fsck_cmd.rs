//! `terrace fsck`: checks (and with `--repair` repairs) an unmounted pool,
//! its block and object tiers included, and prints the report.

use crate::tier_header_mend::Judged;
use crate::util::{self, CliError, CliResult};
use serde_json::json;
use std::path::Path;
use std::sync::Arc;
use terrace_media::{PmFile, PmMedia};

/// Problems (and repairs) the text report lists before it says how many
/// more there are.
const LISTED: usize = 50;

/// What fsck says when given a directory: a mount point names its pool
/// (fsck takes the pool, unmounted); any other directory is not a pool.
fn directory_given(dir: &Path) -> String {
    match util::mount_at(&util::abs_path(dir)) {
        Some(m) if m.fstype == "fuse.terrace" => format!(
            "is where the pool {} is mounted: fsck takes the pool (the path of its pm tier), \
             unmounted (`terrace umount {}` first)",
            m.source,
            dir.display()
        ),
        _ => {
            "is a directory: fsck takes a pool, the path of its pm tier (e.g. /dev/shm/pool)".into()
        }
    }
}

/// `terrace fsck POOL [--repair] [--data] [--json]`. Exit codes: 0 clean, 1
/// problems remain, 2 cannot check.
///
/// The text report lists at most [`LISTED`] problems and repairs (then
/// how many more); `--json` lists them all.
pub fn fsck(pool: &Path, repair: bool, data: bool, as_json: bool, quiet: bool) -> CliResult {
    let cannot = |e: CliError| e.code(2);
    match std::fs::metadata(pool) {
        Err(e) => return Err(cannot(CliError::at(pool, util::os_reason(&e)))),
        Ok(md) if md.is_dir() => return Err(cannot(CliError::at(pool, directory_given(pool)))),
        Ok(_) => {}
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
    // A check writes nothing: it opens the pool read-only, so it also
    // works on a read-only file system, snapshot or immutable file (as
    // `e2fsck -n`); only --repair needs to write.
    let opened = if repair {
        PmFile::open(&abs)
    } else {
        PmFile::open_read_only(&abs)
    };
    let pm = opened.map_err(|e| {
        let msg = match crate::tier_check::read_only_refusal(&abs, &e) {
            Some(line) if repair => format!("{} {line}", pool.display()),
            _ => e.to_string(),
        };
        cannot(CliError::new(msg))
    })?;
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
    // missing or truncated, is a problem of the pool; nothing is read from
    // it. A damaged or blank header is judged from what the pool recorded
    // on the device (`tier_header_mend.rs`): when the device is the tier,
    // it is checked, and --repair writes the header again.
    let mut tier_problems: Vec<String> = Vec::new();
    let mut tier_repairs: Vec<String> = Vec::new();
    // A tier left out (missing, wrong, damaged and not shown to be the
    // tier): repair touches nothing its logs may need.
    let mut tier_refused = false;
    // Tiers whose header is damaged or blank (`tier_header_mend.rs`).
    let mut damaged: Vec<&terrace_format::TierRecord> = Vec::new();
    let mut tiers: Vec<(u8, Arc<dyn terrace_media::BlockMedia>)> = Vec::new();
    for t in sb.tiers.iter().filter(|t| t.id != 0) {
        if t.kind == terrace_format::TierKind::S3 {
            match crate::object_tier::open(t, &sb, None) {
                Ok(m) => tiers.push((t.id, Arc::new(m))),
                Err(e) => {
                    tier_refused = true;
                    tier_problems.push(e)
                }
            }
            continue;
        }
        if let Err(e) = crate::tier_check::check_tier(t, &sb) {
            match util::read_head(Path::new(&t.path), terrace_format::BLOCK_SIZE as usize) {
                Ok(head) if crate::tier_check::header_is_damaged(t, &sb, &head) => damaged.push(t),
                _ => {
                    tier_refused = true;
                    tier_problems.push(e);
                }
            }
            continue;
        }
        let opened = if repair {
            terrace_media::BlockFile::open(&t.path)
        } else {
            terrace_media::BlockFile::open_read_only(&t.path)
        };
        match opened {
            Ok(f) => tiers.push((t.id, Arc::new(f))),
            Err(e) => util::warn(format!(
                "tier {} ({}) cannot be opened: {e}; logs stored there are not checked",
                t.id, t.path
            )),
        }
    }
    // Judged once every other tier is open: their logs map data there.
    for t in damaged {
        match crate::tier_header_mend::judge(t, &sb, &pm, repair, &tiers) {
            Judged::Usable {
                dev,
                problem,
                repaired,
            } => {
                tier_problems.extend(problem);
                tier_repairs.extend(repaired);
                tiers.push((t.id, dev));
            }
            Judged::Refused(e) => {
                tier_refused = true;
                tier_problems.push(e);
            }
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
    let tier_trouble = tier_refused || rep.tier_missing;
    rep.problems.splice(0..0, tier_problems);
    rep.repaired.splice(0..0, tier_repairs);
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
                if rep.mount_blocked || tier_trouble {
                    "kept while the problems below remain (what is damaged or missing may name them)"
                } else if repair {
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
        // At most LISTED lines of each: a tier that could not be opened
        // makes one line per file whose log is there (thousands).
        for r in rep.repaired.iter().take(LISTED) {
            util::out(&format!("  repaired: {r}"));
        }
        if rep.repaired.len() > LISTED {
            util::out(&format!(
                "  repaired: ... and {} more (`terrace fsck --json` lists them all)",
                rep.repaired.len() - LISTED
            ));
        }
        for p in rep.problems.iter().take(LISTED) {
            util::out(&format!("  problem: {p}"));
        }
        if rep.problems.len() > LISTED {
            util::out(&format!(
                "  problem: ... and {} more (`terrace fsck --json` lists them all)",
                rep.problems.len() - LISTED
            ));
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
                if tier_trouble {
                    "; put the missing or wrong tier back first, then check again"
                } else if rep.data_problems == k {
                    "; repair does not touch file data: mount the pool and run `terrace scrub`, which repairs damaged blocks from a good copy where one exists; a range with none reads EIO until that part of the file is rewritten or the file deleted"
                } else if repair {
                    ""
                } else {
                    "; run `terrace fsck --repair` to fix what can be fixed (damaged file data is left to `terrace scrub` on the mounted pool)"
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
