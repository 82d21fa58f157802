//! Recovery from crash images: fsck finds the pool clean, it mounts, its
//! allocator is consistent, and the files that must survive read back.

use super::{assert_same_tree, base_seed, diff_trees, Tree};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use terrace_core::fsck::FsckReport;
use terrace_core::{fsck, Fs};
use terrace_media::{
    BlockLoss, BlockMedia, CrashBlock, CrashTrace, LossMode, MemBlock, MemMedia, PmMedia,
};

/// What fsck reads: the metadata (`fsck::check`), or also every block of
/// file data on the block tiers against its checksum (`fsck::check_data`).
#[derive(Clone, Copy, Debug)]
pub enum Fsck {
    Metadata,
    Data,
}

/// The pool on `pm` with the block tiers `tiers` passes fsck; returns the
/// report.
pub fn fsck_clean_with(
    pm: &dyn PmMedia,
    tiers: &[(u8, Arc<dyn BlockMedia>)],
    how: Fsck,
    ctx: &str,
) -> FsckReport {
    let report = match how {
        Fsck::Metadata => fsck::check(pm, tiers, &mut |_, _| {}),
        Fsck::Data => fsck::check_data(pm, tiers, &mut |_, _| {}),
    }
    .unwrap_or_else(|e| panic!("{ctx}: fsck cannot read: {e}"));
    assert!(report.is_clean(), "{ctx}: fsck: {:?}", report.problems);
    report
}

/// The pool on `pm`, with `ssd` as its tier 1 when given, passes fsck.
pub fn assert_fsck_clean(pm: &dyn PmMedia, ssd: Option<Arc<dyn BlockMedia>>, how: Fsck, ctx: &str) {
    let tiers: Vec<(u8, Arc<dyn BlockMedia>)> = ssd.map(|d| (1, d)).into_iter().collect();
    fsck_clean_with(pm, &tiers, how, ctx);
}

/// The tree `got` of a recovered crash image is `after` (when
/// `must_be_after`, or when the step changed nothing), else `before` or
/// `after`.
pub fn assert_before_or_after(
    got: &Tree,
    before: &Tree,
    after: &Tree,
    must_be_after: bool,
    ctx: &str,
) {
    if must_be_after || before == after {
        assert_same_tree(got, after, ctx);
    } else if got != before && got != after {
        panic!(
            "{ctx}: state is neither before nor after:\nvs before:\n{}\nvs after:\n{}",
            diff_trees(got, before),
            diff_trees(got, after)
        );
    }
}

/// Recovers a crash image — PM image `pm_img`, and when the pool has an SSD
/// tier, its image `ssd_img` of the same moment: fsck finds it clean, it
/// mounts (without fsck's help), and its allocator is consistent. Returns
/// the PM and the mounted pool. `ctx` names the crash point in messages.
pub fn recover(
    pm_img: Vec<u8>,
    ssd_img: Option<Vec<u8>>,
    how: Fsck,
    ctx: &str,
) -> (Arc<MemMedia>, Fs) {
    let pm = Arc::new(MemMedia::from_image(pm_img));
    let ssd = ssd_img.map(|img| Arc::new(MemBlock::from_image(img)) as Arc<dyn BlockMedia>);
    assert_fsck_clean(&*pm, ssd.clone(), how, ctx);
    let tiers = ssd.map(|d| (1, d)).into_iter().collect();
    let fs =
        Fs::mount_with_tiers(pm.clone(), tiers).unwrap_or_else(|e| panic!("{ctx}: mount: {e}"));
    fs.check_allocator()
        .unwrap_or_else(|e| panic!("{ctx}: allocator: {e}"));
    (pm, fs)
}

/// Each of `files` (inode, content) reads back exactly, and no longer.
pub fn assert_files(fs: &Fs, files: &[(u64, Vec<u8>)], what: &str) {
    for (ino, data) in files {
        let got = fs.read(*ino, 0, data.len() + 10).unwrap();
        assert!(got == *data, "{what}: inode {ino} changed");
    }
}

/// Recovers the crash image of a PM + SSD pool ([`recover`]) and checks that
/// each of `files` is intact. Returns the mounted pool.
pub fn assert_recovers(
    pm_img: Vec<u8>,
    ssd_img: Vec<u8>,
    files: &[(u64, Vec<u8>)],
    what: &str,
) -> Fs {
    let (_, fs) = recover(pm_img, Some(ssd_img), Fsck::Metadata, what);
    assert_files(&fs, files, what);
    fs
}

/// The images of both media at PM crash point `k` of `trace` (`ssd` on the
/// same clock): a random subset of the unflushed PM lines and of the
/// unsynced device blocks kept, the rest lost.
pub fn random_crash_images(
    trace: &CrashTrace,
    ssd: &CrashBlock,
    k: usize,
    rng: &mut StdRng,
) -> (Vec<u8>, Vec<u8>) {
    let pm_img = trace.image_at(k, LossMode::RandomLines(rng.gen()));
    let ssd_img = ssd.image_at_time(trace.time_after(k), BlockLoss::RandomBlocks(rng.gen()));
    (pm_img, ssd_img)
}

/// Recovers the crash images ([`random_crash_images`]) at `count` random
/// PM crash points of `trace` and at its first and last: each of `files`
/// is intact in every one ([`assert_recovers`]). The random choices come
/// from [`base_seed`] of `test`.
pub fn assert_random_crash_points_recover(
    trace: &CrashTrace,
    ssd: &CrashBlock,
    files: &[(u64, Vec<u8>)],
    count: usize,
    test: &str,
) {
    let n = trace.len();
    let mut rng = StdRng::seed_from_u64(base_seed(test));
    let mut points: Vec<usize> = (0..count).map(|_| rng.gen_range(0..=n)).collect();
    points.extend([0, n]);
    for k in points {
        let (pm_img, ssd_img) = random_crash_images(trace, ssd, k, &mut rng);
        assert_recovers(pm_img, ssd_img, files, &format!("crash at {k}/{n}"));
    }
}
