//! The evidence `fsck` weighs before it writes a damaged or blank tier
//! header again from the pool's record (`tier_identity.rs`): the tier's own
//! device matches the log blobs and data checksums the pool recorded there,
//! a blank or foreign device matches none, and a zero block written by the
//! pool is no evidence (a blank device would match it).

mod common;
use common::*;
use std::sync::Arc;
use terrace_core::tier_identity::{tier_evidence, TierEvidence};
use terrace_core::Fs;
use terrace_format::{TierId, TierKind};
use terrace_media::{BlockMedia, MemBlock, MemMedia};

const SSD: u64 = 64 << 20;

/// Files whose data and logs were moved to the SSD, one of zeros only;
/// `seed` varies the data and, by as many empty files made first, the
/// inode numbers (two pools built by the very same steps would hold the
/// same blobs at the same places: design.md §3.2).
fn cold_pool(seed: u64) -> (Arc<MemMedia>, Arc<MemBlock>) {
    let (pm, ssd, fs) = tiered_pool(16 << 20, SSD, 512);
    for i in 1..seed {
        file(&fs, 1, &format!("empty{i}"));
    }
    let mut inos = Vec::new();
    for i in 0..12u64 {
        let ino = file_holding(
            &fs,
            &format!("f{i}"),
            &pattern(seed * 100 + i, 20_000 + i as usize * 4096),
        );
        inos.push(ino);
    }
    inos.push(file_holding(&fs, "zeros", &vec![0u8; 64 << 10]));
    for &ino in &inos {
        fs.migrate_file(ino, 1).unwrap();
    }
    // The logs of the file of zeros and of f0 stay on PM, with the
    // checksums of their data on the SSD.
    let cold = &inos[1..inos.len() - 1];
    assert_eq!(fs.move_logs(cold, 1).unwrap(), cold.len() as u64);
    fs.unmount().unwrap();
    (pm, ssd)
}

fn evidence(pm: &MemMedia, dev: Arc<MemBlock>) -> TierEvidence {
    tier_evidence(pm, (TierId(1), dev as Arc<dyn BlockMedia>), &[], 64).unwrap()
}

/// Matched and contradicted places.
fn counts(ev: TierEvidence) -> (u64, u64) {
    (ev.matched, ev.contradicted)
}

#[test]
fn the_tiers_own_device_matches_every_recorded_place_even_with_its_header_zeroed() {
    let (pm, ssd) = cold_pool(1);
    ssd.write_blocks(0, &[0u8; 4096]).unwrap();
    let ev = evidence(&pm, ssd);
    // 11 blobs and 12 files' data (the file of zeros is no evidence).
    assert_eq!(counts(ev), (23, 0), "{ev:?}");
    assert!(ev.convincing() && ev.recorded && !ev.unknown);
}

#[test]
fn a_blank_device_matches_nothing_not_even_the_zeros_the_pool_wrote() {
    let (pm, _) = cold_pool(1);
    let blank = Arc::new(MemBlock::new(SSD));
    let ev = evidence(&pm, blank);
    // The 11 blobs fail, and so does f0's data; the data the blobs mapped
    // is then unknown, and the zeros match but count for nothing.
    assert_eq!(counts(ev), (0, 12), "{ev:?}");
    assert!(!ev.convincing() && ev.recorded);
}

#[test]
fn another_pools_tier_matches_nothing() {
    let (pm, _) = cold_pool(1);
    let (_, other_ssd) = cold_pool(2);
    let ev = evidence(&pm, other_ssd);
    assert_eq!(ev.matched, 0, "{ev:?}");
    assert!(!ev.convincing(), "{ev:?}");
}

#[test]
fn a_tier_with_some_damage_still_matches_mostly() {
    let (pm, ssd) = cold_pool(1);
    let all = evidence(&pm, ssd.clone());
    // Damage a third of the blocks in the first quarter of the device.
    let mut b = vec![0u8; 4096];
    for blk in (1..SSD / 4096 / 4).step_by(3) {
        ssd.read_blocks(blk, &mut b).unwrap();
        b[100] ^= 0x40;
        ssd.write_blocks(blk, &b).unwrap();
    }
    let ev = evidence(&pm, ssd);
    assert_eq!(ev.checked(), all.checked());
    assert!(ev.contradicted > 0 && ev.convincing(), "{ev:?}");
}

/// Log migration puts every blob on the first block tier: the logs of cold
/// files whose data is on the HDD lie on the SSD. Judged alone, the HDD
/// shows nothing to compare, and a blank one must not pass for a tier the
/// pool never used (review, 2026-12-07); judged with the SSD, its data is
/// compared.
#[test]
fn a_tiers_data_mapped_by_logs_on_another_tier_is_compared_with_that_tier_given() {
    let pm = Arc::new(MemMedia::new(16 << 20));
    let (ssd, hdd) = (Arc::new(MemBlock::new(SSD)), Arc::new(MemBlock::new(SSD)));
    mkfs_tiers(&*pm, &[(TierKind::Ssd, SSD), (TierKind::Hdd, SSD)], 512);
    let fs = Fs::mount_with_tiers(
        pm.clone(),
        vec![
            (1, ssd.clone() as Arc<dyn BlockMedia>),
            (2, hdd.clone() as Arc<dyn BlockMedia>),
        ],
    )
    .unwrap();
    let mut inos = Vec::new();
    for i in 0..6u64 {
        let ino = file_holding(&fs, &format!("f{i}"), &pattern(40 + i, 50_000));
        fs.migrate_file(ino, 2).unwrap();
        inos.push(ino);
    }
    assert_eq!(fs.move_logs(&inos, 1).unwrap(), inos.len() as u64);
    fs.unmount().unwrap();
    let judge = |dev: Arc<MemBlock>, others: &[(u8, Arc<dyn BlockMedia>)]| {
        tier_evidence(&*pm, (TierId(2), dev as Arc<dyn BlockMedia>), others, 64).unwrap()
    };
    let blank = Arc::new(MemBlock::new(SSD));
    let alone = judge(blank.clone(), &[]);
    assert_eq!(counts(alone), (0, 0), "{alone:?}");
    assert!(
        alone.unknown,
        "the logs on the SSD were not read: {alone:?}"
    );
    let with_ssd: Vec<(u8, Arc<dyn BlockMedia>)> = vec![(1, ssd.clone())];
    let ev = judge(hdd, &with_ssd);
    assert_eq!(counts(ev), (6, 0), "{ev:?}");
    assert!(ev.convincing() && ev.recorded && !ev.unknown);
    let ev = judge(blank, &with_ssd);
    assert_eq!(counts(ev), (0, 6), "{ev:?}");
}
