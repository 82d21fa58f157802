//! Crash consistency on simulated persistent memory: every operation of a random
//! workload is traced; crash images are built for crash points inside it, with
//! all unflushed cache lines lost and with random subsets of them (whole lines,
//! and 8-byte words) persisted; each image must mount without fsck, pass fsck,
//! and hold either the state before the operation or the state after it.

mod common;
use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use terrace_media::{CrashMedia, LossMode, MemMedia, PmMedia};

fn check_image(img: Vec<u8>, before: &Tree, after: &Tree, must_be_after: bool, ctx: &str) {
    let media = Arc::new(MemMedia::from_image(img));
    let report = terrace_core::fsck::check(&*media, &mut |_, _| {})
        .unwrap_or_else(|e| panic!("{ctx}: fsck cannot read: {e}"));
    assert!(
        report.is_clean(),
        "{ctx}: fsck before mount: {:?}",
        report.problems
    );
    let fs = terrace_core::Fs::mount(media.clone() as Arc<dyn PmMedia>)
        .unwrap_or_else(|e| panic!("{ctx}: mount: {e}"));
    fs.check_allocator()
        .unwrap_or_else(|e| panic!("{ctx}: allocator: {e}"));
    let t = fs_tree(&fs);
    if must_be_after || before == after {
        assert_same_tree(&t, after, ctx);
    } else if t != *before && t != *after {
        panic!(
            "{ctx}: state is neither before nor after:\nvs before:\n{}\nvs after:\n{}",
            diff_trees(&t, before),
            diff_trees(&t, after)
        );
    }
    fs.unmount().unwrap();
    let report = terrace_core::fsck::check(&*media, &mut |_, _| {}).unwrap();
    assert!(
        report.is_clean(),
        "{ctx}: fsck after recovery: {:?}",
        report.problems
    );
}

fn run(seed: u64, steps: usize, points_per_op: usize) {
    let media = Arc::new(CrashMedia::new(4 << 20));
    mkfs(&*media, 128);
    let fs = mount(media.clone() as Arc<dyn PmMedia>);
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
