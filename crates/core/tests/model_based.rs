//! The core against a reference model: random operation sequences applied to
//! both, compared after every step (results, errno and the whole tree), with
//! remounts (clean and unclean) in between. Seeds are printed on failure.

mod common;
use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use terrace_media::{MemMedia, PmMedia};

fn run_sequence(seed: u64, steps: usize) {
    let media = Arc::new(MemMedia::new(8 << 20));
    mkfs(&*media, 256);
    let mut fs = mount(media.clone() as Arc<dyn PmMedia>);
    let mut model = Model::default();
    let mut rng = StdRng::seed_from_u64(seed);
    for step in 0..steps {
        if rng.gen_range(0..40) == 0 {
            // Remount: half the time cleanly, half as after a process crash.
            if rng.gen_bool(0.5) {
                fs.unmount().unwrap();
            }
            drop(fs);
            fs = mount(media.clone() as Arc<dyn PmMedia>);
        }
        let op = random_op(&model, &mut rng);
        let want = apply_model(&mut model, &op);
        let got = apply_fs(&fs, &op);
        assert_eq!(got, want, "seed {seed} step {step}: {op:?}");
        assert_same_tree(
            &fs_tree(&fs),
            &model.tree(),
            &format!("seed {seed} step {step} after {op:?}"),
        );
        if step % 10 == 0 {
            fs.check_allocator()
                .unwrap_or_else(|e| panic!("seed {seed} step {step}: {e}"));
        }
    }
    fs.check_allocator()
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    fs.unmount().unwrap();
    let report = terrace_core::fsck::check(&*media, &[], &mut |_, _| {}).unwrap();
    assert!(
        report.is_clean(),
        "seed {seed}: fsck: {:?}",
        report.problems
    );
}

#[test]
fn random_operation_sequences_match_the_reference_model() {
    let base = base_seed("model test");
    let n = env_u64("TERRACE_SEQUENCES", 1000);
    for k in 0..n {
        run_sequence(base.wrapping_add(k), 60);
    }
}
