//! Crash consistency on simulated persistent memory: every operation of a random
//! workload is traced; crash images are built for crash points inside it, with
//! all unflushed cache lines lost and with random subsets of them (whole lines,
//! and 8-byte words) persisted; each image must mount without fsck, pass fsck,
//! and hold either the state before the operation or the state after it.

mod common;
use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use terrace_media::{CrashMedia, LossMode};

/// Recovers the crash image `img` of a PM-only pool ([`recover`]): it holds
/// the tree `before` or `after` the operation (`after` when
/// `must_be_after`), and passes fsck again once unmounted.
fn check_image(img: Vec<u8>, before: &Tree, after: &Tree, must_be_after: bool, ctx: &str) {
    let (media, fs) = recover(img, None, Fsck::Metadata, ctx);
    let t = fs_tree(&fs);
    assert_before_or_after(&t, before, after, must_be_after, ctx);
    fs.unmount().unwrap();
    assert_fsck_clean(
        &*media,
        None,
        Fsck::Metadata,
        &format!("{ctx}: after recovery"),
    );
}

fn run(seed: u64, steps: usize, points_per_op: usize) {
    let (media, fs) = pm_pool_on(CrashMedia::new(4 << 20), 128);
    let mut model = Model::default();
    let mut rng = StdRng::seed_from_u64(seed);
    for step in 0..steps {
        let op = random_op(&model, &mut rng);
        let before = model.tree();
        let want = apply_model(&mut model, &op);
        let after = model.tree();
        let (got, trace) = media.trace(|| apply_fs(&fs, &op));
        assert_eq!(got, want, "seed {seed} step {step}: {op:?}");
        let n = trace.len();
        let mut points: Vec<usize> = (0..points_per_op).map(|_| rng.gen_range(0..=n)).collect();
        points.push(n);
        points.sort_unstable();
        points.dedup();
        for k in points {
            let modes = [
                LossMode::AllUnflushed,
                LossMode::RandomLines(rng.gen()),
                LossMode::RandomWords(rng.gen()),
            ];
            for mode in modes {
                let ctx =
                    format!("seed {seed} step {step} {op:?} crash after event {k}/{n} {mode:?}");
                // A completed operation is durable: the last point must show it.
                check_image(trace.image_at(k, mode), &before, &after, k == n, &ctx);
            }
        }
    }
}

#[test]
fn every_crash_point_recovers_to_before_or_after_each_operation() {
    let base = base_seed("crash-image test");
    let n = env_u64("TERRACE_CRASH_SEQUENCES", 12);
    for k in 0..n {
        run(base.wrapping_add(k), 40, 4);
    }
}

/// Small log pages (format 3) at every crash point: many files whose first
/// pages share slab blocks, logs that grow into larger pages (attribute and
/// xattr entries), deletions that free units other logs' slabs keep, new
/// files that reuse them, and compactions of small logs back into one page.
/// Every event of every operation is a crash point, with all unflushed lines
/// lost and with a random subset of words persisted.
#[test]
fn crashes_while_small_logs_share_slab_blocks_recover_to_before_or_after() {
    let mut rng = StdRng::seed_from_u64(base_seed("small log pages crash test"));
    let (media, fs) = pm_pool_on(CrashMedia::new(2 << 20), 128);
    let mut model = Model::default();
    let root: Vec<Vec<u8>> = Vec::new();
    let name = |p: &str, i: usize| format!("{p}{i}").into_bytes();
    let mut ops = Vec::new();
    for i in 0..20 {
        ops.push(Op::Create(root.clone(), name("f", i)));
        ops.push(Op::Write(
            root.clone(),
            name("f", i),
            0,
            100 + i * 40,
            i as u8,
        ));
    }
    for i in (0..20).step_by(2) {
        // Attribute-sized entries grow the 256-byte first page into a chain.
        for k in 0..4 {
            ops.push(Op::SetXattr(
                root.clone(),
                name("f", i),
                format!("user.k{k}").into_bytes(),
                vec![b'v'; 60],
            ));
        }
        ops.push(Op::Truncate(root.clone(), name("f", i), 10));
    }
    for i in (0..20).step_by(3) {
        ops.push(Op::Unlink(root.clone(), name("f", i)));
    }
    for i in 0..8 {
        ops.push(Op::Create(root.clone(), name("g", i)));
        ops.push(Op::Write(root.clone(), name("g", i), 0, 5000, 7));
        ops.push(Op::Write(root.clone(), name("g", i), 100, 10, 8));
    }
    for (step, op) in ops.iter().enumerate() {
        let before = model.tree();
        let want = apply_model(&mut model, op);
        let after = model.tree();
        let (got, trace) = media.trace(|| apply_fs(&fs, op));
        assert_eq!(got, want, "step {step}: {op:?}");
        let n = trace.len();
        for k in 0..=n {
            for mode in [LossMode::AllUnflushed, LossMode::RandomWords(rng.gen())] {
                let ctx = format!("step {step} {op:?} crash after event {k}/{n} {mode:?}");
                check_image(trace.image_at(k, mode), &before, &after, k == n, &ctx);
            }
        }
    }
    assert!(fs.status().compactions > 0, "no small log was compacted");
    fs.check_allocator().unwrap();
}

/// Unnamed files (O_TMPFILE) are orphans from their creation: at every crash
/// point of creating and writing two of them, of naming one with `link`, and
/// of closing the other, the image recovers (fsck clean, allocator exact)
/// with the unnamed ones reclaimed — the tree and the free inodes as before
/// they existed — and the named one, once its link returned, an ordinary
/// file with its data. Never a leaked inode or block.
#[test]
fn unnamed_files_are_reclaimed_after_a_crash_and_linked_ones_survive() {
    let mut rng = StdRng::seed_from_u64(base_seed("tmpfile crash test"));
    let (media, fs) = pm_pool_on(CrashMedia::new(4 << 20), 64);
    let d = fs.mkdir(1, b"d", 0o755, CTX).unwrap().ino;
    let empty = fs_tree(&fs);
    let ffree = fs.statfs().ffree;
    // Recovers an image that holds `after` (when `must_be_after`) or `before`.
    let check = |img: Vec<u8>, before: &Tree, after: &Tree, must_be_after: bool, ctx: &str| {
        let (media, fs) = recover(img, None, Fsck::Metadata, ctx);
        let t = fs_tree(&fs);
        if must_be_after || t != *before {
            assert_same_tree(&t, after, ctx);
        }
        // Only d/b may hold an inode besides the root and d.
        let named = u64::from(t.contains_key("/d/b"));
        assert_eq!(fs.statfs().ffree, ffree - named, "{ctx}: free inodes");
        fs.unmount().unwrap();
        let report = terrace_core::fsck::check(&*media, &[], &mut |_, _| {}).unwrap();
        assert!(report.orphans.is_empty(), "{ctx}: orphans after recovery");
        assert_fsck_clean(&*media, None, Fsck::Metadata, &format!("{ctx}: after"));
    };
    let modes = |rng: &mut StdRng| [LossMode::AllUnflushed, LossMode::RandomWords(rng.gen())];
    // Creating and writing two unnamed files: nothing of them survives.
    let ((a, b), trace) = media.trace(|| {
        let (a, _) = fs.tmpfile(d, 0o644, libc::O_RDWR, CTX).unwrap();
        fs.write(a.ino, 0, &vec![1u8; 10_000]).unwrap();
        let (b, _) = fs.tmpfile(d, 0o600, libc::O_WRONLY, CTX).unwrap();
        fs.write(b.ino, 0, b"named later").unwrap();
        (a.ino, b.ino)
    });
    let n = trace.len();
    assert!(n > 0);
    for k in 0..=n {
        for mode in modes(&mut rng) {
            let ctx = format!("create unnamed files: crash after event {k}/{n} {mode:?}");
            check(trace.image_at(k, mode), &empty, &empty, false, &ctx);
        }
    }
    // Both are orphans on media, which fsck reports (and mount frees).
    let report = terrace_core::fsck::check(&*media, &[], &mut |_, _| {}).unwrap();
    assert_eq!(report.orphans, [a, b]);
    // Naming b: the image holds d/b with its data, or (before the link
    // returned) nothing.
    let (r, trace) = media.trace(|| fs.link(b, d, b"b"));
    assert_eq!(r.unwrap().nlink, 1);
    let named = fs_tree(&fs);
    assert_ne!(named, empty);
    let n = trace.len();
    assert!(n > 0);
    for k in 0..=n {
        for mode in modes(&mut rng) {
            let ctx = format!("link: crash after event {k}/{n} {mode:?}");
            check(trace.image_at(k, mode), &empty, &named, k == n, &ctx);
        }
    }
    // Closing both: a is freed, b stays.
    let ((), trace) = media.trace(|| {
        fs.release(a).unwrap();
        fs.release(b).unwrap();
    });
    let n = trace.len();
    assert!(n > 0);
    for k in 0..=n {
        for mode in modes(&mut rng) {
            let ctx = format!("close: crash after event {k}/{n} {mode:?}");
            check(trace.image_at(k, mode), &named, &named, true, &ctx);
        }
    }
    fs.check_allocator().unwrap();
}
