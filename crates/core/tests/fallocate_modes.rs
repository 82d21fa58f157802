//! fallocate's ZERO_RANGE (with and without KEEP_SIZE), COLLAPSE_RANGE and
//! INSERT_RANGE against a byte-vector model of the file, on PM-only and
//! tiered (PM + SSD, data in the DRAM cache) pools, across remounts, and at
//! every crash point of each operation (the file is the old one or the new
//! one, never a mix).

mod common;
use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use terrace_core::ops_file::MAX_FILE_SIZE;
use terrace_core::{FallocateMode, Fs, SetAttr};
use terrace_media::{BlockLoss, CrashMedia, LossMode, PmMedia};

const BS: u64 = 4096;
const SSD: u64 = 96 << 20;

/// One operation on the file.
#[derive(Debug, Clone, Copy)]
enum Op {
    Write(u64, usize, u64),
    Falloc(FallocateMode, u64, u64),
    Truncate(u64),
}

/// What fallocate(2) does to a file of content `f` (ext4's checks and
/// results; `Err` = errno, the file unchanged).
fn model_fallocate(f: &mut Vec<u8>, mode: FallocateMode, off: u64, len: u64) -> Result<(), i32> {
    use FallocateMode::*;
    if len == 0 {
        return Err(libc::EINVAL);
    }
    let end = off.checked_add(len).ok_or(libc::EFBIG)?;
    if end > MAX_FILE_SIZE {
        return Err(libc::EFBIG);
    }
    let size = f.len() as u64;
    let zero = |f: &mut Vec<u8>, from: u64, to: u64| {
        let to = to.min(f.len() as u64);
        if from < to {
            f[from as usize..to as usize].fill(0);
        }
    };
    match mode {
        Allocate | ZeroRange if end > size => f.resize(end as usize, 0),
        _ => {}
    }
    match mode {
        Allocate | AllocateKeepSize => {}
        PunchHole | ZeroRange | ZeroRangeKeepSize => zero(f, off, end),
        CollapseRange => {
            if off % BS != 0 || len % BS != 0 || end >= size {
                return Err(libc::EINVAL);
            }
            f.drain(off as usize..end as usize);
        }
        InsertRange => {
            if off % BS != 0 || len % BS != 0 {
                return Err(libc::EINVAL);
            }
            if len > MAX_FILE_SIZE - size {
                return Err(libc::EFBIG);
            }
            if off >= size {
                return Err(libc::EINVAL);
            }
            f.splice(
                off as usize..off as usize,
                std::iter::repeat(0).take(len as usize),
            );
        }
    }
    Ok(())
}

fn model_apply(f: &mut Vec<u8>, op: &Op) -> Result<(), i32> {
    match *op {
        Op::Write(off, len, seed) => {
            let end = off as usize + len;
            if f.len() < end {
                f.resize(end, 0);
            }
            f[off as usize..end].copy_from_slice(&pattern(seed, len));
            Ok(())
        }
        Op::Falloc(m, off, len) => model_fallocate(f, m, off, len),
        Op::Truncate(s) => {
            f.resize(s as usize, 0);
            Ok(())
        }
    }
}

fn fs_apply(fs: &Fs, ino: u64, op: &Op) -> Result<(), i32> {
    let r = match *op {
        Op::Write(off, len, seed) => fs.write(ino, off, &pattern(seed, len)).map(|_| ()),
        Op::Falloc(m, off, len) => fs.fallocate(ino, off, len, m),
        Op::Truncate(s) => fs
            .setattr(
                ino,
                SetAttr {
                    size: Some(s),
                    ..Default::default()
                },
            )
            .map(|_| ()),
    };
    r.map_err(|e| e.raw_os_error().unwrap_or(-1))
}

fn assert_content(fs: &Fs, ino: u64, want: &[u8], ctx: &str) {
    let got = content(fs, ino);
    if got != want {
        let first = got.iter().zip(want).position(|(a, b)| a != b);
        panic!(
            "{ctx}: file differs from the model: {} bytes, want {}; first differing byte {first:?}",
            got.len(),
            want.len()
        );
    }
}

/// A random operation: mostly the new modes, over a file of up to ~300 KiB;
/// COLLAPSE/INSERT mostly block-aligned (so most succeed), sometimes not.
fn random_op(rng: &mut StdRng, size: u64) -> Op {
    use FallocateMode::*;
    let span = size.max(BS) + 16 * BS;
    let any_off = |rng: &mut StdRng| rng.gen_range(0..span);
    let any_len = |rng: &mut StdRng| rng.gen_range(1..12 * BS);
    let aligned = |rng: &mut StdRng, upto: u64| rng.gen_range(0..upto.div_ceil(BS).max(1)) * BS;
    match rng.gen_range(0..20) {
        0..=3 => Op::Write(
            any_off(rng).min(280 << 10),
            rng.gen_range(1..40_000),
            rng.gen(),
        ),
        4..=6 => Op::Falloc(ZeroRange, any_off(rng), any_len(rng)),
        7..=8 => Op::Falloc(ZeroRangeKeepSize, any_off(rng), any_len(rng)),
        9..=11 => {
            if rng.gen_bool(0.85) {
                let off = aligned(rng, size);
                Op::Falloc(CollapseRange, off, rng.gen_range(1..6) * BS)
            } else {
                Op::Falloc(CollapseRange, any_off(rng), any_len(rng))
            }
        }
        12..=14 => {
            if rng.gen_bool(0.85) {
                let off = aligned(rng, size);
                Op::Falloc(InsertRange, off, rng.gen_range(1..6) * BS)
            } else {
                Op::Falloc(InsertRange, any_off(rng), any_len(rng))
            }
        }
        15 => Op::Falloc(PunchHole, any_off(rng), any_len(rng)),
        16 => Op::Falloc(AllocateKeepSize, any_off(rng), any_len(rng)),
        17 => Op::Falloc(Allocate, any_off(rng), any_len(rng)),
        _ => Op::Truncate(rng.gen_range(0..span)),
    }
}

/// Runs `steps` random operations on one file of `fs`, comparing with the
/// model after each; returns the model. `each` runs after every step
/// (fsync, remount checks, ...).
fn run_model(
    fs: &Fs,
    ino: u64,
    seed: u64,
    steps: usize,
    model: &mut Vec<u8>,
    each: &mut dyn FnMut(&Fs, usize),
) {
    let mut rng = StdRng::seed_from_u64(seed);
    for step in 0..steps {
        let op = random_op(&mut rng, model.len() as u64);
        let want = model_apply(model, &op);
        let got = fs_apply(fs, ino, &op);
        let ctx = format!("seed {seed} step {step} {op:?}");
        assert_eq!(got, want, "{ctx}: result");
        assert_content(fs, ino, model, &ctx);
        each(fs, step);
    }
}

#[test]
fn every_mode_matches_a_byte_model_on_a_pm_only_pool_and_after_remounts() {
    let base = base_seed("fallocate modes, PM only");
    for k in 0..env_u64("TERRACE_FALLOC_SEQUENCES", 6) {
        let seed = base.wrapping_add(k);
        let (pm, fs) = pm_pool(32 << 20, 64);
        let ino = file(&fs, 1, "f");
        let mut model = Vec::new();
        run_model(&fs, ino, seed, 150, &mut model, &mut |fs, _| {
            fs.check_allocator().unwrap()
        });
        fs.unmount().unwrap();
        drop(fs);
        let fs = mount(pm.clone());
        fs.check_allocator().unwrap();
        assert_content(&fs, ino, &model, &format!("seed {seed} after remount"));
        // More operations on the replayed state (Shift entries replayed).
        run_model(&fs, ino, seed ^ 0x5eed, 60, &mut model, &mut |_, _| {});
        drop(fs);
        // A crash-like remount (no unmount): replay of the whole log.
        let fs = mount(pm.clone());
        assert_content(&fs, ino, &model, &format!("seed {seed} after replay"));
        fs.unmount().unwrap();
        assert_fsck_clean(&*pm, None, Fsck::Metadata, &format!("seed {seed}"));
    }
}

#[test]
fn every_mode_matches_a_byte_model_on_a_tiered_pool_with_cached_data() {
    let base = base_seed("fallocate modes, tiered");
    for k in 0..env_u64("TERRACE_FALLOC_SEQUENCES", 4) {
        let seed = base.wrapping_add(k);
        let (pm, ssd, fs) = tiered_pool(8 << 20, SSD, 64);
        // Writes go to the SSD through the DRAM cache and stay there until
        // an fsync (or the fallocate itself) writes them back.
        block_first(&fs);
        let ino = file(&fs, 1, "f");
        let mut model = Vec::new();
        let mut rng = StdRng::seed_from_u64(seed ^ 1);
        let (mut saw_dirty, mut saw_ssd) = (false, false);
        run_model(&fs, ino, seed, 150, &mut model, &mut |fs, _| {
            saw_dirty |= tier_bytes(fs, ino, "dram") > 0;
            saw_ssd |= tier_bytes(fs, ino, "ssd") > 0;
            if rng.gen_bool(0.2) {
                // Write-back without an fsync (which would make the
                // synchronicity predictor write the file through).
                fs.flush_inode(ino).unwrap();
            }
            fs.check_allocator().unwrap();
        });
        assert!(saw_dirty, "seed {seed}: no data was ever in the DRAM cache");
        assert!(saw_ssd, "seed {seed}: nothing was ever on the SSD");
        fs.unmount().unwrap();
        drop(fs);
        let fs = mount_tiered(pm.clone(), ssd.clone());
        fs.check_allocator().unwrap();
        assert_content(&fs, ino, &model, &format!("seed {seed} after remount"));
        fs.unmount().unwrap();
        assert_fsck_clean(&*pm, Some(ssd.clone()), Fsck::Data, &format!("seed {seed}"));
    }
}

#[test]
fn refused_requests_give_ext4s_errors_and_leave_the_file_alone() {
    use FallocateMode::*;
    let (_pm, fs) = pm_pool(32 << 20, 64);
    let data = pattern(3, 10 * BS as usize + 123);
    let ino = file_holding(&fs, "f", &data);
    let size = data.len() as u64;
    let cases = [
        (CollapseRange, 100, BS, libc::EINVAL), // unaligned offset
        (CollapseRange, BS, 100, libc::EINVAL), // unaligned length
        (CollapseRange, 8 * BS, 3 * BS, libc::EINVAL), // reaches EOF
        (CollapseRange, 12 * BS, BS, libc::EINVAL), // past EOF
        (InsertRange, 100, BS, libc::EINVAL),   // unaligned offset
        (InsertRange, BS, BS + 1, libc::EINVAL), // unaligned length
        (InsertRange, 11 * BS, BS, libc::EINVAL), // at/after EOF
        (InsertRange, 0, MAX_FILE_SIZE - BS, libc::EFBIG), // size would pass the maximum
        (ZeroRange, MAX_FILE_SIZE, 1, libc::EFBIG),
        (ZeroRange, 0, 0, libc::EINVAL),
        (CollapseRange, 0, 0, libc::EINVAL),
    ];
    for (m, off, len, e) in cases {
        let mut model = data.clone();
        assert_eq!(
            model_fallocate(&mut model, m, off, len),
            Err(e),
            "model {m:?} {off} {len}"
        );
        let got = fs.fallocate(ino, off, len, m).unwrap_err().raw_os_error();
        assert_eq!(got, Some(e), "{m:?} off {off} len {len}");
        assert_eq!(fs.getattr(ino).unwrap().size, size);
        assert_content(&fs, ino, &data, &format!("after refused {m:?}"));
    }
    let d = fs.mkdir(1, b"d", 0o755, CTX).unwrap().ino;
    for m in [ZeroRange, CollapseRange, InsertRange] {
        assert_eq!(
            fs.fallocate(d, 0, BS, m).unwrap_err().raw_os_error(),
            Some(libc::EISDIR)
        );
    }
    fs.check_allocator().unwrap();
}

#[test]
fn zero_range_leaves_the_range_allocated_and_extends_only_without_keep_size() {
    use FallocateMode::*;
    let (_pm, fs) = pm_pool(32 << 20, 64);
    let ino = file_holding(&fs, "f", &pattern(1, 3 * BS as usize));
    // A hole of 5 blocks, then 2 blocks of data.
    fs.write(ino, 8 * BS, &pattern(2, 2 * BS as usize)).unwrap();
    assert_eq!(fs.getattr(ino).unwrap().blocks, 5 * 8);
    fs.fallocate(ino, BS + 10, 9 * BS - 10, ZeroRange).unwrap();
    let a = fs.getattr(ino).unwrap();
    assert_eq!(a.size, 10 * BS, "a range inside the file leaves the size");
    assert_eq!(a.blocks, 10 * 8, "the hole was allocated");
    fs.fallocate(ino, 12 * BS, BS, ZeroRangeKeepSize).unwrap();
    let a = fs.getattr(ino).unwrap();
    assert_eq!(a.size, 10 * BS);
    assert_eq!(a.blocks, 11 * 8, "KEEP_SIZE past EOF still allocates");
    fs.fallocate(ino, 14 * BS, 100, ZeroRange).unwrap();
    let a = fs.getattr(ino).unwrap();
    assert_eq!(a.size, 14 * BS + 100);
    assert_eq!(a.blocks, 12 * 8);
    // The block allocated past EOF (KEEP_SIZE) reads as zeros once inside.
    let got = fs.read(ino, 12 * BS, BS as usize).unwrap();
    assert_eq!(got, vec![0u8; BS as usize]);
    fs.check_allocator().unwrap();
}

#[test]
fn collapse_and_insert_keep_the_blocks_and_only_move_them() {
    use FallocateMode::*;
    let (_pm, fs) = pm_pool(32 << 20, 64);
    let data = pattern(9, 64 * BS as usize + 77);
    let ino = file_holding(&fs, "f", &data);
    let free0 = fs.statfs().bfree;
    fs.fallocate(ino, 4 * BS, 40 * BS, InsertRange).unwrap();
    assert_eq!(fs.statfs().bfree, free0, "an insert allocates no data");
    assert_eq!(
        fs.getattr(ino).unwrap().blocks,
        65 * 8,
        "the inserted range is a hole"
    );
    fs.fallocate(ino, 4 * BS, 40 * BS, CollapseRange).unwrap();
    assert_content(&fs, ino, &data, "insert then collapse");
    fs.fallocate(ino, 0, 8 * BS, CollapseRange).unwrap();
    assert!(fs.statfs().bfree >= free0 + 8, "a collapse frees its range");
    assert_content(&fs, ino, &data[8 * BS as usize..], "collapse of the head");
    fs.check_allocator().unwrap();
}

/// The file on a crash image: fsck clean, mounts, and holds `old` or `new`.
fn check_crash_image(
    pm: Vec<u8>,
    ssd: Option<Vec<u8>>,
    ino: u64,
    old: &[u8],
    new: &[u8],
    must_be_new: bool,
    ctx: &str,
) {
    let (_, fs) = recover(pm, ssd, Fsck::Data, ctx);
    let got = content(&fs, ino);
    if must_be_new {
        assert!(
            got == new,
            "{ctx}: the completed operation is not on the image"
        );
    } else {
        assert!(
            got == old || got == new,
            "{ctx}: neither the old file ({} bytes) nor the new one ({} bytes): {} bytes",
            old.len(),
            new.len(),
            got.len()
        );
    }
}

/// The operations every crash test runs, on a file of 24 blocks + 100 bytes
/// with a hole at blocks 10..12.
fn crash_ops() -> Vec<(FallocateMode, u64, u64)> {
    use FallocateMode::*;
    vec![
        (ZeroRange, BS + 100, 6 * BS),
        (ZeroRangeKeepSize, 20 * BS + 5, 10 * BS),
        (ZeroRange, 22 * BS, 5 * BS + 1),
        (CollapseRange, 2 * BS, 3 * BS),
        (InsertRange, BS, 4 * BS),
        (CollapseRange, 0, 9 * BS),
        (InsertRange, 5 * BS, BS),
    ]
}

fn crash_file(fs: &Fs) -> (u64, Vec<u8>) {
    let ino = file(fs, 1, "f");
    let mut model = pattern(5, 24 * BS as usize + 100);
    model[10 * BS as usize..12 * BS as usize].fill(0);
    fs.write(ino, 0, &model[..10 * BS as usize]).unwrap();
    fs.write(ino, 12 * BS, &model[12 * BS as usize..]).unwrap();
    (ino, model)
}

#[test]
fn a_crash_at_any_point_of_each_mode_leaves_the_old_or_the_new_file_on_pm() {
    let mut rng = StdRng::seed_from_u64(base_seed("fallocate modes crash, PM"));
    let (media, fs) = pm_pool_on(CrashMedia::new(4 << 20), 32);
    let (ino, mut model) = crash_file(&fs);
    for (m, off, len) in crash_ops() {
        let old = model.clone();
        model_fallocate(&mut model, m, off, len).unwrap();
        let (r, trace) = media.trace(|| fs.fallocate(ino, off, len, m));
        r.unwrap();
        assert_content(&fs, ino, &model, &format!("{m:?}"));
        let n = trace.len();
        assert!(n > 0);
        for k in 0..=n {
            for mode in [LossMode::AllUnflushed, LossMode::RandomWords(rng.gen())] {
                let ctx = format!("{m:?} {off} {len}: crash after event {k}/{n} {mode:?}");
                check_crash_image(
                    trace.image_at(k, mode),
                    None,
                    ino,
                    &old,
                    &model,
                    k == n,
                    &ctx,
                );
            }
        }
    }
}

#[test]
fn a_crash_at_any_point_of_each_mode_leaves_the_old_or_the_new_file_on_a_tiered_pool() {
    let mut rng = StdRng::seed_from_u64(base_seed("fallocate modes crash, tiered"));
    let (pm, ssd, fs) = crash_pool(4 << 20, SSD, 32);
    block_first(&fs);
    let (ino, mut model) = crash_file(&fs);
    fs.flush_inode(ino).unwrap();
    pm.sync_all().unwrap();
    assert!(
        tier_bytes(&fs, ino, "ssd") > 0,
        "the file is not on the SSD"
    );
    for (idx, (m, off, len)) in crash_ops().into_iter().enumerate() {
        // A rewrite of one block (to the SSD, through the DRAM cache unless
        // the synchronicity predictor writes it through), made durable so
        // that "old" is what a crash keeps.
        let at = (idx as u64 % 4) * BS;
        let w = pattern(100 + idx as u64, BS as usize);
        fs.write(ino, at, &w).unwrap();
        model[at as usize..(at + BS) as usize].copy_from_slice(&w);
        fs.flush_inode(ino).unwrap();
        pm.sync_all().unwrap();
        let old = model.clone();
        model_fallocate(&mut model, m, off, len).unwrap();
        let (r, trace) = pm.trace(|| fs.fallocate(ino, off, len, m));
        r.unwrap();
        assert_content(&fs, ino, &model, &format!("{m:?}"));
        let n = trace.len();
        for k in 0..=n {
            let loss = if rng.gen_bool(0.5) {
                BlockLoss::AllUnsynced
            } else {
                BlockLoss::RandomBlocks(rng.gen())
            };
            let ssd_img = ssd.image_at_time(trace.time_after(k), loss);
            let ctx = format!("{m:?} {off} {len}: crash after event {k}/{n}");
            check_crash_image(
                trace.image_at(k, LossMode::RandomWords(rng.gen())),
                Some(ssd_img),
                ino,
                &old,
                &model,
                k == n,
                &ctx,
            );
        }
    }
    fs.unmount().unwrap();
}

/// 512-byte units the file takes, as `st_blocks` shows them.
fn sectors(fs: &Fs, ino: u64) -> u64 {
    fs.getattr(ino).unwrap().blocks
}

#[test]
fn blocks_preallocated_past_the_end_go_at_a_truncate_to_the_same_size_as_on_ext4() {
    let (_, fs) = pm_pool(64 << 20, 64);
    let f = file_holding(&fs, "f", &pattern(1, 8192));
    fs.fallocate(f, 8192, 1 << 20, FallocateMode::AllocateKeepSize)
        .unwrap();
    assert_eq!(sectors(&fs, f), (8192 + (1 << 20)) / 512);
    fs.setattr(
        f,
        SetAttr {
            size: Some(8192),
            ..SetAttr::default()
        },
    )
    .unwrap();
    assert_eq!(sectors(&fs, f), 8192 / 512, "ext4 frees them");
    assert_eq!(fs.getattr(f).unwrap().size, 8192);
    assert_eq!(fs.read(f, 0, 8192).unwrap(), pattern(1, 8192));
    fs.check_allocator().unwrap();
}

#[test]
fn a_punch_at_or_past_the_end_leaves_the_preallocated_blocks_and_times_as_on_ext4() {
    let (_, fs) = pm_pool(64 << 20, 64);
    let f = file_holding(&fs, "f", &pattern(2, 6000));
    fs.fallocate(f, 0, 1 << 20, FallocateMode::AllocateKeepSize)
        .unwrap();
    let before = fs.getattr(f).unwrap();
    assert_eq!(before.blocks, (1 << 20) / 512);
    std::thread::sleep(std::time::Duration::from_millis(5));
    // Wholly past the end: nothing at all happens.
    fs.fallocate(f, 6000, 1 << 19, FallocateMode::PunchHole)
        .unwrap();
    let after = fs.getattr(f).unwrap();
    assert_eq!(
        (after.blocks, after.mtime, after.ctime),
        (before.blocks, before.mtime, before.ctime)
    );
    // Across the end: up to the block after the one holding the last byte
    // (ext4 stops there), so blocks 1.. of the preallocation past it stay.
    fs.fallocate(f, 0, 1 << 20, FallocateMode::PunchHole)
        .unwrap();
    assert_eq!(fs.getattr(f).unwrap().blocks, ((1 << 20) - 2 * BS) / 512);
    assert_eq!(fs.read(f, 0, 6000).unwrap(), vec![0u8; 6000]);
    fs.check_allocator().unwrap();
}

#[test]
fn writes_and_copies_past_the_largest_file_size_do_what_fits_as_on_ext4() {
    let (_, fs) = pm_pool(64 << 20, 64);
    assert_eq!(MAX_FILE_SIZE, (1 << 44) - BS, "ext4's s_maxbytes");
    let f = file_holding(&fs, "f", b"");
    // POSIX: a short write, EFBIG only when nothing fits.
    assert_eq!(fs.write(f, MAX_FILE_SIZE - 2, &[7u8; 10]).unwrap(), 2);
    assert_eq!(fs.getattr(f).unwrap().size, MAX_FILE_SIZE);
    assert_eq!(fs.read(f, MAX_FILE_SIZE - 2, 10).unwrap(), vec![7u8; 2]);
    let e = fs.write(f, MAX_FILE_SIZE, b"x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EFBIG));
    let e = fs
        .setattr(
            f,
            SetAttr {
                size: Some(1 << 44),
                ..SetAttr::default()
            },
        )
        .unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EFBIG), "truncate -s 16T");
    // A copy (whole blocks: a clone) into the last block copies that block.
    let src = file_holding(&fs, "src", &pattern(3, 8192));
    let g = file_holding(&fs, "g", b"");
    assert_eq!(
        fs.copy_range(src, 0, g, MAX_FILE_SIZE - BS, 8192).unwrap(),
        BS
    );
    assert_eq!(
        fs.read(g, MAX_FILE_SIZE - BS, 8192).unwrap(),
        pattern(3, 8192)[..BS as usize]
    );
    let e = fs.copy_range(src, 0, g, MAX_FILE_SIZE, 8192).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EFBIG));
    fs.check_allocator().unwrap();
}
