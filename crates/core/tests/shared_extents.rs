//! `copy_file_range` clones (`Fs::copy_range`, core `ops_clone.rs` and
//! `shared.rs`): block-aligned copies share the source's blocks, take no
//! space, split on the first write, free their blocks with the last file
//! that maps them, survive remounts and crashes (the reference counts are
//! rebuilt from the logs), and match a byte model of the files under random
//! operations — on PM and with data on the SSD moved by migration and the
//! cleaner.

mod common;
use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use terrace_core::{FallocateMode, Fs, SetAttr};
use terrace_media::{BlockMedia, CrashMedia, LossMode};

const BS: u64 = 4096;

fn free_blocks(fs: &Fs) -> u64 {
    fs.statfs().bfree
}

#[test]
fn a_block_aligned_copy_shares_the_blocks_and_takes_no_data_space() {
    let (_pm, fs) = pm_pool(64 << 20, 64);
    let data = pattern(1, 2_000 * BS as usize + 100);
    let src = file_holding(&fs, "src", &data);
    let dst = file(&fs, 1, "dst");
    let before = free_blocks(&fs);
    let n = fs.copy_range(src, 0, dst, 0, data.len() as u64).unwrap();
    assert_eq!(n, data.len() as u64);
    assert_eq!(content(&fs, dst), data);
    let taken = before - free_blocks(&fs);
    // The clone's log entries may take a log page; the data takes nothing
    // (a copy would take 2,001 blocks).
    assert!(taken <= 2, "a clone of 2,001 blocks took {taken} blocks");
    assert_eq!(fs.getattr(dst).unwrap().blocks, 2_001 * 8);
    assert_eq!(
        fs.shared_block_stats().get(&0).copied(),
        Some((2_001, 2_001))
    );
    fs.check_allocator().unwrap();
}

#[test]
fn a_write_to_either_file_changes_only_that_file() {
    let (_pm, fs) = pm_pool(64 << 20, 64);
    let mut a = pattern(2, 300 * BS as usize);
    let src = file_holding(&fs, "src", &a);
    let dst = file(&fs, 1, "dst");
    fs.copy_range(src, 0, dst, 0, a.len() as u64).unwrap();
    let mut b = a.clone();
    let before = free_blocks(&fs);
    // Overwrite 10 blocks (and a partial one) of the copy, then of the source.
    let w = pattern(3, 10 * BS as usize + 7);
    fs.write(dst, 50 * BS, &w).unwrap();
    b[50 * BS as usize..50 * BS as usize + w.len()].copy_from_slice(&w);
    fs.write(src, 200 * BS + 9, &w).unwrap();
    a[200 * BS as usize + 9..200 * BS as usize + 9 + w.len()].copy_from_slice(&w);
    assert_eq!(content(&fs, src), a);
    assert_eq!(content(&fs, dst), b);
    let taken = before - free_blocks(&fs);
    // 11 + 11 fresh blocks; the blocks each write replaced stay mapped by
    // the other file.
    assert!((22..=26).contains(&taken), "took {taken} blocks");
    fs.check_allocator().unwrap();
}

#[test]
fn shared_blocks_are_freed_with_the_last_file_that_maps_them() {
    let (_pm, fs) = pm_pool(64 << 20, 64);
    let empty = free_blocks(&fs);
    let data = pattern(4, 500 * BS as usize);
    let src = file_holding(&fs, "src", &data);
    let c1 = file(&fs, 1, "c1");
    let c2 = file(&fs, 1, "c2");
    fs.copy_range(src, 0, c1, 0, data.len() as u64).unwrap();
    fs.copy_range(c1, 100 * BS, c2, 0, 200 * BS).unwrap();
    let full = free_blocks(&fs);
    fs.unlink(1, b"src").unwrap();
    fs.check_allocator().unwrap();
    assert!(
        full - free_blocks(&fs) <= 2,
        "unlinking one of three mappings freed data"
    );
    assert_eq!(content(&fs, c1), data);
    fs.unlink(1, b"c1").unwrap();
    fs.check_allocator().unwrap();
    // Only the 200 blocks c2 maps are left.
    let used = empty - free_blocks(&fs);
    assert!(
        (200..=204).contains(&used),
        "{used} blocks in use for 200 mapped"
    );
    assert_eq!(content(&fs, c2), data[100 * BS as usize..300 * BS as usize]);
    fs.unlink(1, b"c2").unwrap();
    fs.check_allocator().unwrap();
    assert!(empty - free_blocks(&fs) <= 2, "blocks leaked");
    assert!(fs.shared_block_stats().is_empty());
}

#[test]
fn unaligned_copies_copy_bytes_and_partial_last_blocks_share_only_at_both_ends() {
    let (_pm, fs) = pm_pool(64 << 20, 64);
    let data = pattern(5, 40 * BS as usize + 1000);
    let src = file_holding(&fs, "src", &data);
    // Unaligned source offset: a byte copy (the data takes new blocks).
    let d1 = file(&fs, 1, "d1");
    let before = free_blocks(&fs);
    assert_eq!(fs.copy_range(src, 100, d1, 0, 10 * BS).unwrap(), 10 * BS);
    assert_eq!(content(&fs, d1), data[100..100 + 10 * BS as usize]);
    assert!(before - free_blocks(&fs) >= 10);
    // Copy to the source's end into a longer file: the partial last block
    // is copied (sharing it would expose the source's zeros past its end
    // where the destination has data).
    let long = pattern(6, 50 * BS as usize);
    let d2 = file_holding(&fs, "d2", &long);
    let n = data.len() as u64 - 30 * BS;
    assert_eq!(fs.copy_range(src, 30 * BS, d2, 0, u64::MAX).unwrap(), n);
    let mut want = long.clone();
    want[..n as usize].copy_from_slice(&data[30 * BS as usize..]);
    assert_eq!(content(&fs, d2), want);
    // Past the source's end: nothing.
    assert_eq!(fs.copy_range(src, 1 << 30, d2, 0, 10).unwrap(), 0);
    // Overlapping ranges of one file: EINVAL, as the VFS answers.
    let e = fs.copy_range(src, 0, src, BS, 4 * BS).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
    // Non-overlapping ranges of one file share.
    fs.copy_range(src, 0, src, 100 * BS, 4 * BS).unwrap();
    assert_eq!(
        fs.read(src, 100 * BS, 4 * BS as usize).unwrap(),
        data[..4 * BS as usize]
    );
    let dir = fs.mkdir(1, b"dir", 0o755, CTX).unwrap().ino;
    let e = fs.copy_range(dir, 0, d1, 0, 10).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EISDIR));
    fs.check_allocator().unwrap();
}

#[test]
fn references_are_rebuilt_at_mount_after_a_clean_unmount_and_after_a_crash() {
    for crash in [false, true] {
        let (pm, fs) = pm_pool(64 << 20, 64);
        let empty = free_blocks(&fs);
        let data = pattern(7, 300 * BS as usize + 5);
        let src = file_holding(&fs, "src", &data);
        let dst = file(&fs, 1, "dst");
        fs.copy_range(src, 0, dst, 0, data.len() as u64).unwrap();
        if crash {
            drop(fs);
        } else {
            fs.unmount().unwrap();
            drop(fs);
        }
        assert_fsck_clean(&*pm, None, Fsck::Metadata, &format!("crash {crash}"));
        let fs = mount(pm.clone());
        fs.check_allocator().unwrap();
        assert_eq!(fs.shared_block_stats().get(&0).copied(), Some((301, 301)));
        fs.unlink(1, b"src").unwrap();
        assert_eq!(content(&fs, dst), data);
        fs.unlink(1, b"dst").unwrap();
        fs.check_allocator().unwrap();
        assert!(
            empty - free_blocks(&fs) <= 2,
            "crash {crash}: blocks leaked"
        );
        fs.unmount().unwrap();
    }
}

#[test]
fn fsck_still_finds_a_block_two_files_map_without_the_shared_flag() {
    // A clone, then the flag removed from the clone's entries on the image
    // (as a bug or a damaged log would leave it): double ownership.
    let (pm, fs) = pm_pool(16 << 20, 64);
    let src = file_holding(&fs, "src", &pattern(8, 8 * BS as usize));
    let dst = file(&fs, 1, "dst");
    fs.copy_range(src, 0, dst, 0, 8 * BS).unwrap();
    fs.unmount().unwrap();
    drop(fs);
    let _ = dst;
    // Every Write entry with the flag, found by decoding at each 8-byte
    // offset (an entry's crc makes a false match practically impossible),
    // rewritten without it (with a valid crc).
    let mut img = pm.image();
    let mut cleared = 0;
    let mut at = 0;
    while at + 48 <= img.len() {
        if let Ok((terrace_format::Entry::Write(mut w), len)) =
            terrace_format::Entry::decode(&img[at..])
        {
            if w.wflags & terrace_format::WRITE_FLAG_SHARED != 0 {
                w.wflags &= !terrace_format::WRITE_FLAG_SHARED;
                let b = terrace_format::Entry::Write(w).encode();
                img[at..at + len].copy_from_slice(&b);
                cleared += 1;
            }
        }
        at += 8;
    }
    assert!(cleared > 0, "no shared entry found to damage");
    let pm = terrace_media::MemMedia::from_image(img);
    let report = terrace_core::fsck::check(&pm, &[], &mut |_, _| {}).unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.to_string().contains("also owned by inode")),
        "fsck missed the double ownership: {:?}",
        report.problems
    );
}

#[test]
fn a_crash_at_any_point_of_a_clone_leaves_the_old_or_the_new_file() {
    let mut rng = StdRng::seed_from_u64(base_seed("clone crash"));
    let (media, fs) = pm_pool_on(CrashMedia::new(8 << 20), 32);
    let a = pattern(9, 40 * BS as usize + 300);
    let src = file_holding(&fs, "src", &a);
    let old = pattern(10, 12 * BS as usize);
    let dst = file_holding(&fs, "dst", &old);
    // Blocks 4..24 of the source over blocks 2..22 of the destination.
    let mut new = old.clone();
    new.resize(22 * BS as usize, 0);
    new[2 * BS as usize..].copy_from_slice(&a[4 * BS as usize..24 * BS as usize]);
    let (r, trace) = media.trace(|| fs.copy_range(src, 4 * BS, dst, 2 * BS, 20 * BS));
    assert_eq!(r.unwrap(), 20 * BS);
    assert_eq!(content(&fs, dst), new);
    let n = trace.len();
    assert!(n > 0);
    for k in 0..=n {
        for mode in [LossMode::AllUnflushed, LossMode::RandomWords(rng.gen())] {
            let ctx = format!("crash after event {k}/{n} {mode:?}");
            let (_, fs) = recover(trace.image_at(k, mode), None, Fsck::Metadata, &ctx);
            assert_eq!(content(&fs, src), a, "{ctx}: the source changed");
            let got = content(&fs, dst);
            if k == n {
                assert!(got == new, "{ctx}: the finished clone is not on the image");
            } else {
                assert!(got == old || got == new, "{ctx}: neither old nor new copy");
            }
            // Freeing both files frees everything (no reference lost or
            // left behind by the crash).
            fs.unlink(1, b"src").unwrap();
            fs.unlink(1, b"dst").unwrap();
            fs.check_allocator()
                .unwrap_or_else(|e| panic!("{ctx}: {e}"));
        }
    }
}

/// One step of the model-based test.
#[derive(Debug, Clone, Copy)]
enum Op {
    Write(usize, u64, usize, u64),
    Copy(usize, u64, usize, u64, u64),
    Truncate(usize, u64),
    Punch(usize, u64, u64),
    Recreate(usize),
}

const FILES: usize = 3;

fn random_op(rng: &mut StdRng, sizes: &[u64; FILES]) -> Op {
    let f = rng.gen_range(0..FILES);
    let g = rng.gen_range(0..FILES);
    let span = |s: u64| s.max(BS) + 8 * BS;
    let aligned = |rng: &mut StdRng, upto: u64| rng.gen_range(0..upto.div_ceil(BS) + 1) * BS;
    match rng.gen_range(0..20) {
        0..=5 => Op::Write(
            f,
            rng.gen_range(0..span(sizes[f]).min(200 << 10)),
            rng.gen_range(1..30_000),
            rng.gen(),
        ),
        6..=13 => {
            let (soff, doff) = if rng.gen_bool(0.85) {
                (aligned(rng, sizes[f]), aligned(rng, sizes[g] + 4 * BS))
            } else {
                (
                    rng.gen_range(0..span(sizes[f])),
                    rng.gen_range(0..span(sizes[g])),
                )
            };
            let len = match rng.gen_range(0..3) {
                0 => sizes[f].saturating_sub(soff).max(1),
                1 => rng.gen_range(1..64) * BS,
                _ => rng.gen_range(1..200_000),
            };
            Op::Copy(f, soff, g, doff, len)
        }
        14..=15 => Op::Truncate(f, rng.gen_range(0..span(sizes[f]))),
        16..=17 => Op::Punch(
            f,
            rng.gen_range(0..span(sizes[f])),
            rng.gen_range(1..20 * BS),
        ),
        _ => Op::Recreate(f),
    }
}

/// What the operation does to the byte model (`Err` = errno, unchanged).
fn model_apply(m: &mut [Vec<u8>; FILES], op: &Op) -> Result<u64, i32> {
    let put = |f: &mut Vec<u8>, off: u64, data: &[u8]| {
        let end = off as usize + data.len();
        if f.len() < end {
            f.resize(end, 0);
        }
        f[off as usize..end].copy_from_slice(data);
    };
    match *op {
        Op::Write(f, off, len, seed) => {
            put(&mut m[f], off, &pattern(seed, len));
            Ok(len as u64)
        }
        Op::Copy(s, soff, d, doff, len) => {
            if s == d && soff < doff + len && doff < soff + len {
                return Err(libc::EINVAL);
            }
            let size = m[s].len() as u64;
            if soff >= size {
                return Ok(0);
            }
            let n = len.min(size - soff);
            let bytes = m[s][soff as usize..(soff + n) as usize].to_vec();
            put(&mut m[d], doff, &bytes);
            Ok(n)
        }
        Op::Truncate(f, size) => {
            m[f].resize(size as usize, 0);
            Ok(0)
        }
        Op::Punch(f, off, len) => {
            let end = (off + len).min(m[f].len() as u64);
            if off < end {
                m[f][off as usize..end as usize].fill(0);
            }
            Ok(0)
        }
        Op::Recreate(f) => {
            m[f].clear();
            Ok(0)
        }
    }
}

fn fs_apply(fs: &Fs, inos: &mut [u64; FILES], op: &Op) -> Result<u64, i32> {
    let name = |f: usize| format!("f{f}");
    let r = match *op {
        Op::Write(f, off, len, seed) => fs
            .write(inos[f], off, &pattern(seed, len))
            .map(|n| n as u64),
        Op::Copy(s, soff, d, doff, len) => fs.copy_range(inos[s], soff, inos[d], doff, len),
        Op::Truncate(f, size) => fs
            .setattr(
                inos[f],
                SetAttr {
                    size: Some(size),
                    ..Default::default()
                },
            )
            .map(|_| 0),
        Op::Punch(f, off, len) => fs
            .fallocate(inos[f], off, len, FallocateMode::PunchHole)
            .map(|_| 0),
        Op::Recreate(f) => {
            fs.unlink(1, name(f).as_bytes()).unwrap();
            inos[f] = file(fs, 1, &name(f));
            Ok(0)
        }
    };
    r.map_err(|e| e.raw_os_error().unwrap_or(-1))
}

/// Every file reads back as its model, and the allocator is consistent.
fn assert_matches_model(fs: &Fs, inos: &[u64; FILES], model: &[Vec<u8>; FILES], ctx: &str) {
    for f in 0..FILES {
        assert!(
            content(fs, inos[f]) == model[f],
            "{ctx}: file f{f} differs from the model"
        );
    }
    fs.check_allocator()
        .unwrap_or_else(|e| panic!("{ctx}: {e}"));
}

/// Random writes, copies, truncates, punches and re-creations of three files
/// against a byte model; the allocator and the reference counts checked
/// after every step; remounts (clean and crash-like) along the way. With
/// `tiered`, data lives on the SSD too (block-first placement, write-backs)
/// and migration and the cleaner move shared blocks.
fn run_model(tiered: bool, seed: u64, steps: usize) {
    let mut rng = StdRng::seed_from_u64(seed);
    let (pm, ssd, mut fs) = tiered_pool(32 << 20, 128 << 20, 64);
    if tiered {
        block_first(&fs);
    }
    let mut inos = [0u64; FILES];
    for (f, ino) in inos.iter_mut().enumerate() {
        *ino = file(&fs, 1, &format!("f{f}"));
    }
    let mut model: [Vec<u8>; FILES] = Default::default();
    let mut shared_seen = false;
    for step in 0..steps {
        let sizes = [0, 1, 2].map(|f| model[f].len() as u64);
        let op = random_op(&mut rng, &sizes);
        let want = model_apply(&mut model, &op);
        let got = fs_apply(&fs, &mut inos, &op);
        let ctx = format!("seed {seed} step {step} {op:?}");
        assert_eq!(got, want, "{ctx}: result");
        assert_matches_model(&fs, &inos, &model, &ctx);
        shared_seen |= !fs.shared_block_stats().is_empty();
        match rng.gen_range(0..40) {
            0 if tiered => {
                let f = rng.gen_range(0..FILES);
                fs.flush_inode(inos[f]).unwrap();
                let to = rng.gen_range(0..2);
                fs.migrate_file(inos[f], to).unwrap();
            }
            1 if tiered => {
                fs.flush_all().unwrap();
                let victims: Vec<u64> = (0..4).collect();
                fs.recycle(1, &victims);
            }
            2 => {
                fs.unmount().unwrap();
                drop(fs);
                fs = mount_tiered(pm.clone(), ssd.clone());
            }
            3 => {
                fs.flush_all().unwrap();
                drop(fs);
                fs = mount_tiered(pm.clone(), ssd.clone());
            }
            _ => continue,
        }
        if tiered {
            block_first(&fs);
        }
        let ctx = format!("{ctx}, after the extra step");
        assert_matches_model(&fs, &inos, &model, &ctx);
    }
    assert!(shared_seen, "seed {seed}: no step ever shared a block");
    fs.unmount().unwrap();
    drop(fs);
    assert_fsck_clean(&*pm, Some(ssd.clone()), Fsck::Data, &format!("seed {seed}"));
}

#[test]
fn random_copies_match_a_byte_model_on_pm_across_remounts() {
    let base = base_seed("clone model, PM");
    for k in 0..env_u64("TERRACE_CLONE_SEQUENCES", 8) {
        run_model(false, base.wrapping_add(k), 300);
    }
}

#[test]
fn random_copies_match_a_byte_model_with_ssd_data_migration_and_cleaning() {
    let base = base_seed("clone model, tiered");
    for k in 0..env_u64("TERRACE_CLONE_SEQUENCES", 8) {
        run_model(true, base.wrapping_add(k), 300);
    }
}

/// Bytes of the SSD tier (tier 1) that sharing saves.
fn ssd_saved_bytes(fs: &Fs) -> u64 {
    fs.shared_block_stats().get(&1).map_or(0, |s| s.1) * BS
}

/// A 4 MiB file on PM and a clone of it.
fn file_and_clone(fs: &Fs) -> (u64, u64, Vec<u8>) {
    let data = pattern(11, 4 << 20);
    let src = file_holding(fs, "src", &data);
    let dst = file(fs, 1, "dst");
    assert_eq!(
        fs.copy_range(src, 0, dst, 0, data.len() as u64).unwrap(),
        4 << 20
    );
    assert_eq!(fs.shared_block_stats().get(&0).copied(), Some((1024, 1024)));
    (src, dst, data)
}

#[test]
fn migrating_a_file_takes_its_clones_along_and_keeps_one_copy() {
    let (pm, ssd, fs) = tiered_pool(32 << 20, 128 << 20, 64);
    let (src, dst, data) = file_and_clone(&fs);
    let used = |fs: &Fs| fs.status().tiers[1].used;
    fs.migrate_file(src, 1).unwrap();
    // The clone follows: it maps the moved blocks, shared, and the PM
    // blocks are free (without this, each file held its own SSD copy).
    assert_eq!(
        tier_bytes(&fs, dst, "ssd"),
        4 << 20,
        "the clone stayed behind"
    );
    assert_eq!(tier_bytes(&fs, dst, "pm"), 0);
    assert_eq!(ssd_saved_bytes(&fs), 4 << 20);
    assert!(!fs.shared_block_stats().contains_key(&0));
    assert_eq!(used(&fs), 4 << 20, "one copy on the SSD");
    assert!(fs.status().migration.reshared_bytes >= 4 << 20);
    assert_eq!(fs.migrate_file(dst, 1).unwrap(), 0, "nothing left to move");
    assert_eq!(used(&fs), 4 << 20);
    assert_eq!(content(&fs, src), data);
    assert_eq!(content(&fs, dst), data);
    fs.check_allocator().unwrap();
    // A write to one file splits only what it writes.
    fs.write(dst, 0, &[9u8; 4096]).unwrap();
    fs.flush_all().unwrap();
    assert_eq!(content(&fs, src), data);
    let mut changed = data.clone();
    changed[..4096].fill(9);
    assert_eq!(content(&fs, dst), changed);
    // The counts are rebuilt from the logs after a remount and a crash.
    fs.unmount().unwrap();
    drop(fs);
    let fs = mount_tiered(pm.clone(), ssd.clone());
    assert_eq!(ssd_saved_bytes(&fs), (4 << 20) - 4096);
    assert_eq!(content(&fs, src), data);
    assert_eq!(content(&fs, dst), changed);
    fs.check_allocator().unwrap();
    drop(fs);
    let fs = mount_tiered(pm.clone(), ssd.clone());
    assert_eq!(ssd_saved_bytes(&fs), (4 << 20) - 4096);
    // The files that share blocks are known again after the mount: moving
    // the source back up takes the clone's shared part along.
    assert_eq!(fs.clone_family_of(src), vec![dst]);
    fs.migrate_file(src, 0).unwrap();
    assert_eq!(
        fs.shared_block_stats().get(&0).map(|s| s.1 * BS),
        Some((4 << 20) - 4096)
    );
    assert_eq!(fs.status().tiers[1].used, 0, "nothing is left on the SSD");
    assert_eq!(content(&fs, src), data);
    assert_eq!(content(&fs, dst), changed);
    fs.unmount().unwrap();
    drop(fs);
    assert_fsck_clean(
        &*pm,
        Some(ssd as Arc<dyn BlockMedia>),
        Fsck::Data,
        "after moves of shared blocks",
    );
}

#[test]
fn recycling_an_extent_of_shared_blocks_moves_them_once() {
    let (_pm, _ssd, fs) = tiered_pool(32 << 20, 128 << 20, 64);
    let (src, dst, data) = file_and_clone(&fs);
    fs.migrate_file(src, 1).unwrap();
    let used = fs.status().tiers[1].used;
    // The extents the 4 MiB landed in (512 KiB each) and then some.
    let victims: Vec<u64> = (0..12).collect();
    assert!(
        fs.recycle(1, &victims) >= 8,
        "the data's extents were emptied"
    );
    assert_eq!(
        fs.status().tiers[1].used,
        used,
        "the shared blocks were copied once"
    );
    assert_eq!(ssd_saved_bytes(&fs), 4 << 20);
    assert_eq!(content(&fs, src), data);
    assert_eq!(content(&fs, dst), data);
    fs.check_allocator().unwrap();
    fs.unmount().unwrap();
}

#[test]
fn a_crash_at_any_point_of_a_move_that_takes_clones_along_loses_nothing() {
    let (pm, ssd, fs) = crash_pool(32 << 20, 128 << 20, 64);
    let data = pattern(12, 2 << 20);
    let src = file_holding(&fs, "src", &data);
    let mut files = vec![(src, data.clone())];
    for name in ["c1", "c2"] {
        let c = file(&fs, 1, name);
        assert_eq!(
            fs.copy_range(src, 0, c, 0, data.len() as u64).unwrap(),
            2 << 20
        );
        files.push((c, data.clone()));
    }
    let (r, trace) = pm.trace(|| fs.migrate_file(src, 1));
    r.unwrap();
    assert_eq!(
        fs.status().migration.reshared_bytes,
        4 << 20,
        "both clones followed"
    );
    // Every crash point recovers with all three files intact, fsck clean
    // and the counts rebuilt (`assert_recovers` checks the allocator):
    // each clone maps the old or the new blocks.
    assert_random_crash_points_recover(&trace, &ssd, &files, 24, "reshare crash");
}
