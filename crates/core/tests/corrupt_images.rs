//! Damaged pools never crash the code that opens, reads or checks them.
//!
//! A pool with files on PM and on an SSD tier, many directory entries, hard
//! links, symlinks, xattrs and a migration behind it is damaged in random ways
//! (bits flipped in metadata bytes, a random run of garbage, a zeroed page, a
//! damaged SSD image). For every damaged pair of images, mount either refuses
//! with an error or succeeds; when it succeeds, walking the whole tree,
//! reading every file, writing a new file and unmounting return results or
//! errors. fsck (check, then repair) also returns a report or an error. None
//! of it may panic, and a pool that mount accepted and fsck called clean must
//! still mount after the session.
//!
//! `TERRACE_CORRUPT_CASES` sets the number of damaged images (default 1000);
//! `TERRACE_SEED` the base seed. A failure prints the seed of its case.

mod common;
use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use terrace_core::{fsck, FileType, Fs};
use terrace_format::{
    inode_offset, pool_start_block, BLOCK_SIZE, INODE_OFF_LOG_HEAD, INODE_OFF_STATE, INODE_USED,
    LOG_PAGE_OFF_NEXT,
};
use terrace_media::{BlockMedia, MemBlock, MemMedia, PmMedia};

const PM: u64 = 4 << 20;
const SSD: u64 = 16 << 20;
const INODES: u64 = 128;

fn open(pm: &Arc<MemMedia>, ssd: &Arc<MemBlock>) -> std::io::Result<Fs> {
    Fs::mount_with_tiers(
        pm.clone() as Arc<dyn PmMedia>,
        vec![(1, ssd.clone() as Arc<dyn BlockMedia>)],
    )
    .map_err(|e| std::io::Error::other(e.to_string()))
}

/// A pool worth damaging: `(pm image, ssd image)` after a clean unmount, and
/// the same pool while still mounted (a crash image).
fn build_pool(seed: u64) -> [(Vec<u8>, Vec<u8>); 2] {
    let (pm, ssd, fs) = tiered_pool(PM, SSD, INODES);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut model = Model::default();
    for _ in 0..300 {
        let op = random_op(&model, &mut rng);
        let want = apply_model(&mut model, &op);
        let got = apply_fs(&fs, &op);
        assert_eq!(got, want, "seed {seed}: {op:?}");
    }
    // Data on the SSD tier too: a file larger than PM's threshold, moved down.
    let big = fs.mknod(1, b"big", libc::S_IFREG | 0o644, 0, CTX).unwrap();
    for i in 0..12u64 {
        fs.write(big.ino, i * (256 << 10), &pattern(i, 256 << 10))
            .unwrap();
    }
    fs.migrate_file(big.ino, 1).unwrap();
    fs.write(big.ino, 100_000, b"overwritten on PM after the move")
        .unwrap();
    fs.forget(big.ino, 1);
    let crashed = (pm.image(), ssd.image());
    fs.unmount().unwrap();
    [(pm.image(), ssd.image()), crashed]
}

/// Damages `img` in one of several ways; `nonzero` lists offsets of bytes
/// that are not zero (metadata, names, data), where damage matters most.
fn damage(img: &mut [u8], nonzero: &[usize], rng: &mut StdRng) -> String {
    let len = img.len();
    match rng.gen_range(0..5) {
        0 | 1 => {
            let n = rng.gen_range(1..=4);
            let mut at = Vec::new();
            for _ in 0..n {
                let o = nonzero[rng.gen_range(0..nonzero.len())];
                img[o] ^= 1 << rng.gen_range(0..8);
                at.push(o);
            }
            format!("bits flipped at {at:?}")
        }
        2 => {
            let o = nonzero[rng.gen_range(0..nonzero.len())];
            // Within the page of `o`: the next page may be file data.
            let n = rng.gen_range(1..64).min(4096 - o % 4096).min(len - o);
            rng.fill(&mut img[o..o + n]);
            format!("{n} random bytes at {o}")
        }
        3 => {
            let page = nonzero[rng.gen_range(0..nonzero.len())] / 4096 * 4096;
            img[page..(page + 4096).min(len)].fill(0);
            format!("page at {page} zeroed")
        }
        _ => {
            let o = nonzero[rng.gen_range(0..nonzero.len())];
            img[o] ^= 0xff;
            format!("byte at {o} inverted")
        }
    }
}

fn nonzero_offsets(img: &[u8]) -> Vec<usize> {
    img.iter()
        .enumerate()
        .filter(|(_, b)| **b != 0)
        .map(|(i, _)| i)
        .collect()
}

/// Offsets of the non-zero metadata bytes of a PM image: superblocks, journal,
/// inode table, and every log page reachable from a used inode slot.
fn metadata_offsets(img: &[u8], inodes: u64) -> Vec<usize> {
    let u64_at = |o: u64| -> u64 {
        let o = o as usize;
        img.get(o..o + 8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
            .unwrap_or(0)
    };
    let mut pages: Vec<u64> = (0..pool_start_block(inodes)).collect();
    for ino in 1..inodes {
        let slot = inode_offset(ino);
        if u64_at(slot + INODE_OFF_STATE) != INODE_USED {
            continue;
        }
        let mut page = u64_at(slot + INODE_OFF_LOG_HEAD) & ((1 << 48) - 1);
        let mut hops = 0;
        while page != 0 && page + BLOCK_SIZE <= img.len() as u64 && hops < 10_000 {
            pages.push(page / BLOCK_SIZE);
            page = u64_at(page + LOG_PAGE_OFF_NEXT) & ((1 << 48) - 1);
            hops += 1;
        }
    }
    pages.sort_unstable();
    pages.dedup();
    pages
        .into_iter()
        .flat_map(|p| (p * BLOCK_SIZE) as usize..((p + 1) * BLOCK_SIZE) as usize)
        .filter(|&o| o < img.len() && img[o] != 0)
        .collect()
}

/// Walks and reads everything it can; errors are fine, panics are not.
fn exercise(fs: &Fs) {
    let mut stack = vec![1u64];
    let mut seen = 0;
    while let Some(dir) = stack.pop() {
        let mut off = 0;
        while let Ok(ents) = fs.readdir(dir, off, 64) {
            if ents.is_empty() || seen > 10_000 {
                break;
            }
            for e in &ents {
                off = e.next_offset;
                seen += 1;
                if e.name == b"." || e.name == b".." {
                    continue;
                }
                let Ok(a) = fs.lookup(dir, &e.name) else {
                    continue;
                };
                match a.kind {
                    FileType::Regular => {
                        let _ = fs.read(a.ino, 0, a.size.min(8 << 20) as usize);
                    }
                    FileType::Symlink => {
                        let _ = fs.readlink(a.ino);
                    }
                    FileType::Directory => stack.push(a.ino),
                    _ => {}
                }
                if let Ok(names) = fs.listxattr(a.ino) {
                    for n in names {
                        let _ = fs.getxattr(a.ino, &n);
                    }
                }
                fs.forget(a.ino, 1);
            }
        }
    }
    if let Ok(a) = fs.mknod(1, b"after-damage", libc::S_IFREG | 0o644, 0, CTX) {
        let _ = fs.write(a.ino, 0, &pattern(3, 300_000));
        let _ = fs.read(a.ino, 0, 300_000);
        fs.forget(a.ino, 1);
    }
    let _ = fs.migration_pass();
}

/// One damaged case: returns what happened, or the panic message.
///
/// `expect`: the tree of the undamaged pool, when the damage hit metadata
/// only: a pool that mounts must then show exactly that tree, or an error
/// while it is walked — never different names, links, sizes or bytes.
fn run_case(
    pm_img: Vec<u8>,
    ssd_img: Vec<u8>,
    expect: Option<&Tree>,
) -> Result<&'static str, String> {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let pm = Arc::new(MemMedia::from_image(pm_img));
        let ssd = Arc::new(MemBlock::from_image(ssd_img));
        let checked = fsck::check(&*pm, &[], &mut |_, _| {});
        let was_clean = matches!(&checked, Ok(r) if r.is_clean());
        let mounted = match open(&pm, &ssd) {
            Ok(fs) => {
                if let Some(want) = expect {
                    // fs_tree panics on the first error: an error is an answer.
                    let walked = catch_unwind(AssertUnwindSafe(|| fs_tree(&fs)));
                    if let Ok(got) = walked {
                        if &got != want {
                            return Err(format!(
                                "mounted and served a different tree:\n{}",
                                diff_trees(&got, want)
                            ));
                        }
                    }
                }
                exercise(&fs);
                let _ = fs.unmount();
                true
            }
            Err(_) => false,
        };
        if mounted && was_clean {
            // What fsck called clean and mount accepted stays mountable.
            let fs = open(&pm, &ssd).map_err(|e| format!("clean pool no longer mounts: {e}"))?;
            exercise(&fs);
            let _ = fs.unmount();
        }
        // Repair never panics either, and a pool it calls clean mounts.
        let given: [(u8, Arc<dyn BlockMedia>); 1] = [(1, ssd.clone() as Arc<dyn BlockMedia>)];
        if fsck::repair(pm.clone() as Arc<dyn PmMedia>, &given, &mut |_, _| {})
            .is_ok_and(|r| r.is_clean())
        {
            let fs = open(&pm, &ssd).map_err(|e| format!("repaired pool does not mount: {e}"))?;
            exercise(&fs);
            let _ = fs.unmount();
        }
        Ok(if mounted { "mounted" } else { "refused" })
    }));
    match outcome {
        Ok(r) => r,
        Err(p) => Err(p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "panic".into())),
    }
}

#[test]
fn damaged_pools_are_refused_or_served_without_a_panic() {
    let base = base_seed("damaged_pools_are_refused_or_served_without_a_panic");
    let cases = env_u64("TERRACE_CORRUPT_CASES", 1000);
    let pools = build_pool(base);
    let trees: Vec<Tree> = pools
        .iter()
        .map(|(p, s)| {
            let pm = Arc::new(MemMedia::from_image(p.clone()));
            let ssd = Arc::new(MemBlock::from_image(s.clone()));
            let fs = open(&pm, &ssd).unwrap();
            let t = fs_tree(&fs);
            fs.unmount().unwrap();
            t
        })
        .collect();
    let nz: Vec<[Vec<usize>; 3]> = pools
        .iter()
        .map(|(p, s)| {
            [
                metadata_offsets(p, INODES),
                nonzero_offsets(p),
                nonzero_offsets(s),
            ]
        })
        .collect();
    let (mut mounted, mut refused) = (0, 0);
    let mut failures = Vec::new();
    for case in 0..cases {
        let seed = base.wrapping_add(case);
        let mut rng = StdRng::seed_from_u64(seed);
        let which = rng.gen_range(0..2);
        let (mut pm, mut ssd) = pools[which].clone();
        let kind = rng.gen_range(0..8);
        let what = match kind {
            0 => format!("ssd: {}", damage(&mut ssd, &nz[which][2], &mut rng)),
            1 => format!("pm anywhere: {}", damage(&mut pm, &nz[which][1], &mut rng)),
            _ => format!("pm metadata: {}", damage(&mut pm, &nz[which][0], &mut rng)),
        };
        let expect = (kind >= 2).then_some(&trees[which]);
        match run_case(pm, ssd, expect) {
            Ok("mounted") => mounted += 1,
            Ok(_) => refused += 1,
            Err(msg) => failures.push(format!(
                "seed {seed} ({}, {what}): {msg}",
                ["clean image", "crash image"][which]
            )),
        }
    }
    eprintln!("{cases} damaged pools: {mounted} mounted, {refused} refused");
    assert!(
        failures.is_empty(),
        "{} of {cases} cases panicked or lost a clean pool:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // The damage must reach metadata often enough to matter.
    assert!(
        refused > 0,
        "no damaged pool was refused: the damage missed the metadata"
    );
}
