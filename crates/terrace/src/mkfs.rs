//! `terrace mkfs`: formats a pool from one PM tier and any number of block
//! tiers (and at most one object tier, last).
//!
//! Tiers go from fastest to slowest (pm, ssd, hdd, s3), the order `tier
//! add` keeps when it appends a tier: block tiers given out of that order
//! (an hdd before an ssd) are a usage error, found before anything is
//! written. The pm tier is tier 0 wherever it is given.
//!
//! This file checks the whole command and writes the pool; the tier
//! arguments are parsed in `mkfs/spec.rs`, each tier file or device is
//! examined in `mkfs/target.rs`, and the object tier is checked and created
//! in `mkfs/object.rs`.

mod object;
mod spec;
mod target;

use object::check_object_tier;
pub(crate) use object::{create_object_tier, object_tier_record};
pub use spec::{parse_tier, TierSpec};
pub(crate) use target::{check_free_space, examine, write_tier_header, Target};

use crate::util::{self, CliError, CliResult};
use std::fs::{File, OpenOptions};
use terrace_format::{TierHeader, TierKind, TierRecord, BLOCK_SIZE, MAX_TIERS};
use terrace_media::{PmFile, PmKind, PmMedia};

/// Everything `mkfs` needs.
#[derive(Debug, Clone)]
pub struct MkfsConfig {
    /// Tiers in command-line order.
    pub tiers: Vec<TierSpec>,
    /// Inode slots (0 = default: from the pool's size, see
    /// [`terrace_core::mkfs::default_pool_inode_count`]).
    pub inodes: u64,
    /// Extent size of block tiers.
    pub extent_size: u64,
    /// Overwrite existing pools and file systems.
    pub force: bool,
}

fn new_uuid() -> [u8; 16] {
    let mut b = [0u8; 16];
    let from_urandom = File::open("/dev/urandom").and_then(|f| {
        use std::io::Read;
        let mut f = f;
        f.read_exact(&mut b)
    });
    if from_urandom.is_err() {
        use rand::RngCore;
        rand::rngs::OsRng.fill_bytes(&mut b);
    }
    b[6] = (b[6] & 0x0f) | 0x40; // version 4
    b[8] = (b[8] & 0x3f) | 0x80; // RFC 4122 variant
    b
}

pub(crate) fn tier_header(r: &TierRecord, pool_uuid: [u8; 16]) -> TierHeader {
    TierHeader {
        pool_uuid,
        id: r.id,
        kind: r.kind,
        size: r.size,
        extent_size: r.extent_size,
        epoch: r.epoch,
    }
}

/// Why the block tiers of the command line are out of order, if they are:
/// tiers go from fastest to slowest, as `tier add` requires of each tier
/// it appends ([`terrace_core::tier_attach::attach_problem`]: a tier's kind
/// is never faster than the last one's). The pm tier becomes tier 0
/// wherever it is given; where an s3 tier stands is [`check_object_tier`]'s
/// concern.
fn order_problem(tiers: &[TierSpec]) -> Option<CliError> {
    let block: Vec<&TierSpec> = tiers
        .iter()
        .filter(|t| matches!(t.kind, TierKind::Ssd | TierKind::Hdd))
        .collect();
    let w = block.windows(2).find(|w| w[1].kind < w[0].kind)?;
    Some(
        CliError::at(
            &w[1].path,
            format!(
                "an {} tier cannot follow the {} tier {}: tiers go from fastest to slowest \
                 (pm, ssd, hdd, s3), so give every ssd tier before the hdd tiers",
                w[1].kind.name(),
                w[0].kind.name(),
                w[0].path.display()
            ),
        )
        .code(2),
    )
}

/// Runs `mkfs`.
pub fn run(cfg: &MkfsConfig) -> CliResult {
    let pms = cfg.tiers.iter().filter(|t| t.kind == TierKind::Pm).count();
    if pms != 1 {
        return Err(CliError::usage(format!(
            "a pool needs exactly one pm tier (got {pms}); e.g. terrace mkfs --tier pm:/dev/shm/pool:1G"
        )));
    }
    if cfg.tiers.len() > MAX_TIERS {
        return Err(CliError::usage(format!(
            "at most {MAX_TIERS} tiers (got {})",
            cfg.tiers.len()
        )));
    }
    if let Some(e) = order_problem(&cfg.tiers) {
        return Err(e);
    }
    let es = cfg.extent_size;
    if es < BLOCK_SIZE || !es.is_power_of_two() || es > (1 << 30) {
        return Err(CliError::usage(format!(
            "--extent-size {es}: must be a power of two from 4K to 1G (default 512K)"
        )));
    }
    if cfg.inodes != 0 && cfg.inodes < 16 {
        return Err(CliError::usage(format!(
            "--inodes {}: at least 16",
            cfg.inodes
        )));
    }
    // PM first: it is tier 0.
    let mut specs: Vec<&TierSpec> = cfg
        .tiers
        .iter()
        .filter(|t| t.kind == TierKind::Pm)
        .collect();
    specs.extend(
        cfg.tiers
            .iter()
            .filter(|t| !matches!(t.kind, TierKind::Pm | TierKind::S3)),
    );
    let object = check_object_tier(cfg, specs.len())?;
    let mut targets = Vec::new();
    for s in specs {
        // Before examine, which locks the target (a second lock on the same
        // file would fail as "in use").
        if targets
            .iter()
            .any(|o: &Target| o.path == util::abs_path(&s.path))
        {
            return Err(CliError::at(&s.path, "named by two tiers").code(2));
        }
        let t = examine(s, cfg.force)?;
        if t.spec.kind != TierKind::Pm && t.size < es * 2 {
            return Err(
                CliError::at(&s.path, "too small for two extents; lower --extent-size").code(2),
            );
        }
        targets.push(t);
    }
    check_free_space(&targets, cfg.force)?;
    let pm_size = targets[0].size;
    let inodes = match cfg.inodes {
        0 => {
            // The object tier's virtual size is no measure of files.
            let block: u64 = targets[1..].iter().map(|t| t.size).sum();
            terrace_core::mkfs::default_pool_inode_count(pm_size, block)
        }
        n => n,
    };
    if terrace_format::pool_start_block(inodes) + 16 > pm_size / BLOCK_SIZE {
        return Err(CliError::usage(format!(
            "--inodes {inodes}: the inode table ({} bytes a slot) leaves no room for data in a pm tier of {}",
            terrace_format::INODE_SIZE,
            util::human_bytes(pm_size)
        )));
    }
    // Every existing target's lock (taken by `examine`) is held until the
    // pool is written.
    let mut locks: Vec<File> = targets.iter_mut().filter_map(|t| t.lock.take()).collect();
    let uuid = new_uuid();
    let mut records = Vec::new();
    for (i, t) in targets.iter().enumerate() {
        records.push(TierRecord {
            id: i as u8,
            kind: t.spec.kind,
            size: t.size,
            extent_size: if t.spec.kind == TierKind::Pm {
                0
            } else {
                es as u32
            },
            path: t.path.to_string_lossy().into_owned(),
            // Block tiers are stamped from the start (design.md §3, "Stale
            // PM tiers"); PM needs none.
            epoch: if t.spec.kind == TierKind::Pm {
                0
            } else {
                terrace_core::tier_epoch::new_epoch()
            },
        });
    }
    // The object tier first (its create refuses a prefix in use, before
    // anything else is written), then the block tiers: the pool exists only
    // once the PM superblock is written last.
    if let Some(spec) = object {
        let r = object_tier_record(spec, records.len() as u8)?;
        create_object_tier(&r, uuid)?;
        records.push(r);
    }
    for (n, (t, r)) in targets.iter().zip(&records).enumerate().skip(1) {
        let h = tier_header(r, uuid);
        write_tier_header(t, &h).map_err(|e| {
            // Files this mkfs created for block tiers so far go again: a
            // failed mkfs leaves nothing behind that was not there.
            for made in targets[1..=n].iter().filter(|t| !t.exists) {
                let _ = std::fs::remove_file(&made.path);
            }
            CliError::at(
                &t.spec.path,
                format!("cannot write the tier header: {}", util::os_reason(&e)),
            )
        })?;
    }
    let pm_t = &targets[0];
    if pm_t.exists && !pm_t.is_blockdev && pm_t.current_len != 0 && pm_t.current_len != pm_t.size {
        // Only reached with --force (examine refused otherwise).
        OpenOptions::new()
            .write(true)
            .open(&pm_t.path)
            .and_then(|f| f.set_len(pm_t.size))
            .map_err(|e| {
                CliError::at(
                    &pm_t.spec.path,
                    format!("cannot resize: {}", util::os_reason(&e)),
                )
            })?;
    }
    let pm = PmFile::create(&pm_t.path, pm_t.size).map_err(|e| CliError::new(e.to_string()))?;
    if !pm_t.exists {
        if let Ok(Some(l)) = util::lock_pool(&pm_t.path) {
            locks.push(l);
        }
    }
    if pm.kind() == PmKind::File {
        util::warn(format!(
            "{} is not on a DAX file system or tmpfs: every persist needs msync and will be slow",
            pm_t.path.display()
        ));
    }
    let params = terrace_core::FormatParams {
        uuid,
        inode_count: inodes,
        tiers: records.clone(),
        // Safety: geteuid/getegid cannot fail.
        root_uid: unsafe { libc::geteuid() },
        root_gid: unsafe { libc::getegid() },
    };
    let sb = terrace_core::format(&pm, &params).map_err(|e| CliError::at(&pm_t.spec.path, e))?;
    pm.sync_all()
        .map_err(|e| CliError::at(&pm_t.spec.path, util::os_reason(&e)))?;
    drop(pm);
    drop(locks);

    util::out(&format!("Formatted Terrace pool {}", util::fmt_uuid(&uuid)));
    for r in &sb.tiers {
        let extra = if r.kind == TierKind::Pm {
            format!(
                "data pool {}",
                util::human_bytes(sb.pool_blocks * BLOCK_SIZE)
            )
        } else {
            format!("extent {}", util::human_bytes(u64::from(r.extent_size)))
        };
        util::out(&format!(
            "  tier {}  {:<3}  {:>10}  {}  ({extra})",
            r.id,
            r.kind.name(),
            util::human_bytes(r.size),
            r.path
        ));
    }
    util::out(&inodes_line(sb.inode_count));
    util::out(&format!(
        "Mount it with: terrace mount {} MOUNTPOINT",
        pm_t.path.display()
    ));
    Ok(())
}

/// mkfs's line for the inode table: the inodes files can use (as `terrace
/// status` and `df -i` count them) and the slots the table has — one more:
/// slot 0 is reserved (inode numbers start at 1, the root directory), so
/// the 65,536 slots of the help's formula are 65,535 inodes.
fn inodes_line(slots: u64) -> String {
    format!(
        "  inodes: {} ({} slots; slot 0 is reserved)",
        slots - 1,
        thousands(slots)
    )
}

/// `65536` as `65,536`, as the help writes counts.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    /// mkfs printed "inodes: 65535" where the help's formula gives 65,536
    /// slots: both are right (slot 0 is reserved), and the line says so.
    #[test]
    fn the_inodes_line_counts_usable_inodes_and_names_the_slots() {
        assert_eq!(
            super::inodes_line(65536),
            "  inodes: 65535 (65,536 slots; slot 0 is reserved)"
        );
        assert_eq!(
            super::inodes_line(64),
            "  inodes: 63 (64 slots; slot 0 is reserved)"
        );
        assert_eq!(super::thousands(1_000_000), "1,000,000");
        assert_eq!(super::thousands(999), "999");
    }

    #[test]
    fn block_tiers_out_of_speed_order_are_a_usage_error() {
        let specs = |v: &[&str]| -> Vec<super::TierSpec> {
            v.iter().map(|s| super::parse_tier(s).unwrap()).collect()
        };
        for ok in [
            &["pm:/p:1G", "ssd:/s:1G", "ssd:/s2:1G", "hdd:/h:1G"][..],
            &["ssd:/s:1G", "pm:/p:1G", "hdd:/h:1G"],
            &["pm:/p:1G", "hdd:/h:1G", "hdd:/h2:1G"],
        ] {
            assert!(super::order_problem(&specs(ok)).is_none(), "{ok:?}");
        }
        let e = super::order_problem(&specs(&["pm:/p:1G", "hdd:/h:1G", "ssd:/s:1G"]))
            .expect("an ssd after an hdd");
        let msg = &e.msg;
        assert_eq!(e.code, 2, "{msg}");
        assert!(
            msg.starts_with("/s: an ssd tier cannot follow the hdd tier /h"),
            "{msg}"
        );
        assert!(msg.contains("ssd tier before the hdd tiers"), "{msg}");
    }

    #[test]
    fn default_inodes_count_the_whole_pool_with_the_table_bounded_on_pm() {
        use terrace_core::mkfs::{default_inode_count, default_pool_inode_count};
        let (m, g) = (1u64 << 20, 1u64 << 30);
        // PM only: as before, one per 16 KiB of PM.
        assert_eq!(default_pool_inode_count(256 * m, 0), 16384);
        assert_eq!(default_inode_count(256 * m), 16384);
        // 256M PM + 4G SSD: the SSD adds one per 64 KiB.
        assert_eq!(default_pool_inode_count(256 * m, 4 * g), 16384 + 65536);
        // A huge HDD: the table stays within 1/16 of PM.
        let n = default_pool_inode_count(256 * m, 1 << 40);
        assert_eq!(n, 256 * m / 2048);
        assert!(n * terrace_format::INODE_SIZE as u64 <= 256 * m / 16);
        assert_eq!(default_pool_inode_count(m, 0), 64);
    }
}
