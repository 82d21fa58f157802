//! `terrace migrate --defragment` (`migrate/defrag.rs`): a file scattered
//! over the SSD by random overwrites is rewritten in file order, reads back
//! the same, survives a remount; a file that is not fragmented, or a tier
//! without room for a second copy, is left alone.

mod common;
use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use terrace_core::migrate::{NoRoomOnTier, DEFRAG_RUN_BYTES};
use terrace_core::Fs;

const MIB: usize = 1 << 20;
const BS: usize = 4096;

/// A file of `size` bytes on the SSD (tier 1), then `overwrites` random
/// 4 KiB overwrites written back to fresh SSD blocks: its data scattered.
/// Returns its inode and contents.
fn scattered_file(fs: &Fs, size: usize, overwrites: usize) -> (u64, Vec<u8>) {
    let a = file(fs, 1, "db");
    let mut data = pattern(1, size);
    for (k, chunk) in data.chunks(MIB).enumerate() {
        fs.write(a, (k * MIB) as u64, chunk).unwrap();
    }
    fs.fsync(a, false).unwrap();
    fs.migrate_file(a, 1).unwrap();
    block_first(fs);
    let mut rng = StdRng::seed_from_u64(base_seed("scattered_file"));
    for n in 0..overwrites {
        let off = rng.gen_range(0..size / BS) * BS;
        let buf = pattern(100 + n as u64, BS);
        fs.write(a, off as u64, &buf).unwrap();
        data[off..off + BS].copy_from_slice(&buf);
    }
    fs.fsync(a, false).unwrap();
    fs.migrate_file(a, 1).unwrap();
    (a, data)
}

#[test]
fn a_file_scattered_by_random_overwrites_is_rewritten_in_order_and_reads_back_the_same() {
    let (pm, ssd, fs) = tiered_pool(16 << 20, 256 << 20, 64);
    let size = 32 * MIB;
    let (a, data) = scattered_file(&fs, size, 2_000);
    let (runs, bytes) = fs.runs_on_tier(a, 1).unwrap();
    assert_eq!(bytes, size as u64);
    assert!(
        runs > 1_000,
        "only {runs} runs: the setup did not scatter the file"
    );

    let (done, failed) = fs.defragment_files(&[a], 1).unwrap();
    assert!(failed.is_empty(), "{failed:?}");
    let d = done[0].1;
    assert_eq!(d.runs_before, runs);
    assert_eq!(d.bytes, size as u64);
    assert!(
        size as u64 / d.runs_after >= DEFRAG_RUN_BYTES,
        "{} runs after: {} KiB each",
        d.runs_after,
        (size as u64 / d.runs_after) >> 10
    );
    println!("runs: {} before, {} after", d.runs_before, d.runs_after);
    assert_eq!(fs.runs_on_tier(a, 1).unwrap(), (d.runs_after, size as u64));
    assert!(fs.read(a, 0, size).unwrap() == data, "contents changed");
    fs.check_allocator().unwrap();

    // Not fragmented any more: a second run rewrites nothing.
    let (done, _) = fs.defragment_files(&[a], 1).unwrap();
    assert_eq!(done[0].1.bytes, 0);

    fs.unmount().unwrap();
    drop(fs);
    assert_fsck_clean(&*pm, Some(ssd.clone()), Fsck::Data, "after defragmenting");
    let fs = mount_tiered(pm, ssd);
    assert!(
        fs.read(a, 0, size).unwrap() == data,
        "contents changed after a remount"
    );
    assert_eq!(fs.runs_on_tier(a, 1).unwrap().0, d.runs_after);
}

#[test]
fn a_tier_without_room_for_a_second_copy_leaves_the_file_as_it_was() {
    let (_pm, _ssd, fs) = tiered_pool(16 << 20, 64 << 20, 64);
    let size = 40 * MIB;
    let (a, data) = scattered_file(&fs, size, 1_000);
    let before = fs.runs_on_tier(a, 1).unwrap();
    let (done, failed) = fs.defragment_files(&[a], 1).unwrap();
    assert!(done.is_empty());
    let e = &failed[0].1;
    let why = e
        .get_ref()
        .and_then(|r| r.downcast_ref::<NoRoomOnTier>())
        .unwrap_or_else(|| panic!("not NoRoomOnTier: {e}"));
    assert_eq!(why.needed, size as u64);
    assert_eq!(fs.runs_on_tier(a, 1).unwrap(), before);
    assert!(fs.read(a, 0, size).unwrap() == data);
}

#[test]
fn defragmenting_on_pm_or_a_tier_the_pool_lacks_is_refused() {
    let (_pm, _ssd, fs) = tiered_pool(16 << 20, 64 << 20, 64);
    let a = file(&fs, 1, "f");
    fs.write(a, 0, &pattern(1, 64 << 10)).unwrap();
    for tier in [0, 7] {
        let e = fs.defragment_files(&[a], tier).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "tier {tier}");
    }
}
