//! Read-only mounts (`Fs::mount_read_only`): nothing is written to any tier
//! — no recovery, no superblock update at mount or unmount, no access time
//! on reads — and a pool that needs recovery is served as recovery would
//! leave it, recovered in memory only (issue 20, finding 3; 2026-12-07).

mod common;
use common::*;
use std::sync::Arc;
use terrace_core::Fs;
use terrace_media::{BlockMedia, MemBlock, MemMedia};

const SSD: u64 = 32 << 20;

/// Files of a test pool: inode and contents.
type Files = Vec<(u64, Vec<u8>)>;

/// A tiered pool with files on PM and on the SSD tier, cleanly unmounted.
fn populated() -> (Arc<MemMedia>, Arc<MemBlock>, Files) {
    let (pm, ssd, fs) = tiered_pool(2 << 20, SSD, 64);
    let mut files = Vec::new();
    for (i, len) in [(0u8, 5000usize), (1, 6 << 20), (2, 100)] {
        let name = format!("f{i}");
        let a = fs
            .mknod(1, name.as_bytes(), libc::S_IFREG | 0o644, 0, CTX)
            .unwrap();
        let data: Vec<u8> = (0..len).map(|k| (k as u8) ^ i.wrapping_mul(37)).collect();
        fs.write(a.ino, 0, &data).unwrap();
        fs.fsync(a.ino, false).unwrap();
        files.push((a.ino, data));
    }
    assert!(
        fs.status().tiers[1].used > 0,
        "nothing reached the SSD tier"
    );
    fs.unmount().unwrap();
    (pm, ssd, files)
}

#[test]
fn a_read_only_mount_reads_everything_and_writes_nothing() {
    let (pm, ssd, files) = populated();
    let (pm_before, ssd_before) = (pm.image(), ssd.image());
    let fs = Fs::mount_read_only(pm.clone(), vec![(1, ssd.clone() as Arc<dyn BlockMedia>)])
        .expect("ro mount of a clean pool");
    assert!(fs.is_read_only());
    for (ino, data) in &files {
        assert_eq!(&fs.read(*ino, 0, data.len()).unwrap(), data);
        fs.getattr(*ino).unwrap();
    }
    fs.set_atime_mode(terrace_core::AtimeMode::Relative); // ignored
    for (ino, data) in &files {
        assert_eq!(&fs.read(*ino, 0, data.len()).unwrap(), data);
    }
    fs.status();
    assert!(pm.image() == pm_before, "a read-only mount wrote to PM");
    fs.unmount().unwrap();
    drop(fs);
    assert!(pm.image() == pm_before, "a read-only unmount wrote to PM");
    assert!(
        ssd.image() == ssd_before,
        "a read-only mount wrote to the SSD"
    );
    // Still clean, and the same mount count: a read-write mount follows.
    let fs = mount_tiered(pm.clone(), ssd.clone());
    assert!(fs.mount_report().was_clean);
    for (ino, data) in &files {
        assert_eq!(&fs.read(*ino, 0, data.len()).unwrap(), data);
    }
}

/// A pool left by a crash mounts read-only as recovery would leave it —
/// recovered in DRAM only, nothing written — so files can be copied off a
/// pool that a read-write mount would refuse; the next read-write mount
/// recovers it on media (before 2026-12-07 it was refused read-only).
#[test]
fn a_pool_that_needs_recovery_mounts_read_only_recovered_in_memory_without_writes() {
    let (pm, ssd, files) = populated();
    {
        // A mount that ends in a crash: the pool is left not clean.
        let fs = mount_tiered(pm.clone(), ssd.clone());
        fs.write(files[0].0, 0, b"changed").unwrap();
        fs.fsync(files[0].0, false).unwrap();
        fs.stop_background_for_crash_test();
    }
    let (pm_before, ssd_before) = (pm.image(), ssd.image());
    let fs = Fs::mount_read_only(pm.clone(), vec![(1, ssd.clone() as Arc<dyn BlockMedia>)])
        .expect("a read-only mount of a pool that needs recovery");
    assert!(fs.mount_report().recovered_in_memory);
    assert!(!fs.mount_report().was_clean);
    assert_eq!(&fs.read(files[0].0, 0, 7).unwrap(), b"changed");
    for (ino, data) in &files[1..] {
        assert_eq!(&fs.read(*ino, 0, data.len()).unwrap(), data);
    }
    fs.unmount().unwrap();
    drop(fs);
    assert!(
        pm.image() == pm_before && ssd.image() == ssd_before,
        "it wrote"
    );
    // Still needs recovery: the read-write mount runs it.
    let fs = mount_tiered(pm.clone(), ssd.clone());
    assert!(!fs.mount_report().was_clean);
    assert_eq!(&fs.read(files[0].0, 0, 7).unwrap(), b"changed");
}

/// A read-only mount of the crash image `img` shows exactly the tree a
/// read-write mount (recovery on media) shows, and writes nothing; returns
/// the transactions it rolled back in memory.
fn assert_read_only_shows_what_recovery_leaves(img: Vec<u8>, ctx: &str) -> usize {
    let ro_pm = Arc::new(MemMedia::from_image(img.clone()));
    let ro = Fs::mount_read_only(ro_pm.clone(), vec![])
        .unwrap_or_else(|e| panic!("{ctx}: read-only mount: {e}"));
    let seen = fs_tree(&ro);
    let rolled_back = ro.mount_report().rolled_back;
    ro.unmount().unwrap();
    drop(ro);
    assert!(ro_pm.image() == img, "{ctx}: the read-only mount wrote");
    let (_, rw) = recover(img, None, Fsck::Metadata, ctx);
    assert_same_tree(&seen, &fs_tree(&rw), ctx);
    rolled_back
}

/// At any crash point of a random workload, with any unflushed PM lines
/// lost, and at every crash point of a rename across directories (a
/// journal transaction, rolled back in memory at some of them), a
/// read-only mount of the image shows exactly the tree a read-write mount
/// shows, and writes nothing.
#[test]
fn a_read_only_mount_of_any_crash_image_shows_what_recovery_leaves() {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use terrace_media::{CrashMedia, LossMode};
    let (media, fs) = pm_pool_on(CrashMedia::new(4 << 20), 128);
    let mut model = Model::default();
    let mut rng = StdRng::seed_from_u64(base_seed("ro_crash_images"));
    for step in 0..60 {
        let op = random_op(&model, &mut rng);
        let _ = apply_model(&mut model, &op);
        let (_, trace) = media.trace(|| apply_fs(&fs, &op));
        let n = trace.len();
        for k in [rng.gen_range(0..=n), n] {
            let img = trace.image_at(k, LossMode::RandomLines(rng.gen()));
            let ctx = format!("step {step} {op:?} crash after event {k}/{n}");
            assert_read_only_shows_what_recovery_leaves(img, &ctx);
        }
    }
    let a = fs.mkdir(1, b"ra", 0o755, CTX).unwrap().ino;
    let b = fs.mkdir(1, b"rb", 0o755, CTX).unwrap().ino;
    let f = fs.mkdir(a, b"moved", 0o755, CTX).unwrap().ino;
    fs.mknod(f, b"inside", libc::S_IFREG | 0o644, 0, CTX)
        .unwrap();
    let (r, trace) = media.trace(|| fs.rename(a, b"moved", b, b"here", Default::default()));
    r.unwrap();
    let mut rolled_back = 0;
    for k in 0..=trace.len() {
        let img = trace.image_at(k, LossMode::AllUnflushed);
        rolled_back += assert_read_only_shows_what_recovery_leaves(
            img,
            &format!("rename, crash after event {k}"),
        );
    }
    assert!(
        rolled_back > 0,
        "no crash point of the rename left a transaction to roll back"
    );
}

/// A read-only remount freezes the pool (`Fs::freeze`): the images are then
/// those of a clean unmount (fsck clean, every file there, cached data
/// written back), and reads, migration passes and the background threads
/// write nothing to any tier until it thaws; after the thaw writes work and
/// a crash needs recovery again.
#[test]
fn a_frozen_pool_is_clean_on_media_and_untouched_until_it_thaws() {
    let (pm, ssd, fs) = tiered_pool(4 << 20, SSD, 64);
    let fs = Arc::new(fs);
    fs.start_writeback();
    fs.start_migration();
    block_first(&fs);
    fs.set_atime_mode(terrace_core::AtimeMode::Strict);
    let mut files = Vec::new();
    for i in 0..4u64 {
        let ino = file(&fs, 1, &format!("f{i}"));
        let data = pattern(i, 300_000 + i as usize * 7);
        fs.write(ino, 0, &data).unwrap();
        files.push((ino, data));
    }
    assert!(fs.status().cache.dirty_bytes > 0, "nothing was cached");
    fs.freeze().unwrap();
    assert!(fs.is_frozen());
    let (pm_img, ssd_img) = (pm.image(), ssd.image());
    // The images alone: clean, with every file.
    let copy_pm = Arc::new(MemMedia::from_image(pm_img.clone()));
    let copy_ssd: Arc<dyn BlockMedia> = Arc::new(MemBlock::from_image(ssd_img.clone()));
    assert_fsck_clean(
        &*copy_pm,
        Some(copy_ssd.clone()),
        Fsck::Data,
        "frozen images",
    );
    let copy = Fs::mount_read_only(copy_pm, vec![(1, copy_ssd)])
        .expect("a frozen image mounts read-only (it is clean)");
    assert_files(&copy, &files, "frozen images");
    // Reads (strict atime), passes and time write nothing while frozen.
    assert_files(&fs, &files, "frozen pool");
    assert_eq!(fs.migration_pass(), 0);
    fs.writeback_pass();
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(pm.image() == pm_img, "the PM image changed while frozen");
    assert!(ssd.image() == ssd_img, "the SSD image changed while frozen");
    let ino = files[0].0;
    assert_eq!(
        fs.migrate_file(ino, 1).unwrap_err().raw_os_error(),
        Some(libc::EROFS)
    );
    // Thawed: writes work, and the superblock says "in use" again.
    fs.thaw().unwrap();
    assert!(!fs.is_frozen());
    fs.write(ino, 0, b"after").unwrap();
    fs.fsync(ino, false).unwrap();
    let sb = terrace_format::Superblock::decode(&pm.image()[..4096]);
    assert!(
        matches!(sb, Ok(ref s) if !s.clean),
        "thawed pool still marked clean: {sb:?}"
    );
    fs.unmount().unwrap();
}

/// Every change is refused with EROFS by the core itself, not only by the
/// kernel's read-only flag: after a `mount -o remount,rw` by root (or for
/// a caller of the library) a change would otherwise be answered as done
/// and then lost, since a read-only mount writes nothing (found in review,
/// 2026-12-07).
#[test]
fn a_read_only_mount_refuses_every_change_with_erofs() {
    let (pm, ssd, files) = populated();
    let (pm_before, ssd_before) = (pm.image(), ssd.image());
    let fs =
        Fs::mount_read_only(pm.clone(), vec![(1, ssd.clone() as Arc<dyn BlockMedia>)]).unwrap();
    let f = files[0].0;
    let erofs = |r: std::io::Result<()>, what: &str| {
        assert_eq!(
            r.err().and_then(|e| e.raw_os_error()),
            Some(libc::EROFS),
            "{what}"
        )
    };
    erofs(fs.mkdir(1, b"new", 0o755, CTX).map(drop), "mkdir");
    erofs(
        fs.mknod(1, b"new", libc::S_IFREG | 0o644, 0, CTX).map(drop),
        "mknod",
    );
    erofs(fs.symlink(1, b"l", b"f0", CTX).map(drop), "symlink");
    erofs(fs.write(f, 0, b"x").map(drop), "write");
    erofs(
        fs.setattr(
            f,
            terrace_core::SetAttr {
                size: Some(0),
                ..Default::default()
            },
        )
        .map(drop),
        "truncate",
    );
    erofs(fs.unlink(1, b"f0"), "unlink");
    erofs(fs.link(f, 1, b"again").map(drop), "link");
    erofs(
        fs.rename(1, b"f0", 1, b"g0", terrace_core::RenameFlags::default()),
        "rename",
    );
    erofs(fs.setxattr(f, b"user.a", b"1", 0), "setxattr");
    erofs(fs.open(f, libc::O_RDWR).map(drop), "open for writing");
    assert_eq!(&fs.read(f, 0, files[0].1.len()).unwrap(), &files[0].1);
    fs.unmount().unwrap();
    drop(fs);
    assert!(pm.image() == pm_before && ssd.image() == ssd_before);
}
