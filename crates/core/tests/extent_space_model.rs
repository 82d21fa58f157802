//! A block tier's extent space against a reference model of its blocks,
//! under random sequences of allocations, releases (whole runs and pieces,
//! at the given mark and elsewhere), recycling's seals and remounts.
//!
//! The model knows which blocks live entries hold. Checked after every
//! step: no block is handed out twice while held; the space's valid counts
//! and marks agree with what is held (`check_referenced`); an allocation
//! succeeds exactly when the space says it has the room; an allocation
//! given back at once, in any order, leaves the room as it was; and after a
//! remount the room is exactly the free extents plus every partly held
//! extent's blocks past its last held one.

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use terrace_core::alloc::Run;
use terrace_core::tier::ExtentSpace;

/// Blocks per extent: small, so runs cross extents often.
const EB: u64 = 16;
/// Extents, the header's included.
const EXTENTS: u64 = 24;

struct Model {
    held: Vec<bool>,
    /// Held runs, each within the blocks one allocation gave.
    runs: Vec<Run>,
}

impl Model {
    fn held_blocks(&self) -> u64 {
        self.held.iter().filter(|&&h| h).count() as u64
    }

    /// The room a freshly rebuilt space must show.
    fn room_after_mount(&self) -> u64 {
        (1..EXTENTS)
            .map(|e| {
                let blocks = &self.held[(e * EB) as usize..((e + 1) * EB) as usize];
                match blocks.iter().rposition(|&h| h) {
                    Some(last) => EB - 1 - last as u64,
                    None => EB,
                }
            })
            .sum()
    }

    /// Whether any block of extent `e` is held.
    fn holds_in(&self, e: u64) -> bool {
        self.held[(e * EB) as usize..((e + 1) * EB) as usize]
            .iter()
            .any(|&h| h)
    }

    fn take(&mut self, runs: &[Run], ctx: &str) {
        for &(s, n) in runs {
            for b in s.get()..s.get() + n {
                assert!(
                    (EB..EXTENTS * EB).contains(&b),
                    "{ctx}: block {b} outside the extents"
                );
                assert!(!self.held[b as usize], "{ctx}: block {b} handed out twice");
                self.held[b as usize] = true;
            }
        }
    }

    fn give(&mut self, (s, n): Run) {
        for b in s.get()..s.get() + n {
            assert!(self.held[b as usize]);
            self.held[b as usize] = false;
        }
    }
}

fn check(s: &ExtentSpace, m: &Model, ctx: &str) {
    s.check_referenced(&m.runs)
        .unwrap_or_else(|e| panic!("{ctx}: {e}"));
    let st = s.stats();
    assert_eq!(st.valid_blocks, m.held_blocks(), "{ctx}");
    assert!(
        st.free_blocks + m.held_blocks() <= (EXTENTS - 1) * EB,
        "{ctx}: {} free and {} held of {}",
        st.free_blocks,
        m.held_blocks(),
        (EXTENTS - 1) * EB
    );
}

/// Splits `runs` into pieces of at most `EB` blocks at random points (each
/// is released on its own later).
fn pieces(runs: &[Run], rng: &mut StdRng) -> Vec<Run> {
    let mut out = Vec::new();
    for &(s, n) in runs {
        let mut at = 0;
        while at < n {
            let k = rng.gen_range(1..=EB).min(n - at);
            out.push((s + at, k));
            at += k;
        }
    }
    out
}

fn run_sequence(seed: u64, steps: usize) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut s = ExtentSpace::new(EXTENTS * EB, EB, vec![]).unwrap();
    let mut m = Model {
        held: vec![false; (EXTENTS * EB) as usize],
        runs: Vec::new(),
    };
    let mut sealed: Vec<u64> = Vec::new();
    // The sealed extents that held blocks when sealed, until they empty
    // (an empty one is not sealed, and once emptied it is free again).
    let mut watched: Vec<u64> = Vec::new();
    for step in 0..steps {
        let ctx = format!("seed {seed} step {step}");
        match rng.gen_range(0..100) {
            0..=34 => {
                let n = rng.gen_range(1..=3 * EB);
                let recycling = rng.gen_bool(0.1);
                // Recycling may take the reserve too.
                let room = if recycling {
                    s.stats().free_blocks
                } else {
                    s.free_blocks()
                };
                let got = if recycling {
                    s.alloc_recycling(n)
                } else {
                    s.alloc(n)
                };
                match got {
                    Some(runs) => {
                        assert!(n <= room, "{ctx}: {n} given with {room} of room");
                        // Nothing lands in an extent recycling is emptying
                        // (unless it emptied and was freed meanwhile).
                        for &(b, k) in &runs {
                            for e in b.get() / EB..=(b.get() + k - 1) / EB {
                                assert!(
                                    !watched.contains(&e),
                                    "{ctx}: {b}+{k} given in sealed extent {e}"
                                );
                            }
                        }
                        assert_eq!(runs.iter().map(|r| r.1).sum::<u64>(), n, "{ctx}");
                        m.take(&runs, &ctx);
                        let p = pieces(&runs, &mut rng);
                        m.runs.extend(p);
                    }
                    None => assert!(n > room, "{ctx}: {n} refused with {room} of room"),
                }
            }
            35..=54 if !m.runs.is_empty() => {
                // The newest piece more often: releases at the mark.
                let i = if rng.gen_bool(0.5) {
                    m.runs.len() - 1
                } else {
                    rng.gen_range(0..m.runs.len())
                };
                let r = m.runs.swap_remove(i);
                m.give(r);
                s.release(r.0, r.1);
                watched.retain(|&e| m.holds_in(e));
            }
            55..=69 if sealed.is_empty() => {
                // An allocation dropped before its commit: given back whole,
                // its runs in any order, the room is as before.
                let n = rng.gen_range(1..=3 * EB);
                let before = s.free_blocks();
                if let Some(runs) = s.alloc(n) {
                    // The extents in any order; in each, the pieces newest
                    // first (each at the mark when it goes).
                    let mut by_extent: Vec<Vec<Run>> = Vec::new();
                    for r in pieces(&runs, &mut rng) {
                        match by_extent.last_mut() {
                            Some(g) if g[0].0.get() / EB == r.0.get() / EB => g.push(r),
                            _ => by_extent.push(vec![r]),
                        }
                    }
                    by_extent.shuffle(&mut rng);
                    for g in by_extent {
                        for &(b, k) in g.iter().rev() {
                            s.release(b, k);
                        }
                    }
                    assert_eq!(s.free_blocks(), before, "{ctx}: {n} taken and given back");
                }
            }
            70..=77 => {
                if sealed.is_empty() {
                    sealed = (0..rng.gen_range(1..4))
                        .map(|_| rng.gen_range(1..EXTENTS))
                        .collect();
                    s.seal(&sealed);
                    watched = sealed.iter().copied().filter(|&e| m.holds_in(e)).collect();
                } else {
                    s.unseal(&sealed);
                    sealed.clear();
                    watched.clear();
                }
            }
            78..=81 => {
                // A remount: the space is rebuilt from what is held.
                sealed.clear();
                watched.clear();
                s = ExtentSpace::new(EXTENTS * EB, EB, m.runs.clone()).unwrap();
                assert_eq!(s.stats().free_blocks, m.room_after_mount(), "{ctx}: mount");
            }
            _ => {}
        }
        check(&s, &m, &ctx);
    }
}

#[test]
fn random_allocations_releases_seals_and_mounts_match_the_model() {
    for seed in 0..256 {
        run_sequence(seed, 1500);
    }
}
