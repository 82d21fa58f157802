//! An object tier (S3, design §5n) as tier 2 behind PM and an SSD, on the
//! in-memory store: data reaches it by migration and reads back, frees trim
//! its parts away, a remount over the same store reads it back, and a crash
//! between an upload and its commit leaves orphans that the next mount
//! deletes without losing anything committed.

mod common;
use common::*;
use std::sync::Arc;
use terrace_core::Fs;
use terrace_media::object::Bucket;
use terrace_media::{MemMedia, ObjectMedia, PmMedia};

const PM: u64 = 16 << 20;
const SSD: u64 = 16 << 20;
const S3: u64 = 64 << 20;

/// A new pool on a fresh in-memory store, mounted: the pool, its object
/// tier and the mounted file system.
fn pool_on_a_memory_store() -> (ObjectPool, Arc<ObjectMedia>, Fs) {
    let pool = ObjectPool::format(PM, SSD, S3, Bucket::in_memory("tier", "pool").unwrap());
    let s3 = pool.s3.clone();
    let fs = pool.mount();
    (pool, s3, fs)
}

/// Checks the allocator, unmounts `fs`, opens the object tier again over
/// the same store and mounts: the new file system and tier.
fn remount(pool: &mut ObjectPool, fs: Fs, s3: Arc<ObjectMedia>) -> (Fs, Arc<ObjectMedia>) {
    fs.check_allocator().unwrap();
    fs.unmount().unwrap();
    drop(fs);
    drop(s3);
    pool.reopen();
    let fs = pool.mount();
    (fs, pool.s3.clone())
}

#[test]
fn migrated_data_reads_back_frees_delete_parts_and_a_remount_reads_it() {
    let (mut pool, s3, fs) = pool_on_a_memory_store();
    let a = pattern(1, 3 << 20);
    let b = pattern(2, 300 << 10);
    let ia = write_file(&fs, "a", &a);
    let ib = write_file(&fs, "b", &b);
    let puts = s3.object_stats().requests.puts;
    fs.migrate_file(ia, 2).unwrap();
    fs.migrate_file(ib, 2).unwrap();
    assert_eq!(tier_bytes(&fs, ia, "s3"), a.len() as u64);
    assert_eq!(tier_bytes(&fs, ib, "s3"), 300 << 10);
    let st = s3.object_stats();
    // Batch-sized objects: at most one part per 512 KiB segment touched.
    assert!(
        st.requests.puts - puts <= 8 + 2,
        "{} PUTs for 3.3 MiB",
        st.requests.puts - puts
    );
    assert_eq!(st.live_bytes, a.len() as u64 + (300 << 10));
    assert_eq!(fs.read(ia, 0, a.len()).unwrap(), a);
    assert_eq!(fs.read(ib, 0, b.len()).unwrap(), b);
    let status = fs.status();
    let obj = status.tiers[2]
        .object
        .clone()
        .expect("object stats in status");
    assert_eq!(obj.parts, st.parts);

    // Deleting a file trims its blocks; their parts go.
    fs.unlink(1, b"a").unwrap();
    fs.reclaim_object_tiers();
    let after = s3.object_stats();
    assert!(
        after.parts < st.parts,
        "{} parts, were {}",
        after.parts,
        st.parts
    );
    assert_eq!(after.live_bytes, 300 << 10);
    assert_eq!(after.dead_parts, 0);
    // An overwrite of data on the object tier frees its old blocks too.
    fs.write(ib, 0, &[7u8; 4096]).unwrap();
    fs.fsync(ib, false).unwrap();
    assert_eq!(s3.object_stats().live_bytes, (300 << 10) - 4096);
    let (fs, _s3) = remount(&mut pool, fs, s3);
    let mut want = b.clone();
    want[..4096].fill(7);
    assert_eq!(fs.read(ib, 0, want.len()).unwrap(), want);
    assert_eq!(fs.mount_report().object_orphans, 0);
    fs.check_allocator().unwrap();
    fs.unmount().unwrap();
}

#[test]
fn a_crash_between_upload_and_commit_leaves_orphans_the_next_mount_deletes() {
    let (plain, fault, faulty) = faulty_memory_store();
    let pool = ObjectPool::format(PM, SSD, S3, faulty);
    let s3 = pool.s3.clone();
    let fs = pool.mount();
    let kept = pattern(3, 1 << 20);
    let cold = pattern(4, 2 << 20);
    let ik = write_file(&fs, "kept", &kept);
    let ic = write_file(&fs, "cold", &cold);
    fs.migrate_file(ik, 2).unwrap();
    let committed_parts = s3.object_stats().parts;

    // The migration of `cold` uploads; the pool "crashes" (PM image taken)
    // while its PUTs are held, i.e. before the commit that would point at them.
    fault.hold_puts();
    let image = std::thread::scope(|sc| {
        let mover = sc.spawn(|| fs.migrate_file(ic, 2));
        while fault.puts_waiting() == 0 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let image = pool.pm.image();
        fault.release_puts();
        mover.join().unwrap().unwrap();
        image
    });
    assert!(s3.object_stats().parts > committed_parts);
    drop(fs); // no unmount: the crash
    drop((s3, pool.s3));

    let pm = Arc::new(MemMedia::from_image(image));
    let s3 = open_object_tier(plain);
    let orphans_before =
        fsck_object_clean(&*pm, pool.ssd.clone(), s3.clone(), "after the crash").object_orphans;
    assert!(orphans_before > 0, "the uncommitted upload is an orphan");
    let fs = mount_object(pm.clone(), pool.ssd.clone(), s3.clone());
    let rep = fs.mount_report();
    assert!(!rep.was_clean);
    assert_eq!(rep.object_orphans, orphans_before);
    assert!(rep.object_orphan_bytes > 0);
    assert_eq!(s3.object_stats().parts, committed_parts);
    assert_eq!(fs.read(ik, 0, kept.len()).unwrap(), kept);
    assert_eq!(fs.read(ic, 0, cold.len()).unwrap(), cold);
    assert_eq!(tier_bytes(&fs, ic, "pm"), cold.len() as u64);
    fs.check_allocator().unwrap();
    // The file moves again, to fresh parts, and reads back after a remount.
    fs.migrate_file(ic, 2).unwrap();
    fs.unmount().unwrap();
    drop(fs);
    let fs = mount_object(pm.clone(), pool.ssd.clone(), s3.clone());
    assert_eq!(fs.read(ic, 0, cold.len()).unwrap(), cold);
    assert_eq!(fs.mount_report().object_orphans, 0);
    fs.unmount().unwrap();
}

#[test]
fn a_clone_follows_its_source_to_the_object_tier_and_its_parts_go_with_the_last_file() {
    let (mut pool, s3, fs) = pool_on_a_memory_store();
    let a = pattern(3, 2 << 20);
    let ia = write_file(&fs, "a", &a);
    let ib = file(&fs, 1, "b");
    assert_eq!(
        fs.copy_range(ia, 0, ib, 0, a.len() as u64).unwrap(),
        2 << 20
    );
    fs.migrate_file(ia, 2).unwrap();
    // The clone maps the uploaded blocks: one copy in the store.
    assert_eq!(
        tier_bytes(&fs, ib, "s3"),
        2 << 20,
        "the clone stayed behind"
    );
    assert_eq!(s3.object_stats().live_bytes, 2 << 20);
    assert_eq!(fs.read(ib, 0, a.len()).unwrap(), a);
    fs.unlink(1, b"a").unwrap();
    fs.reclaim_object_tiers();
    assert_eq!(
        s3.object_stats().live_bytes,
        2 << 20,
        "the clone still maps them"
    );
    assert_eq!(fs.read(ib, 0, a.len()).unwrap(), a);
    let (fs, s3) = remount(&mut pool, fs, s3);
    assert_eq!(fs.read(ib, 0, a.len()).unwrap(), a);
    fs.unlink(1, b"b").unwrap();
    fs.reclaim_object_tiers();
    assert_eq!(
        s3.object_stats().live_bytes,
        0,
        "parts go with the last file"
    );
    fs.check_allocator().unwrap();
    fs.unmount().unwrap();
}

#[test]
fn a_mount_that_is_refused_deletes_no_object_tier_part_and_repair_keeps_the_files() {
    // A directory whose slot state word reads free: mount refuses the pool
    // and `fsck --repair` keeps its files in /lost+found. The refused mount
    // swept the object tier first, counting as used only what its scan had
    // kept — without that directory's files — and deleted their parts.
    let (pool, s3, fs) = pool_on_a_memory_store();
    let dir = fs.mkdir(1, b"dir", 0o755, CTX).unwrap().ino;
    let data = pattern(5, 1 << 20);
    let f = fs
        .mknod(dir, b"kept", libc::S_IFREG | 0o644, 0, CTX)
        .unwrap()
        .ino;
    fs.write(f, 0, &data).unwrap();
    fs.fsync(f, false).unwrap();
    fs.migrate_file(f, 2).unwrap();
    assert_eq!(tier_bytes(&fs, f, "s3"), data.len() as u64);
    fs.unmount().unwrap();
    drop(fs);
    let parts = s3.object_stats().parts;
    assert!(parts > 0);
    let state = terrace_format::inode_offset(dir) + terrace_format::INODE_OFF_STATE;
    pool.pm.store_u64(state, 0);
    pool.pm.persist(state, 8);

    let tiers = || object_tiers(pool.ssd.clone(), pool.s3.clone());
    assert!(Fs::mount_with_tiers(pool.pm.clone(), tiers()).is_err());
    assert_eq!(
        s3.object_stats().parts,
        parts,
        "the refused mount deleted parts"
    );
    let report = terrace_core::fsck::repair(pool.pm.clone(), &tiers(), &mut |_, _| {}).unwrap();
    assert!(report.is_clean(), "{:?}", report.problems);
    let fs = Fs::mount_with_tiers(pool.pm.clone(), tiers()).unwrap();
    let lf = fs.lookup(1, b"lost+found").unwrap().ino;
    let kept: Vec<_> = fs
        .readdir(lf, 0, 100)
        .unwrap()
        .into_iter()
        .filter(|e| e.name != b"." && e.name != b"..")
        .collect();
    assert_eq!(kept.len(), 1, "{:?}", report.repaired);
    assert_eq!(fs.read(kept[0].ino, 0, data.len()).unwrap(), data);
    fs.unmount().unwrap();
}
