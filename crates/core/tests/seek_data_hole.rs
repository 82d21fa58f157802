//! `lseek(SEEK_DATA/SEEK_HOLE)` (`Fs::seek_data_or_hole`) against a model
//! of which blocks hold data, after random writes, punches, truncates and
//! fallocate modes: on a PM-only pool, and on a tiered pool where the data
//! sits in dirty DRAM pages, on the SSD after write-back and migration, and
//! on PM; across a remount. Every range reported as a hole reads as zeros.

mod common;
use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use terrace_core::ops_seek::SeekTo;
use terrace_core::{FallocateMode, Fs, SetAttr};

const BS: u64 = 4096;

/// Which blocks of the file hold data (also past its end: blocks
/// preallocated with KEEP_SIZE), and its size.
#[derive(Default, Debug)]
struct DataModel {
    data: Vec<bool>,
    size: u64,
}

impl DataModel {
    fn set(&mut self, from: u64, to: u64, v: bool) {
        if to > self.data.len() as u64 {
            self.data.resize(to as usize, false);
        }
        for b in from..to {
            self.data[b as usize] = v;
        }
    }

    fn is_data(&self, b: u64) -> bool {
        self.data.get(b as usize).copied().unwrap_or(false)
    }

    /// What lseek answers at `off` (Err = errno), ext4's rules in blocks.
    fn seek(&self, off: u64, to: SeekTo) -> Result<u64, i32> {
        if off >= self.size {
            return Err(libc::ENXIO);
        }
        let mut b = off / BS;
        match to {
            SeekTo::Data => loop {
                if b * BS >= self.size {
                    return Err(libc::ENXIO);
                }
                if self.is_data(b) {
                    return Ok((b * BS).max(off));
                }
                b += 1;
            },
            SeekTo::Hole => loop {
                if b * BS >= self.size || !self.is_data(b) {
                    return Ok((b * BS).max(off).min(self.size));
                }
                b += 1;
            },
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Write(u64, usize),
    Truncate(u64),
    Falloc(FallocateMode, u64, u64),
}

/// Applies `op` to the model (only when the pool accepted it).
fn model_apply(m: &mut DataModel, op: Op) {
    use FallocateMode::*;
    let touched = |off: u64, len: u64| (off / BS, (off + len).div_ceil(BS));
    match op {
        Op::Write(off, len) => {
            let (a, b) = touched(off, len as u64);
            m.set(a, b, true);
            m.size = m.size.max(off + len as u64);
        }
        Op::Truncate(s) => {
            // ext4 frees what lies past the new size also when it is the
            // old one (blocks preallocated with KEEP_SIZE).
            if s <= m.size {
                let keep = s.div_ceil(BS);
                m.data.truncate(keep as usize);
            }
            m.size = s;
        }
        Op::Falloc(mode, off, len) => {
            let end = off + len;
            match mode {
                Allocate | AllocateKeepSize | ZeroRange | ZeroRangeKeepSize => {
                    let (a, b) = touched(off, len);
                    m.set(a, b, true);
                    if matches!(mode, Allocate | ZeroRange) {
                        m.size = m.size.max(end);
                    }
                }
                PunchHole => {
                    // ext4: nothing at or past the end; a range across it
                    // ends with the block after the one holding the last
                    // byte.
                    if off < m.size {
                        let end = end.min((m.size / BS + 1) * BS);
                        let (a, b) = (off.div_ceil(BS), end / BS);
                        if b > a {
                            m.set(a, b, false);
                        }
                    }
                }
                CollapseRange => {
                    let (a, b) = ((off / BS) as usize, (end / BS) as usize);
                    let b = b.min(m.data.len());
                    if a < b {
                        m.data.drain(a..b);
                    }
                    m.size -= len;
                }
                InsertRange => {
                    let a = (off / BS) as usize;
                    if a <= m.data.len() {
                        m.data
                            .splice(a..a, std::iter::repeat(false).take((len / BS) as usize));
                    }
                    m.size += len;
                }
            }
        }
    }
}

fn fs_apply(fs: &Fs, ino: u64, op: Op) -> Result<(), i32> {
    let r = match op {
        Op::Write(off, len) => fs.write(ino, off, &pattern(off, len)).map(|_| ()),
        Op::Truncate(s) => fs
            .setattr(
                ino,
                SetAttr {
                    size: Some(s),
                    ..Default::default()
                },
            )
            .map(|_| ()),
        Op::Falloc(m, off, len) => fs.fallocate(ino, off, len, m),
    };
    r.map_err(|e| e.raw_os_error().unwrap_or(-1))
}

/// A random operation on a file of size `size` (files up to ~1 MiB, with
/// holes between the writes).
fn random_op(rng: &mut StdRng, size: u64) -> Op {
    use FallocateMode::*;
    let span = size.max(BS) + 32 * BS;
    let off = rng.gen_range(0..span).min(1 << 20);
    let aligned = |rng: &mut StdRng| rng.gen_range(0..size.div_ceil(BS).max(1)) * BS;
    match rng.gen_range(0..20) {
        0..=7 => Op::Write(off, rng.gen_range(1..5 * BS as usize)),
        8..=10 => Op::Falloc(PunchHole, rng.gen_range(0..span), rng.gen_range(1..16 * BS)),
        11..=12 => Op::Truncate(rng.gen_range(0..span)),
        13 => Op::Falloc(AllocateKeepSize, off, rng.gen_range(1..4 * BS)),
        14 => Op::Falloc(Allocate, off, rng.gen_range(1..4 * BS)),
        15 => Op::Falloc(ZeroRange, off, rng.gen_range(1..4 * BS)),
        16 => Op::Falloc(CollapseRange, aligned(rng), rng.gen_range(1..4) * BS),
        17 => Op::Falloc(InsertRange, aligned(rng), rng.gen_range(1..4) * BS),
        _ => Op::Write(rng.gen_range(0..size.max(1)), rng.gen_range(1..64)),
    }
}

/// Checks lseek at every block boundary, inside blocks and past the end,
/// against the model; and that every reported hole reads as zeros.
fn check(fs: &Fs, ino: u64, m: &DataModel, rng: &mut StdRng, ctx: &str) {
    let mut offs: Vec<u64> = (0..=m.size.div_ceil(BS) + 1).map(|b| b * BS).collect();
    offs.extend((0..16).map(|_| rng.gen_range(0..m.size + 2 * BS)));
    for off in offs {
        for to in [SeekTo::Data, SeekTo::Hole] {
            let got = fs
                .seek_data_or_hole(ino, off, to)
                .map_err(|e| e.raw_os_error().unwrap_or(-1));
            assert_eq!(got, m.seek(off, to), "{ctx}: lseek({off}, {to:?})");
        }
    }
    // Holes read as zeros.
    let mut off = 0;
    while off < m.size {
        let hole = fs.seek_data_or_hole(ino, off, SeekTo::Hole).unwrap();
        let data = match fs.seek_data_or_hole(ino, hole, SeekTo::Data) {
            Ok(d) => d,
            Err(_) => m.size,
        };
        if data > hole {
            let bytes = fs.read(ino, hole, (data - hole) as usize).unwrap();
            assert!(
                bytes.iter().all(|&b| b == 0),
                "{ctx}: hole [{hole}, {data}) holds data"
            );
        }
        off = data;
    }
}

/// [`check`] of the file of sequence `seed` on the pool mounted again.
fn check_after_remount(fs: &Fs, ino: u64, m: &DataModel, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    check(fs, ino, m, &mut rng, &format!("seed {seed} after remount"));
}

fn run(
    fs: &Fs,
    ino: u64,
    seed: u64,
    steps: usize,
    m: &mut DataModel,
    each: &mut dyn FnMut(&Fs, usize),
) {
    let mut rng = StdRng::seed_from_u64(seed);
    for step in 0..steps {
        let op = random_op(&mut rng, m.size);
        if fs_apply(fs, ino, op).is_ok() {
            model_apply(m, op);
        }
        each(fs, step);
        check(
            fs,
            ino,
            m,
            &mut rng,
            &format!("seed {seed} step {step} {op:?}"),
        );
    }
}

#[test]
fn seek_data_and_hole_match_a_block_model_on_a_pm_only_pool_and_after_remount() {
    let base = base_seed("seek data hole, PM only");
    for k in 0..env_u64("TERRACE_SEEK_SEQUENCES", 4) {
        let seed = base.wrapping_add(k);
        let (pm, fs) = pm_pool(32 << 20, 64);
        let ino = file(&fs, 1, "f");
        let mut m = DataModel::default();
        run(&fs, ino, seed, 150, &mut m, &mut |_, _| {});
        fs.unmount().unwrap();
        drop(fs);
        let fs = mount(pm);
        check_after_remount(&fs, ino, &m, seed);
    }
}

#[test]
fn seek_data_and_hole_see_cached_pages_written_back_and_migrated_data() {
    let base = base_seed("seek data hole, tiered");
    for k in 0..env_u64("TERRACE_SEEK_SEQUENCES", 4) {
        let seed = base.wrapping_add(k);
        let (pm, ssd, fs) = tiered_pool(32 << 20, 96 << 20, 64);
        // New data goes to the DRAM cache (dirty pages), fsync writes it
        // back to the SSD, migration moves PM data there.
        block_first(&fs);
        let ino = file(&fs, 1, "f");
        let mut m = DataModel::default();
        run(
            &fs,
            ino,
            seed,
            150,
            &mut m,
            &mut |fs, step| match step % 10 {
                3 => fs.fsync(ino, false).unwrap(),
                6 => {
                    fs.fsync(ino, false).unwrap();
                    fs.migrate_file(ino, 1).unwrap();
                }
                8 => fs.set_setting("placement_policy", "ziggurat").unwrap(),
                9 => block_first(fs),
                _ => {}
            },
        );
        fs.fsync(ino, false).unwrap();
        fs.unmount().unwrap();
        drop(fs);
        let fs = mount_tiered(pm, ssd);
        check_after_remount(&fs, ino, &m, seed);
    }
}

#[test]
fn seek_on_an_empty_file_and_a_file_of_one_hole() {
    let (_pm, fs) = pm_pool(8 << 20, 64);
    let ino = file(&fs, 1, "f");
    let enxio = Err(libc::ENXIO);
    let seek = |off, to| {
        fs.seek_data_or_hole(ino, off, to)
            .map_err(|e| e.raw_os_error().unwrap_or(-1))
    };
    assert_eq!(seek(0, SeekTo::Data), enxio);
    assert_eq!(seek(0, SeekTo::Hole), enxio);
    fs.setattr(
        ino,
        SetAttr {
            size: Some(1 << 40),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(
        seek(0, SeekTo::Data),
        enxio,
        "a file of one hole has no data"
    );
    assert_eq!(seek(12345, SeekTo::Hole), Ok(12345));
    fs.write(ino, (1 << 40) - 10, b"tail").unwrap();
    assert_eq!(seek(0, SeekTo::Data), Ok((1 << 40) - BS));
    assert_eq!(seek((1 << 40) - 10, SeekTo::Hole), Ok(1 << 40));
    let dir = fs.mkdir(1, b"d", 0o755, CTX).unwrap().ino;
    assert_eq!(
        fs.seek_data_or_hole(dir, 0, SeekTo::Data)
            .map_err(|e| e.raw_os_error().unwrap_or(-1)),
        Err(libc::EISDIR)
    );
}
