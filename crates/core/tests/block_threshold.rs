//! A block tier's own threshold (`migration_block_threshold`, 90 % by
//! default): an SSD in front of an HDD fills up to it before it drains, and
//! drains only back below it. Before, the SSD drained at PM's dynamic
//! threshold (50 % with no reads), so half of it was never used and
//! `terrace migrate --to ssd` was undone within seconds.

mod common;
use common::*;
use std::sync::Arc;
use terrace_core::Fs;
use terrace_format::TierKind;
use terrace_media::{MemBlock, MemMedia};

const SSD: u64 = 16 << 20;
const FILE: usize = 256 << 10;

fn percent(fs: &Fs, tier: usize) -> u64 {
    let t = &fs.status().tiers[tier];
    t.used * 100 / t.capacity
}

/// Writes `n` files of [`FILE`] bytes and moves each to the SSD (tier 1).
fn files_on_ssd(fs: &Fs, from: u64, n: u64, files: &mut Vec<(u64, Vec<u8>)>) {
    for k in from..from + n {
        let ino = file(fs, 1, &format!("f{k}"));
        let data = pattern(k, FILE);
        fs.write(ino, 0, &data).unwrap();
        fs.migrate_file(ino, 1)
            .unwrap_or_else(|e| panic!("file {k}: {e}; {:?}", fs.status().tiers));
        files.push((ino, data));
    }
}

#[test]
fn an_ssd_keeps_its_data_up_to_the_block_threshold_and_drains_only_back_below_it() {
    let pm = Arc::new(MemMedia::new(16 << 20));
    let ssd = Arc::new(MemBlock::new(SSD));
    let hdd = Arc::new(MemBlock::new(64 << 20));
    mkfs_tiers(
        &*pm,
        &[(TierKind::Ssd, SSD), (TierKind::Hdd, 64 << 20)],
        256,
    );
    let fs = Fs::mount_with_tiers(pm.clone(), vec![(1, ssd.clone()), (2, hdd.clone())]).unwrap();
    fs.set_setting("migration_age_ns", "0s").unwrap();
    assert_eq!(fs.settings().migration_block_threshold, 90);
    let mut files = Vec::new();
    // 10 MiB of 16: above PM's dynamic threshold (50 % with no reads),
    // below the block threshold.
    files_on_ssd(&fs, 0, 40, &mut files);
    let before = percent(&fs, 1);
    assert!(before > 55, "{:?}", fs.status().tiers[1]);
    for _ in 0..3 {
        fs.migration_pass();
    }
    assert_eq!(
        percent(&fs, 1),
        before,
        "the SSD drained below the block threshold: {:?}",
        fs.status().tiers
    );
    assert_eq!(fs.status().tiers[2].used, 0, "data went to the HDD");
    // Past the block threshold: it drains to just below it, not to 50 %.
    files_on_ssd(&fs, 40, 18, &mut files);
    assert!(percent(&fs, 1) >= 90, "{:?}", fs.status().tiers[1]);
    for _ in 0..3 {
        fs.migration_pass();
    }
    let after = percent(&fs, 1);
    assert!(
        (75..90).contains(&after),
        "SSD at {after}% after draining past the block threshold: {:?}",
        fs.status().tiers
    );
    assert!(fs.status().tiers[2].used > 0);
    assert_files(&fs, &files, "every file");
    // The setting is a runtime one: a lower threshold drains further.
    fs.set_setting("migration_block_threshold", "30").unwrap();
    fs.migration_pass();
    fs.migration_pass();
    assert!(percent(&fs, 1) < 30, "{:?}", fs.status().tiers[1]);
    assert_files(&fs, &files, "every file");
    fs.check_allocator().unwrap();
    fs.unmount().unwrap();
}

/// An SSD full of data a rule pins there cannot drain itself, so PM's drain
/// passes over it to the HDD (as foreground writes do past the forced
/// mark). Before, PM's drain into the SSD found no room, PM stayed full,
/// and creates failed with ENOSPC while the HDD below was empty.
#[test]
fn pm_drains_past_an_ssd_full_of_pinned_data_into_the_hdd() {
    let pm = Arc::new(MemMedia::new(16 << 20));
    let ssd = Arc::new(MemBlock::new(SSD));
    let hdd = Arc::new(MemBlock::new(64 << 20));
    mkfs_tiers(
        &*pm,
        &[(TierKind::Ssd, SSD), (TierKind::Hdd, 64 << 20)],
        256,
    );
    let fs = Fs::mount_with_tiers(pm.clone(), vec![(1, ssd.clone()), (2, hdd.clone())]).unwrap();
    fs.set_setting("migration_age_ns", "0s").unwrap();
    let pinned = fs.mkdir(1, b"pinned", 0o755, CTX).unwrap().ino;
    fs.setxattr(pinned, b"user.terrace.rule", b"ssd", 0)
        .unwrap();
    let mut files = Vec::new();
    for k in 0..14u64 {
        let ino = file(&fs, pinned, &format!("p{k}"));
        let data = pattern(500 + k, 1 << 20);
        fs.write(ino, 0, &data).unwrap();
        fs.fsync(ino, false).unwrap();
        files.push((ino, data));
    }
    for _ in 0..2 {
        fs.migration_pass();
    }
    // Free: the recycling reserve (1 MiB) and one extent.
    let ssd_free = fs.status().tiers[1].extents.as_ref().unwrap().free_blocks;
    assert!(
        ssd_free * 4096 <= 3 << 19,
        "the pinned data did not fill the SSD: {:?}",
        fs.status().tiers[1]
    );
    // 12 MiB of unpinned data on PM, past its threshold.
    for k in 0..12u64 {
        let ino = file(&fs, 1, &format!("u{k}"));
        let data = pattern(900 + k, 1 << 20);
        fs.write(ino, 0, &data).unwrap();
        files.push((ino, data));
    }
    let before = percent(&fs, 0);
    assert!(before > 60, "{:?}", fs.status().tiers[0]);
    for _ in 0..3 {
        fs.migration_pass();
    }
    let st = fs.status();
    assert!(
        percent(&fs, 0) <= 50,
        "PM did not drain past the full SSD: {:?}; migration {:?}",
        st.tiers,
        st.migration
    );
    assert!(st.tiers[2].used > 0, "nothing went to the HDD");
    assert_files(&fs, &files, "every file");
    fs.check_allocator().unwrap();
    fs.unmount().unwrap();
}
