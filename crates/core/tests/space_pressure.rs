//! Space under pressure: random operation sequences on a small tiered pool
//! (PM + SSD, DRAM cache, write-back and migration running as the daemon
//! runs them) that fill it, empty it and fill it again. Checked against a
//! model of the files after every remount:
//!
//! - **no ENOSPC while the pool has room**: no operation is refused while
//!   the files' data (rounded to blocks) is under three quarters of the
//!   pool's capacity;
//! - **nothing acknowledged is lost**: every clean unmount succeeds (cached
//!   writes are always persisted) and every file, size and xattr reads back
//!   as the model says, before and after the remount;
//! - **a refusal changes nothing**: an operation that fails leaves the
//!   model's view (files are all-or-nothing, design §5f);
//! - the allocators are consistent at every remount and every 25 steps
//!   (background threads stopped meanwhile), and no pass of the
//!   background threads panicked.
//!
//! Seeds are printed on failure; `TERRACE_SEQUENCES` sets how many run.

mod common;
use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::sync::Arc;
use terrace_core::{Fs, SetAttr};
use terrace_media::{MemBlock, MemMedia};

const PM_BYTES: u64 = 3 << 20;
const SSD_BYTES: u64 = 24 << 20;
const BS: u64 = 4096;

/// One file of the model.
#[derive(Default, Clone)]
struct FileModel {
    ino: u64,
    data: Vec<u8>,
    xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
}

/// What the pool must hold: files by name, all in the root directory.
#[derive(Default)]
struct Model {
    files: BTreeMap<String, FileModel>,
    next_name: u64,
    /// ENOSPC refusals seen (all with the pool at least three quarters full).
    refusals: u64,
    /// The most data blocks the files held at once.
    peak_blocks: u64,
    /// What happened to each inode, by step: printed when a file differs.
    history: Vec<(u64, String)>,
    /// The step running.
    step: usize,
    /// Every write that succeeded: `(ino, offset, length, pattern seed)`.
    writes: Vec<(u64, u64, usize, u64)>,
}

impl Model {
    /// Data blocks the files need (sizes rounded up to blocks; no holes are
    /// made, so this is what they map).
    fn data_blocks(&self) -> u64 {
        self.files
            .values()
            .map(|f| (f.data.len() as u64).div_ceil(BS))
            .sum()
    }

    /// Notes `what` happened to inode `ino`.
    fn note(&mut self, ino: u64, what: String) {
        let step = self.step;
        self.history.push((ino, format!("step {step}: {what}")));
    }

    /// The history of inode `ino`, one line per event, with the remounts.
    fn history_of(&self, ino: u64) -> String {
        let lines: Vec<&str> = self
            .history
            .iter()
            .filter(|(i, _)| *i == ino || *i == 0)
            .map(|(_, h)| h.as_str())
            .collect();
        lines.join("\n")
    }

    /// Which successful writes (of any file) hold the bytes of `got` in
    /// file block `fb`: where a file's bytes differ, tells stale data of
    /// the file itself from another file's data or zeros.
    fn explain_block(&self, got: &[u8], fb: u64) -> String {
        let (lo, hi) = (fb * BS, (fb + 1) * BS);
        let got_block = &got[lo as usize..(hi as usize).min(got.len())];
        if got_block.iter().all(|&b| b == 0) {
            return format!("block {fb} reads as zeros");
        }
        let mut found = Vec::new();
        for &(ino, off, len, seed) in &self.writes {
            let end = off + len as u64;
            // Each block this write covered, compared at the same offsets
            // inside the block (a physical block reused by another file
            // shows its bytes at their in-block places).
            let (first, last) = (off / BS, (end - 1) / BS);
            if last - first > 300 {
                continue;
            }
            let data = pattern(seed, len);
            for wb in first..=last {
                let a = off.max(wb * BS);
                let b = end.min((wb + 1) * BS);
                let (ia, ib) = ((a - wb * BS) as usize, (b - wb * BS) as usize);
                if ib > got_block.len() || ib - ia < 32 {
                    continue;
                }
                if got_block[ia..ib] == data[(a - off) as usize..(b - off) as usize] {
                    found.push(format!(
                        "bytes {ia}..{ib} of block {fb} are those of inode {ino}'s write {off}+{len} at its block {wb}"
                    ));
                }
            }
        }
        if found.is_empty() {
            format!("block {fb}: no recorded write matches")
        } else {
            found.join("\n")
        }
    }

    fn pick(&self, rng: &mut StdRng) -> Option<String> {
        if self.files.is_empty() {
            return None;
        }
        let k = rng.gen_range(0..self.files.len());
        self.files.keys().nth(k).cloned()
    }
}

/// Mounts the pool, checks its allocators (before any background thread
/// runs: moves in flight hold blocks no inode maps yet) and starts
/// write-back and migration.
fn start(pm: &Arc<MemMedia>, ssd: &Arc<MemBlock>, ctx: &str) -> Arc<Fs> {
    let fs = Arc::new(mount_tiered(pm.clone(), ssd.clone()));
    fs.check_allocator()
        .unwrap_or_else(|e| panic!("{ctx}: allocator after mount: {e}"));
    fs.set_setting("dram_cache_bytes", "1M").unwrap();
    fs.start_writeback();
    fs.start_migration();
    fs
}

/// Capacity of the pool in blocks: PM plus the SSD.
fn capacity_blocks() -> u64 {
    (PM_BYTES + SSD_BYTES) / BS
}

/// What holds the pool's blocks, for a failure message: the room and the
/// dirty pages, PM's free blocks, reserve and logs, each block tier's free
/// and valid blocks (the rest of its extents is dead or its header), PM
/// data with a clean copy, and the cleaner's rounds.
fn where_the_room_is(fs: &Fs) -> String {
    let st = fs.status();
    let sp = &st.space;
    let tiers: Vec<String> = st
        .tiers
        .iter()
        .filter_map(|t| t.extents.as_ref().map(|x| (t.id, x)))
        .map(|(id, x)| {
            format!(
                "tier {id}: {} blocks free, {} valid, in {} extents ({} free)",
                x.free_blocks, x.valid_blocks, x.extents, x.free_extents
            )
        })
        .collect();
    format!(
        "room {} B, dirty {} B, PM free {} B (reserve {} B, logs {} B, promised {} B), clean PM blocks {}, {}; recycled {} extents in {} rounds ({} urgent)",
        st.room_bytes,
        st.cache.dirty_bytes,
        sp.pm_free_bytes,
        sp.pm_reserve_bytes,
        sp.pm_log_bytes,
        sp.promised_bytes,
        st.migration.clean_pm_blocks,
        tiers.join("; "),
        st.cleaner.extents_recycled,
        st.cleaner.rounds,
        st.cleaner.urgent_rounds
    )
}

/// Fails the run when `e` is ENOSPC while the files hold under three
/// quarters of the pool (the rest covers the fixed margins of this tiny
/// pool: 1 MiB of room slack, two SSD extents for recycling, PM's metadata
/// reserve, xattrs and logs on PM, dead blocks not yet recycled).
fn refuse_enospc_with_room(e: &std::io::Error, fs: &Fs, m: &mut Model, what: &str, ctx: &str) {
    if e.raw_os_error() == Some(libc::ENOSPC) {
        m.refusals += 1;
        let used = m.data_blocks();
        assert!(
            used * 4 >= capacity_blocks() * 3,
            "{ctx}: {what} got ENOSPC while the files hold {used} of {} blocks; {}",
            capacity_blocks(),
            where_the_room_is(fs)
        );
    } else {
        panic!("{ctx}: {what} failed: {e}");
    }
}

/// Fails on a notice for the daemon's log that reports a bug (e.g. dirty
/// pages the cache did not list, found and written back at unmount).
fn assert_no_bug_notice(fs: &Fs, ctx: &str) {
    let bugs: Vec<String> = fs
        .take_notices()
        .into_iter()
        .filter(|n| n.starts_with("BUG"))
        .collect();
    assert!(bugs.is_empty(), "{ctx}: {bugs:?}");
}

fn check_all(fs: &Fs, m: &Model, ctx: &str) {
    assert_eq!(
        fs.status().background_panics,
        0,
        "{ctx}: a background pass panicked (its message is above)"
    );
    for (name, f) in &m.files {
        let a = fs
            .lookup(1, name.as_bytes())
            .unwrap_or_else(|e| panic!("{ctx}: lookup {name}: {e}"));
        fs.forget(a.ino, 1);
        assert_eq!(a.ino, f.ino, "{ctx}: {name} is another inode");
        assert_eq!(
            a.size,
            f.data.len() as u64,
            "{ctx}: size of {name}; its history:\n{}",
            m.history_of(f.ino)
        );
        let got = fs
            .read(f.ino, 0, f.data.len() + 1)
            .unwrap_or_else(|e| panic!("{ctx}: read {name}: {e}"));
        if got != f.data {
            let at = got.iter().zip(&f.data).position(|(a, b)| a != b);
            let explained = at.map_or(String::new(), |x| m.explain_block(&got, x as u64 / BS));
            panic!(
                "{ctx}: {name} differs (first difference at {at:?}, {} bytes read, {} expected); its history:\n{}\nwhat is there:\n{explained}",
                got.len(),
                f.data.len(),
                m.history_of(f.ino)
            );
        }
        for (k, v) in &f.xattrs {
            let got = fs
                .getxattr(f.ino, k)
                .unwrap_or_else(|e| panic!("{ctx}: getxattr {name}: {e}"));
            assert_eq!(
                &got,
                v,
                "{ctx}: xattr of {name}; its history:\n{}",
                m.history_of(f.ino)
            );
        }
    }
    let listed = fs
        .readdir(1, 0, usize::MAX)
        .unwrap_or_else(|e| panic!("{ctx}: {e}"));
    let names = listed
        .iter()
        .filter(|e| e.name != b"." && e.name != b"..")
        .count();
    assert_eq!(names, m.files.len(), "{ctx}: entries in the root");
}

/// One random operation on the pool and the model.
fn step(fs: &Fs, m: &mut Model, rng: &mut StdRng, ctx: &str) {
    // Fuller pools delete more, so sequences go up and down.
    let fill = m.data_blocks() * 100 / capacity_blocks();
    let delete_weight = if fill > 85 { 30 } else { 4 };
    let roll = rng.gen_range(0..100 + delete_weight);
    let seed = rng.gen::<u64>();
    match roll {
        // A new small file (mail, source trees), sometimes fsync'd.
        0..=29 => {
            let name = format!("f{}", m.next_name);
            m.next_name += 1;
            let len = [0usize, 100, 3000, 9000, 40000][rng.gen_range(0..5)];
            let data = pattern(seed, len);
            let a = match fs.mknod(1, name.as_bytes(), libc::S_IFREG | 0o644, 0, CTX) {
                Ok(a) => a,
                Err(e) => return refuse_enospc_with_room(&e, fs, m, "create", ctx),
            };
            // The model holds no kernel references: a deleted file's space
            // is free at once.
            fs.forget(a.ino, 1);
            let mut f = FileModel {
                ino: a.ino,
                ..Default::default()
            };
            m.note(a.ino, format!("created as {name}"));
            if len > 0 {
                let r = fs.write(a.ino, 0, &data);
                m.note(a.ino, format!("write 0+{len}: {r:?}"));
                match r {
                    Ok(n) => {
                        assert_eq!(n, len, "{ctx}: short write");
                        m.writes.push((a.ino, 0, len, seed));
                    }
                    Err(e) => {
                        m.files.insert(name, f);
                        return refuse_enospc_with_room(&e, fs, m, "write of a new file", ctx);
                    }
                }
                f.data = data;
            }
            if rng.gen_bool(0.2) {
                fs.fsync(a.ino, false)
                    .unwrap_or_else(|e| panic!("{ctx}: fsync: {e}"));
                m.note(a.ino, "fsync".into());
            }
            m.files.insert(name, f);
        }
        // Appends to a file in large asynchronous writes (a bulk copy), or
        // small synchronous ones (a log).
        30..=54 => {
            let Some(name) = m.pick(rng) else { return };
            let sync = rng.gen_bool(0.3);
            let len = if sync {
                rng.gen_range(1..=8192)
            } else {
                rng.gen_range(64 << 10..=1 << 20)
            };
            let data = pattern(seed, len);
            let f = m.files.get_mut(&name).unwrap();
            let (ino, off) = (f.ino, f.data.len() as u64);
            let r = fs.write_hinted(ino, off, &data, sync);
            let f = m.files.get_mut(&name).unwrap();
            let res = format!("{r:?}");
            match r {
                Ok(n) => {
                    assert_eq!(n, len, "{ctx}: short append");
                    f.data.extend_from_slice(&data);
                    m.writes.push((ino, off, len, seed));
                }
                Err(e) => refuse_enospc_with_room(&e, fs, m, "append", ctx),
            }
            m.note(ino, format!("append {off}+{len} (sync {sync}): {res}"));
        }
        // Overwrites inside a file (a database page, a rewritten block).
        55..=69 => {
            let Some(name) = m.pick(rng) else { return };
            let f = m.files.get_mut(&name).unwrap();
            if f.data.is_empty() {
                return;
            }
            let off = rng.gen_range(0..f.data.len());
            let len = rng.gen_range(1..=(f.data.len() - off).min(256 << 10));
            let data = pattern(seed, len);
            let sync = rng.gen_bool(0.3);
            let ino = f.ino;
            let r = fs.write_hinted(ino, off as u64, &data, sync);
            m.note(ino, format!("overwrite {off}+{len} (sync {sync}): {r:?}"));
            match r {
                Ok(n) => {
                    assert_eq!(n, len, "{ctx}: short overwrite");
                    let f = m.files.get_mut(&name).unwrap();
                    f.data[off..off + len].copy_from_slice(&data);
                    m.writes.push((ino, off as u64, len, seed));
                }
                Err(e) => refuse_enospc_with_room(&e, fs, m, "overwrite", ctx),
            }
        }
        // Shrinks a file.
        70..=74 => {
            let Some(name) = m.pick(rng) else { return };
            let f = m.files.get_mut(&name).unwrap();
            let size = rng.gen_range(0..=f.data.len());
            let set = SetAttr {
                size: Some(size as u64),
                ..Default::default()
            };
            fs.setattr(f.ino, set)
                .unwrap_or_else(|e| panic!("{ctx}: truncate never fails: {e}"));
            f.data.truncate(size);
            let ino = f.ino;
            m.note(ino, format!("truncate to {size}"));
        }
        // An xattr, small or large.
        75..=84 => {
            let Some(name) = m.pick(rng) else { return };
            let key = format!("user.k{}", rng.gen_range(0..4)).into_bytes();
            let len = [8usize, 200, 3000, 20000][rng.gen_range(0..4)];
            let value = pattern(seed, len);
            let ino = m.files[&name].ino;
            let r = fs.setxattr(ino, &key, &value, 0);
            m.note(ino, format!("setxattr of {len} bytes: {r:?}"));
            match r {
                Ok(()) => {
                    m.files.get_mut(&name).unwrap().xattrs.insert(key, value);
                }
                Err(e) => refuse_enospc_with_room(&e, fs, m, "setxattr", ctx),
            }
        }
        // fsync of any file.
        85..=92 => {
            let Some(name) = m.pick(rng) else { return };
            let ino = m.files[&name].ino;
            fs.fsync(ino, rng.gen_bool(0.5))
                .unwrap_or_else(|e| panic!("{ctx}: fsync: {e}"));
            m.note(ino, "fsync".into());
        }
        // A rename over another file (an editor's save, a mail delivery).
        93..=99 => {
            let (Some(from), Some(to)) = (m.pick(rng), m.pick(rng)) else {
                return;
            };
            if from == to {
                return;
            }
            match fs.rename(1, from.as_bytes(), 1, to.as_bytes(), Default::default()) {
                Ok(()) => {
                    let f = m.files.remove(&from).unwrap();
                    let over = m.files[&to].ino;
                    m.note(f.ino, format!("renamed {from} -> {to} (over inode {over})"));
                    m.note(over, format!("replaced by a rename of {from}"));
                    m.files.insert(to, f);
                }
                Err(e) => refuse_enospc_with_room(&e, fs, m, "rename", ctx),
            }
        }
        // Deletes.
        _ => {
            let Some(name) = m.pick(rng) else { return };
            fs.unlink(1, name.as_bytes())
                .unwrap_or_else(|e| panic!("{ctx}: unlink never fails: {e}"));
            let f = m.files.remove(&name).unwrap();
            m.note(f.ino, format!("{name} deleted"));
        }
    }
}

/// Runs one sequence; returns the refusals seen and the peak of data.
fn run_sequence(seed: u64, steps: usize) -> (u64, u64) {
    let (pm, ssd, fs) = tiered_pool(PM_BYTES, SSD_BYTES, 2000);
    drop(fs);
    let mut fs = start(&pm, &ssd, "new pool");
    let mut model = Model::default();
    let mut rng = StdRng::seed_from_u64(seed);
    for n in 0..steps {
        let ctx = format!("seed {seed} step {n}");
        model.step = n;
        step(&fs, &mut model, &mut rng, &ctx);
        if n % 25 == 0 {
            // The allocators while nothing moves: the background threads
            // stopped (what they hold in flight is committed or released
            // when they stop), checked, started again.
            fs.stop_background_for_crash_test();
            fs.check_allocator()
                .unwrap_or_else(|e| panic!("{ctx}: allocator: {e}"));
            fs.start_writeback();
            fs.start_migration();
        }
        model.peak_blocks = model.peak_blocks.max(model.data_blocks());
        if rng.gen_range(0..60) == 0 {
            check_all(&fs, &model, &format!("{ctx}, before remount"));
            fs.unmount().unwrap_or_else(|e| {
                panic!("{ctx}: acknowledged writes could not be persisted: {e}")
            });
            assert_no_bug_notice(&fs, &ctx);
            model.history.push((0, format!("step {n}: remount")));
            drop(fs);
            fs = start(&pm, &ssd, &ctx);
            check_all(&fs, &model, &format!("{ctx}, after remount"));
        }
    }
    check_all(&fs, &model, &format!("seed {seed}, end"));
    fs.unmount()
        .unwrap_or_else(|e| panic!("seed {seed}: acknowledged writes could not be persisted: {e}"));
    assert_no_bug_notice(&fs, &format!("seed {seed}"));
    drop(fs);
    let fs = mount_tiered(pm.clone(), ssd.clone());
    check_all(&fs, &model, &format!("seed {seed}, final remount"));
    fs.check_allocator()
        .unwrap_or_else(|e| panic!("seed {seed}: allocator: {e}"));
    fs.unmount().unwrap();
    (model.refusals, model.peak_blocks)
}

#[test]
fn random_fills_and_deletes_of_a_small_tiered_pool_lose_nothing_and_refuse_only_when_full() {
    let base = base_seed("space pressure");
    let n = env_u64("TERRACE_SEQUENCES", 16);
    let (mut refusals, mut filled) = (0, 0);
    for k in 0..n {
        let (r, peak) = run_sequence(base.wrapping_add(k), 500);
        refusals += r;
        filled += u64::from(peak * 10 >= capacity_blocks() * 8);
    }
    eprintln!("{n} sequences: {filled} filled the pool past 80%, {refusals} ENOSPC refusals");
    // The sequences must reach the full pool, or the test checks nothing.
    assert!(
        filled * 2 >= n,
        "only {filled} of {n} sequences filled the pool past 80%"
    );
}
