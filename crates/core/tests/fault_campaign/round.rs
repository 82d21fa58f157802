//! One round: the operations under faults and the checks against the model.

use super::*;
use crate::model::{Model, Op};

/// One round's world: media, pool, model, counts.
pub(crate) struct Round<'a> {
    pub(crate) seed: u64,
    pub(crate) rng: StdRng,
    pub(crate) pm: Arc<Pm>,
    pub(crate) ssd: Arc<Hooked<Ssd>>,
    pub(crate) fs: Arc<Fs>,
    /// Background write-back and migration threads run (not deterministic).
    pub(crate) threads: bool,
    pub(crate) dirs: [u64; 2],
    pub(crate) m: Model,
    pub(crate) c: &'a mut Counts,
    /// The step being run (for messages).
    pub(crate) step: usize,
    /// The kind of operation being run (for counts).
    pub(crate) op_kind: &'static str,
}

impl Round<'_> {
    pub(crate) fn fail(&mut self, what: String) {
        let msg = format!("seed {} step {}: {what}", self.seed, self.step);
        eprintln!("FAULT CAMPAIGN FAILURE: {msg}");
        self.c.failures.push(msg);
    }

    pub(crate) fn err(&mut self, e: &std::io::Error) {
        *self.c.op_errors.entry(errno_of(e)).or_default() += 1;
        *self.c.op_errors_by_op.entry(self.op_kind).or_default() += 1;
    }

    /// Arms or heals SSD faults at random.
    pub(crate) fn maybe_arm(&mut self) {
        let r = self.rng.gen_range(0..100);
        let n = self.rng.gen_range(0..6);
        match r {
            0..=5 => self.ssd.fail_writes_after(n),
            6..=10 => self.ssd.fail_reads_after(n),
            11..=12 => self.ssd.fail_sync_after(n),
            13..=14 => self.ssd.lose_writes_at_sync_after(n),
            15..=28 => self.ssd.heal(),
            _ => {}
        }
    }

    /// After an operation on file `id` returned: makes its contents
    /// acknowledged when nothing of it waits in the cache.
    pub(crate) fn settle(&mut self, id: usize) {
        let Some(f) = self.m.files.get(&id) else {
            return;
        };
        if f.cands.len() == 1 && !has_dirty(&self.fs, f.ino) {
            let f = self.m.files.get_mut(&id).unwrap();
            f.stable = f.cands[0].clone();
            f.touched = vec![false; f.stable.len()];
        }
    }

    pub(crate) fn settle_all(&mut self) {
        let ids: Vec<usize> = self.m.files.keys().copied().collect();
        for id in ids {
            self.settle(id);
        }
    }

    /// Reads the whole file with the faults healed and keeps the candidate
    /// it matches.
    pub(crate) fn resolve(&mut self, id: usize) {
        self.ssd.heal();
        let ino = self.m.files[&id].ino;
        let size = match self.fs.getattr(ino) {
            Ok(a) => a.size,
            Err(e) => {
                self.fail(format!("getattr of inode {ino} with healthy media: {e}"));
                return;
            }
        };
        match self.fs.read(ino, 0, size as usize + 10) {
            Ok(d) => {
                let f = self.m.files.get_mut(&id).unwrap();
                if f.cands.contains(&d) {
                    f.cands = vec![d];
                } else {
                    let diff = f.cands.iter().map(|c| diff_bytes(&d, c)).min().unwrap_or(0);
                    let want: Vec<usize> = f.cands.iter().map(|c| c.len()).collect();
                    f.cands = vec![d.clone()];
                    self.c.wrong_bytes += diff;
                    self.fail(format!(
                        "inode {ino} holds {} bytes matching none of the possible contents \
                         (sizes {want:?}): {diff} bytes differ",
                        d.len()
                    ));
                }
            }
            Err(e) => self.fail(format!("inode {ino} unreadable with healthy media: {e}")),
        }
    }

    /// The model's file id behind name `n`, if any.
    pub(crate) fn id(&self, n: usize) -> Option<usize> {
        self.m.names.get(&NAMES[n]).copied()
    }

    pub(crate) fn lookup(&self, n: usize) -> Option<u64> {
        let (d, name) = NAMES[n];
        let a = self.fs.lookup(self.dirs[d], name.as_bytes()).ok()?;
        self.fs.forget(a.ino, 1);
        Some(a.ino)
    }

    /// Checks the model's names against the file system's (after a failed
    /// namespace operation).
    pub(crate) fn resolve_names(&mut self, ns: &[usize]) {
        for &n in ns {
            let got = self.lookup(n);
            let want = self.id(n).map(|id| self.m.files[&id].ino);
            if got == want {
                continue;
            }
            // The operation happened after all, or partly: follow the file
            // system when the inode is one the model knows.
            match got {
                None => {
                    self.m.names.remove(&NAMES[n]);
                }
                Some(ino) => match self.m.files.iter().find(|(_, f)| f.ino == ino) {
                    Some((&id, _)) => {
                        self.m.names.insert(NAMES[n], id);
                    }
                    None => {
                        let id = self.m.next;
                        self.m.next += 1;
                        self.m.files.insert(id, FileM::new(ino));
                        self.m.names.insert(NAMES[n], id);
                    }
                },
            }
        }
        self.m.drop_unreferenced();
    }

    pub(crate) fn run(&mut self, op: &Op) {
        match op.clone() {
            Op::Write(n, off, len, seed, o_sync) => {
                if self.id(n).is_none() {
                    self.run(&Op::Create(n));
                }
                let Some(id) = self.id(n) else { return };
                let ino = self.m.files[&id].ino;
                let data = data_of(seed, len);
                let r = self.fs.write_hinted(ino, off, &data, o_sync);
                let end = off + len as u64;
                self.m.files.get_mut(&id).unwrap().touch(off, end);
                let write = |d: &mut Vec<u8>| {
                    if d.len() < end as usize {
                        d.resize(end as usize, 0);
                    }
                    d[off as usize..end as usize].copy_from_slice(&data);
                };
                match r {
                    Ok(k) if k == len => self.m.files.get_mut(&id).unwrap().apply(false, write),
                    Ok(k) => self.fail(format!("short write: {k} of {len} bytes")),
                    Err(e) => {
                        self.err(&e);
                        self.m.files.get_mut(&id).unwrap().apply(true, write);
                        self.resolve(id);
                    }
                }
                self.settle(id);
            }
            Op::Read(n, off, len) => {
                let Some(id) = self.id(n) else { return };
                let ino = self.m.files[&id].ino;
                match self.fs.read(ino, off, len) {
                    Ok(d) => self.check_read(id, off, &d),
                    Err(e) => {
                        self.err(&e);
                        if errno_of(&e) != libc::EIO {
                            self.fail(format!("read failed with {e}, not EIO"));
                        }
                    }
                }
            }
            Op::Fsync(n) => {
                let Some(id) = self.id(n) else { return };
                let ino = self.m.files[&id].ino;
                if let Err(e) = self.fs.fsync(ino, false) {
                    self.err(&e);
                }
                self.settle(id);
            }
            Op::Truncate(n, size) => {
                let Some(id) = self.id(n) else { return };
                let ino = self.m.files[&id].ino;
                let r = self.fs.setattr(
                    ino,
                    SetAttr {
                        size: Some(size),
                        ..Default::default()
                    },
                );
                let f = self.m.files.get_mut(&id).unwrap();
                f.touch(size, u64::MAX);
                let t = |d: &mut Vec<u8>| d.resize(size as usize, 0);
                f.apply(r.is_err(), t);
                if let Err(e) = r {
                    self.err(&e);
                    self.resolve(id);
                }
                self.settle(id);
            }
            Op::Create(n) => {
                if self.id(n).is_some() {
                    return;
                }
                let (d, name) = NAMES[n];
                match self
                    .fs
                    .mknod(self.dirs[d], name.as_bytes(), libc::S_IFREG | 0o644, 0, CTX)
                {
                    Ok(a) => {
                        self.fs.forget(a.ino, 1);
                        let id = self.m.next;
                        self.m.next += 1;
                        self.m.files.insert(id, FileM::new(a.ino));
                        self.m.names.insert(NAMES[n], id);
                    }
                    Err(e) => {
                        self.err(&e);
                        self.resolve_names(&[n]);
                    }
                }
            }
            Op::Unlink(n) => {
                if self.id(n).is_none() {
                    return;
                }
                let (d, name) = NAMES[n];
                match self.fs.unlink(self.dirs[d], name.as_bytes()) {
                    Ok(()) => {
                        self.m.names.remove(&NAMES[n]);
                        self.m.drop_unreferenced();
                    }
                    Err(e) => {
                        self.err(&e);
                        self.resolve_names(&[n]);
                    }
                }
            }
            Op::Rename(s, t) => {
                // Not to itself, nor onto another name of the same file (a
                // no-op in POSIX).
                if s == t || self.id(s).is_none() || self.id(s) == self.id(t) {
                    return;
                }
                let (sd, sn) = NAMES[s];
                let (td, tn) = NAMES[t];
                let r = self.fs.rename(
                    self.dirs[sd],
                    sn.as_bytes(),
                    self.dirs[td],
                    tn.as_bytes(),
                    RenameFlags::default(),
                );
                match r {
                    Ok(()) => {
                        let id = self.m.names.remove(&NAMES[s]).unwrap();
                        self.m.names.insert(NAMES[t], id);
                        self.m.drop_unreferenced();
                    }
                    Err(e) => {
                        self.err(&e);
                        self.resolve_names(&[s, t]);
                    }
                }
            }
            Op::Link(s, t) => {
                let Some(id) = self.id(s) else { return };
                if self.id(t).is_some() {
                    return;
                }
                let (td, tn) = NAMES[t];
                let ino = self.m.files[&id].ino;
                match self.fs.link(ino, self.dirs[td], tn.as_bytes()) {
                    Ok(a) => {
                        self.fs.forget(a.ino, 1);
                        self.m.names.insert(NAMES[t], id);
                    }
                    Err(e) => {
                        self.err(&e);
                        self.resolve_names(&[t]);
                    }
                }
            }
            Op::Migrate(n, to) => {
                let Some(id) = self.id(n) else { return };
                if let Err(e) = self.fs.migrate_file(self.m.files[&id].ino, to) {
                    self.err(&e);
                }
                self.settle(id);
            }
            Op::MigrationPass => {
                self.fs.migration_pass();
                self.settle_all();
            }
            Op::Writeback => {
                self.fs.writeback_pass();
                self.settle_all();
            }
            Op::FlushAll => {
                if let Err(e) = self.fs.flush_all() {
                    self.err(&e);
                }
                self.settle_all();
            }
            Op::Clean(victims) => {
                if victims.is_empty() {
                    self.fs.clean_pass();
                } else {
                    self.fs.recycle(1, &victims);
                }
                self.settle_all();
            }
            Op::MoveLogs => {
                let inos: Vec<u64> = self.m.files.values().map(|f| f.ino).collect();
                if let Err(e) = self.fs.move_logs(&inos, 1) {
                    self.err(&e);
                }
            }
            Op::EvictClean(goal) => {
                self.fs.evict_clean(goal);
            }
            Op::Scrub(repair) => {
                let r = self.fs.scrub(0, repair);
                self.c.scrub_bad += r.bad_blocks;
                self.c.scrub_repaired += r.repaired_blocks;
                self.settle_all();
            }
            Op::Setting(k, v) => {
                // Lowering the cache bound writes back: it can fail.
                if self.fs.set_setting(k, &v).is_err() {
                    *self.c.op_errors.entry(SETTING_REFUSED).or_default() += 1;
                    *self.c.op_errors_by_op.entry(self.op_kind).or_default() += 1;
                }
                self.settle_all();
            }
            Op::PoisonedRead(n, seed) => {
                let Some(id) = self.id(n) else { return };
                self.poisoned_read(id, seed);
            }
        }
    }

    /// Checks the bytes a successful read at `off` returned.
    pub(crate) fn check_read(&mut self, id: usize, off: u64, d: &[u8]) {
        let f = self.m.files.get_mut(&id).unwrap();
        let expect = |c: &Vec<u8>| -> Vec<u8> {
            let s = (off as usize).min(c.len());
            let e = (off as usize + d.len()).min(c.len());
            c[s..e].to_vec()
        };
        let keep: Vec<Vec<u8>> = f.cands.iter().filter(|c| expect(c) == d).cloned().collect();
        if !keep.is_empty() {
            // A short read is fine only at the end of the file.
            f.cands = keep;
            return;
        }
        let diff = f
            .cands
            .iter()
            .map(|c| diff_bytes(d, &expect(c)))
            .min()
            .unwrap_or(0);
        let ino = f.ino;
        self.c.wrong_bytes += diff;
        self.fail(format!(
            "read of inode {ino} at {off} returned {} bytes the model does not allow ({diff} differ)",
            d.len()
        ));
        self.resolve(id);
    }

    /// Poisons one PM block of the file's data, reads the file, clears the
    /// poison. Reads only: nothing may carry poisoned bytes elsewhere.
    pub(crate) fn poisoned_read(&mut self, id: usize, seed: u64) {
        let ino = self.m.files[&id].ino;
        let Ok(v) = self.fs.getxattr(ino, b"user.terrace.extents") else {
            return;
        };
        let pm_runs: Vec<(u64, u64, u64)> = String::from_utf8_lossy(&v)
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() >= 4 && f[2] == "pm").then(|| {
                    (
                        f[0].parse().unwrap_or(0),
                        f[1].parse().unwrap_or(0),
                        f[3].parse().unwrap_or(0),
                    )
                })
            })
            .collect();
        if pm_runs.is_empty() {
            return;
        }
        let mut rng = StdRng::seed_from_u64(seed);
        let (foff, len, block) = pm_runs[rng.gen_range(0..pm_runs.len())];
        let k = rng.gen_range(0..(len / BS).max(1));
        let before = self.pm.poisoned_reads();
        self.pm.poison((block + k) * BS, BS);
        let r = self.fs.read(ino, foff + k * BS, BS as usize);
        self.pm.clear_poison();
        self.c.pm_poisoned_reads += self.pm.poisoned_reads() - before;
        match r {
            Ok(d) => {
                let f = &self.m.files[&id];
                let at = (foff + k * BS) as usize;
                let ok = f.cands.iter().any(|c| {
                    let s = at.min(c.len());
                    let e = (at + d.len()).min(c.len());
                    c[s..e] == d[..]
                });
                if !ok {
                    self.c.pm_poison_served += 1;
                }
            }
            Err(e) => self.err(&e),
        }
    }

    /// Crash now (no unmount): both media lose what they may lose, the
    /// images are checked, mounted without faults, and every acknowledged
    /// byte must be there.
    pub(crate) fn crash_check(&mut self) {
        if self.threads {
            // Both images must be of one moment: no thread may commit
            // between the two copies.
            self.fs.stop_background_for_crash_test();
        }
        let pm_img = self
            .pm
            .inner()
            .crash_image(LossMode::RandomLines(self.rng.gen()));
        let ssd_img = self
            .ssd
            .inner()
            .crash_image(BlockLoss::RandomBlocks(self.rng.gen()));
        let pm2 = Arc::new(MemMedia::from_image(pm_img.clone()));
        let ssd2 = Arc::new(MemBlock::from_image(ssd_img.clone()));
        let tiers: [(u8, Arc<dyn BlockMedia>); 1] = [(1, ssd2.clone())];
        match terrace_core::fsck::check_data(&*pm2, &tiers, &mut |_, _| {}) {
            Ok(r) if r.is_clean() && r.bad_blocks == 0 => {}
            Ok(r) => self.fail(format!(
                "fsck --data of a crash image: {} bad blocks, {:?}",
                r.bad_blocks, r.problems
            )),
            Err(e) => self.fail(format!("fsck of a crash image refused it: {e}")),
        }
        let fs2 = match Fs::mount_with_tiers(pm2.clone(), vec![(1, ssd2.clone() as _)]) {
            Ok(f) => f,
            Err(e) => {
                self.fail(format!("a crash image does not mount: {e}"));
                return;
            }
        };
        self.c.crash_remounts += 1;
        let dirs = [1, lookup_dir(&fs2, 1, b"d")];
        let served = self.compare(&fs2, dirs, true);
        if let Err(e) = fs2.check_allocator() {
            self.fail(format!("allocator after a crash: {e}"));
        }
        if let Err(e) = fs2.unmount() {
            self.fail(format!("unmount after a crash remount: {e}"));
        }
        drop(fs2);
        self.faulty_mount(pm_img, ssd_img, &served);
    }

    /// The same crash image mounted while the SSD fails reads (and writes)
    /// after a random countdown — recovery reads log blobs and the
    /// superblock check reads the tier header there: the mount is refused
    /// or succeeds, and a file read that succeeds returns what the
    /// fault-free mount of the image served.
    pub(crate) fn faulty_mount(
        &mut self,
        pm_img: Vec<u8>,
        ssd_img: Vec<u8>,
        served: &[Option<Vec<u8>>],
    ) {
        let pm3 = Arc::new(MemMedia::from_image(pm_img));
        let ssd3 = Arc::new(FaultBlock::new(MemBlock::from_image(ssd_img)));
        ssd3.fail_reads_after(self.rng.gen_range(0..24));
        if self.rng.gen_bool(0.3) {
            ssd3.fail_writes_after(self.rng.gen_range(0..8));
        }
        let fs3 = match Fs::mount_with_tiers(pm3, vec![(1, ssd3.clone() as _)]) {
            Ok(f) => f,
            Err(_) => {
                self.c.faulty_mounts_refused += 1;
                self.count_faults(&ssd3);
                return;
            }
        };
        self.c.faulty_mounts += 1;
        if let Ok(a) = fs3.lookup(1, b"d") {
            fs3.forget(a.ino, 1);
            let dirs = [1, a.ino];
            for (n, want) in served.iter().enumerate() {
                let (d, name) = NAMES[n];
                let Ok(a) = fs3.lookup(dirs[d], name.as_bytes()) else {
                    if want.is_some() {
                        self.fail(format!("{name}: missing in a mount under read faults"));
                    }
                    continue;
                };
                fs3.forget(a.ino, 1);
                match fs3.read(a.ino, 0, a.size as usize + 10) {
                    Ok(got) => {
                        if Some(&got) != want.as_ref() {
                            let diff = want
                                .as_ref()
                                .map_or(got.len() as u64, |w| diff_bytes(&got, w));
                            self.c.wrong_bytes += diff;
                            self.fail(format!(
                                "{name}: a mount under read faults served {diff} bytes that differ"
                            ));
                        }
                    }
                    Err(e) => {
                        self.op_kind = "read after a mount under faults";
                        self.err(&e);
                    }
                }
            }
        }
        let _ = fs3.unmount();
        self.count_faults(&ssd3);
    }

    pub(crate) fn count_faults(&mut self, ssd: &FaultBlock<MemBlock>) {
        let f = ssd.injected();
        self.c.ssd_read_faults += f.reads;
        self.c.ssd_write_faults += f.writes;
        self.c.ssd_sync_faults += f.syncs;
    }

    /// Compares a mounted pool with the model: after a crash, acknowledged
    /// bytes not changed since; after a clean unmount, everything.
    pub(crate) fn compare(&mut self, fs: &Fs, dirs: [u64; 2], crash: bool) -> Vec<Option<Vec<u8>>> {
        let mut served = vec![None; NAMES.len()];
        for n in 0..NAMES.len() {
            let (d, name) = NAMES[n];
            let got = fs.lookup(dirs[d], name.as_bytes()).ok();
            if let Some(a) = &got {
                fs.forget(a.ino, 1);
            }
            let want = self.id(n);
            let (a, id) = match (got, want) {
                (None, None) => continue,
                (Some(a), None) => {
                    served[n] = fs.read(a.ino, 0, a.size as usize + 10).ok();
                    self.fail(format!("{name}: exists after remount, the model has none"));
                    continue;
                }
                (None, Some(id)) => {
                    let f = &self.m.files[&id];
                    let lost = if crash {
                        f.touched.iter().filter(|t| !**t).count() as u64
                    } else {
                        f.cands.iter().map(|c| c.len()).min().unwrap_or(0) as u64
                    };
                    self.c.bytes_lost += lost;
                    self.fail(format!("{name}: missing after remount ({lost} bytes lost)"));
                    continue;
                }
                (Some(a), Some(id)) => (a, id),
            };
            let data = match fs.read(a.ino, 0, a.size as usize + 10) {
                Ok(d) => d,
                Err(e) => {
                    self.fail(format!("{name}: unreadable after remount: {e}"));
                    Vec::new()
                }
            };
            served[n] = Some(data.clone());
            let f = &self.m.files[&id];
            if crash {
                self.c.bytes_checked += f.touched.iter().filter(|t| !**t).count() as u64;
                let lost = f
                    .stable
                    .iter()
                    .zip(&f.touched)
                    .enumerate()
                    .filter(|(x, (b, t))| !**t && data.get(*x) != Some(b))
                    .count() as u64;
                if lost > 0 {
                    self.c.bytes_lost += lost;
                    self.fail(format!(
                        "{name} (inode {}): {lost} acknowledged bytes lost in a crash \
                         (size {} now, {} acknowledged)",
                        a.ino,
                        data.len(),
                        f.stable.len()
                    ));
                }
            } else if f.cands.contains(&data) {
                self.c.bytes_checked += data.len() as u64;
            } else {
                let lost = f
                    .cands
                    .iter()
                    .map(|c| diff_bytes(&data, c))
                    .min()
                    .unwrap_or(0);
                self.c.bytes_lost += lost;
                self.fail(format!(
                    "{name} (inode {}): after a clean unmount {lost} bytes differ \
                     (size {}, model sizes {:?})",
                    a.ino,
                    data.len(),
                    f.cands.iter().map(|c| c.len()).collect::<Vec<_>>()
                ));
            }
        }
        served
    }

    /// End of a round: crash check, then heal, unmount cleanly, fsck,
    /// remount and compare everything.
    pub(crate) fn finish(mut self) {
        self.crash_check();
        self.ssd.heal();
        // Decide the files a failed operation left uncertain.
        let ids: Vec<usize> = self
            .m
            .files
            .iter()
            .filter(|(_, f)| f.cands.len() > 1)
            .map(|(&id, _)| id)
            .collect();
        for id in ids {
            self.resolve(id);
        }
        if let Err(e) = self.fs.unmount() {
            self.fail(format!("unmount with healthy media failed: {e}"));
            return;
        }
        let pm_img = self.pm.inner().crash_image(LossMode::AllUnflushed);
        let ssd_img = self.ssd.inner().crash_image(BlockLoss::AllUnsynced);
        let pm2 = Arc::new(MemMedia::from_image(pm_img));
        let ssd2 = Arc::new(MemBlock::from_image(ssd_img));
        let tiers: [(u8, Arc<dyn BlockMedia>); 1] = [(1, ssd2.clone())];
        match terrace_core::fsck::check_data(&*pm2, &tiers, &mut |_, _| {}) {
            Ok(r) if r.is_clean() && r.bad_blocks == 0 && r.orphans.is_empty() => {}
            Ok(r) => self.fail(format!(
                "fsck --data after a clean unmount: {} bad blocks, orphans {:?}, {:?}",
                r.bad_blocks, r.orphans, r.problems
            )),
            Err(e) => self.fail(format!("fsck refused the pool after unmount: {e}")),
        }
        let fs2 = match Fs::mount_with_tiers(pm2.clone(), vec![(1, ssd2.clone() as _)]) {
            Ok(f) => f,
            Err(e) => {
                self.fail(format!(
                    "the pool does not mount after a clean unmount: {e}"
                ));
                return;
            }
        };
        if !fs2.mount_report().was_clean {
            self.fail("the pool is not clean after a successful unmount".into());
        }
        self.c.clean_remounts += 1;
        let dirs = [1, lookup_dir(&fs2, 1, b"d")];
        self.compare(&fs2, dirs, false);
        if let Err(e) = fs2.check_allocator() {
            self.fail(format!("allocator after remount: {e}"));
        }
        fs2.unmount().unwrap();
    }
}
