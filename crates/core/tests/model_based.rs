//! The core against a reference model: random operation sequences applied to
//! both, compared after every step (results, errno and the whole tree), with
//! remounts (clean and unclean) in between. Seeds are printed on failure.

mod common;
use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn run_sequence(seed: u64, steps: usize) {
    let (media, mut fs) = pm_pool(8 << 20, 256);
    let mut model = Model::default();
    let mut rng = StdRng::seed_from_u64(seed);
    for step in 0..steps {
        if rng.gen_range(0..40) == 0 {
            // Remount: half the time cleanly, half as after a process crash.
            if rng.gen_bool(0.5) {
                fs.unmount().unwrap();
            }
            drop(fs);
            fs = mount(media.clone());
        }
        let ctx = format!("seed {seed} step {step}");
        random_step(&fs, &mut model, &mut rng, &ctx);
        if step % 10 == 0 {
            fs.check_allocator()
                .unwrap_or_else(|e| panic!("seed {seed} step {step}: {e}"));
        }
    }
    fs.check_allocator()
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    fs.unmount().unwrap();
    assert_fsck_clean(&*media, None, Fsck::Metadata, &format!("seed {seed}"));
}

#[test]
fn random_operation_sequences_match_the_reference_model() {
    let base = base_seed("model test");
    let n = env_u64("TERRACE_SEQUENCES", 1000);
    for k in 0..n {
        run_sequence(base.wrapping_add(k), 60);
    }
}
