//! Space and durability with many small files on a PM tier that is small next
//! to the data (issue 15): every acknowledged write survives unmount and
//! remount, no ENOSPC while the pool has room, and PM falls under the
//! migration threshold after a burst.

mod common;
use common::*;
use std::sync::Arc;
use std::time::{Duration, Instant};
use terrace_core::{FallocateMode, Fs, RenameFlags, SetAttr};
use terrace_media::{MemBlock, MemMedia};

/// A pool of `pm_mib` PM and `ssd_mib` SSD with a DRAM cache of `cache`,
/// write-back and migration running (as the daemon runs it).
fn running_pool(
    pm_mib: u64,
    ssd_mib: u64,
    inodes: u64,
    cache: &str,
) -> (Arc<MemMedia>, Arc<MemBlock>, Arc<Fs>) {
    let (pm, ssd, fs) = tiered_pool(pm_mib << 20, ssd_mib << 20, inodes);
    let fs = Arc::new(fs);
    fs.set_setting("dram_cache_bytes", cache).unwrap();
    fs.start_writeback();
    fs.start_migration();
    (pm, ssd, fs)
}

fn content(i: u32, len: usize) -> Vec<u8> {
    pattern(u64::from(i) * 7919 + 1, len)
}

/// Writes `n` files of `len` bytes into a few directories with write-back and
/// migration running, as `tar` would (create, write, chmod). Returns the
/// files whose every call succeeded, and the first error.
fn write_files(fs: &Fs, n: u32, len: usize) -> (Vec<(u64, u32)>, Option<std::io::Error>) {
    let dirs = mkdirs(fs, 4);
    let mut done = Vec::new();
    for i in 0..n {
        let dir = dirs[i as usize % dirs.len()];
        let r = (|| {
            let a = fs.mknod(
                dir,
                format!("f{i}").as_bytes(),
                libc::S_IFREG | 0o644,
                0,
                CTX,
            )?;
            fs.write(a.ino, 0, &content(i, len))?;
            fs.setattr(
                a.ino,
                terrace_core::SetAttr {
                    mode: Some(0o600),
                    ..Default::default()
                },
            )?;
            Ok::<u64, std::io::Error>(a.ino)
        })();
        match r {
            Ok(ino) => done.push((ino, i)),
            Err(e) => return (done, Some(e)),
        }
    }
    (done, None)
}

fn check_files(fs: &Fs, files: &[(u64, u32)], len: usize, when: &str) {
    let mut bad = 0;
    for &(ino, i) in files {
        let got = fs.read(ino, 0, len + 1).unwrap();
        if got != content(i, len) {
            bad += 1;
        }
    }
    assert_eq!(
        bad,
        0,
        "{bad} of {} acknowledged files differ {when}",
        files.len()
    );
}

/// Issue 15, reproduction 1 (scaled: PM 4 MiB, files of 8 KiB, three times
/// the PM in data): write() and close() all succeed, and every file is whole
/// after unmount and remount.
#[test]
fn many_small_files_on_a_small_pm_lose_no_acknowledged_write() {
    let (pm, ssd, fs) = running_pool(4, 64, 4000, "8M");
    let (files, err) = write_files(&fs, 1500, 8192);
    assert!(
        err.is_none(),
        "ENOSPC while the pool has room: {err:?} after {} files; status: {:?}",
        files.len(),
        (
            fs.status().log_pages,
            fs.status().data_blocks,
            fs.status().room_bytes
        )
    );
    check_files(&fs, &files, 8192, "before unmount");
    fs.unmount().expect("unmount persists everything");
    drop(fs);
    let fs = mount_tiered(pm.clone(), ssd.clone());
    check_files(&fs, &files, 8192, "after remount");
    fs.check_allocator().unwrap();
    fs.unmount().unwrap();
}

/// What migration compares with its threshold, once a pass has run.
fn pm_counted_percent(fs: &Fs) -> u64 {
    std::thread::sleep(Duration::from_millis(150));
    fs.migration_status().pm_counted_percent
}

/// Issue 15, reproduction 2 (scaled): a tree about eight times the PM,
/// files of mixed sizes in nested directories, written with no pause — no
/// ENOSPC while the SSD has room; then, with no application activity, PM
/// falls under the migration threshold within seconds, and everything reads
/// back after unmount and remount.
#[test]
fn a_tree_much_larger_than_pm_written_without_pause_gets_no_enospc() {
    let (pm, ssd, fs) = running_pool(16, 256, 16000, "16M");
    let mut files: Vec<(u64, u32, usize)> = Vec::new();
    let mut dirs = vec![1u64];
    let mut total = 0usize;
    for i in 0..12000u32 {
        if i % 50 == 0 {
            let parent = dirs[(i as usize / 50) % dirs.len()];
            let d = fs
                .mkdir(parent, format!("dir{i}").as_bytes(), 0o755, CTX)
                .unwrap_or_else(|e| panic!("mkdir {i}: {e}"));
            dirs.push(d.ino);
        }
        let dir = *dirs.last().unwrap();
        let len = [100usize, 3000, 9000, 40000, 40][i as usize % 5];
        let a = fs
            .mknod(
                dir,
                format!("f{i}").as_bytes(),
                libc::S_IFREG | 0o644,
                0,
                CTX,
            )
            .unwrap_or_else(|e| panic!("create {i} after {total} bytes: {e}"));
        fs.write(a.ino, 0, &content(i, len))
            .unwrap_or_else(|e| panic!("write {i} after {total} bytes: {e}"));
        files.push((a.ino, i, len));
        total += len;
    }
    assert!(total > 7 * (16 << 20), "the tree is {total} bytes");
    // No activity: migration brings PM under its threshold by itself.
    let threshold = fs.migration_status().pm_threshold_percent as u64;
    let start = Instant::now();
    while pm_counted_percent(&fs) >= threshold {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "PM still at {}% (threshold {threshold}%) after 20 s idle: {:?}",
            pm_counted_percent(&fs),
            fs.migration_status().reason
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    for &(ino, i, len) in &files {
        assert_eq!(
            fs.read(ino, 0, len + 1).unwrap(),
            content(i, len),
            "file {i}"
        );
    }
    fs.unmount().expect("unmount persists everything");
    drop(fs);
    let fs = mount_tiered(pm.clone(), ssd.clone());
    for &(ino, i, len) in &files {
        assert_eq!(
            fs.read(ino, 0, len + 1).unwrap(),
            content(i, len),
            "file {i} after remount"
        );
    }
    fs.check_allocator().unwrap();
    fs.unmount().unwrap();
}

/// A crash (the daemon killed: PM keeps every store, the DRAM cache is gone)
/// in the middle of a small-file burst on a full PM: every fsync'd file is
/// whole after recovery, every other file shows all of its one write or none
/// of it, and the allocators are consistent.
#[test]
fn a_crash_during_a_small_file_burst_keeps_every_fsynced_file() {
    let (pm, ssd, fs) = running_pool(4, 64, 4000, "8M");
    let mut files = Vec::new();
    for i in 0..2000u32 {
        let a = fs
            .mknod(1, format!("f{i}").as_bytes(), libc::S_IFREG | 0o644, 0, CTX)
            .unwrap();
        fs.write(a.ino, 0, &content(i, 6000)).unwrap();
        let synced = i % 3 == 0;
        if synced {
            fs.fsync(a.ino, false).unwrap();
        }
        files.push((a.ino, i, synced));
    }
    // The crash: no unmount, no write-back of what is still cached.
    fs.stop_background_for_crash_test();
    drop(fs);
    let fs = mount_tiered(pm.clone(), ssd.clone());
    for &(ino, i, synced) in &files {
        let got = fs.read(ino, 0, 6001).unwrap();
        if synced || !got.is_empty() {
            assert_eq!(got, content(i, 6000), "file {i} (fsync'd: {synced})");
        }
    }
    fs.check_allocator().unwrap();
    fs.unmount().unwrap();
}

/// Issue 15, point 4: when cached writes cannot be persisted at unmount (the
/// SSD fails every write and PM has no room to take them instead), unmount
/// fails and marks nothing; the data stays readable, and once the device
/// works again unmount persists all of it.
#[test]
fn an_unmount_that_cannot_persist_keeps_the_data_and_succeeds_later() {
    use terrace_media::FaultBlock;
    let (pm, ssd, fs) = tiered_pool_on(
        MemMedia::new(4 << 20),
        FaultBlock::new(MemBlock::new(64 << 20)),
        1000,
    );
    // Fill PM with data so a failed write-back cannot fall back to it.
    fs.set_setting("placement_policy", "pm-only").unwrap();
    let filler = fs
        .mknod(1, b"filler", libc::S_IFREG | 0o644, 0, CTX)
        .unwrap();
    let mut off = 0u64;
    while fs.status().cache.dirty_bytes == 0 {
        fs.write(filler.ino, off, &[9u8; 65536]).unwrap();
        off += 65536;
    }
    fs.fsync(filler.ino, false).unwrap();
    block_first(&fs);
    let a = fs
        .mknod(1, b"cached", libc::S_IFREG | 0o644, 0, CTX)
        .unwrap();
    let data = pattern(77, 1 << 20);
    fs.write(a.ino, 0, &data).unwrap();
    assert!(fs.status().cache.dirty_bytes > 0, "the write is not cached");
    ssd.fail_writes_after(0);
    let e = fs
        .unmount()
        .expect_err("unmount must fail while nothing can persist the data");
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    assert!(fs.read(a.ino, 0, data.len()).unwrap() == data);
    ssd.heal();
    fs.unmount()
        .expect("unmount persists once the device works");
    drop(fs);
    let fs = mount_tiered(pm.clone(), ssd.clone());
    assert!(fs.mount_report().was_clean);
    assert!(fs.read(a.ino, 0, data.len()).unwrap() == data);
    fs.check_allocator().unwrap();
    fs.unmount().unwrap();
}

/// A pool of 4 MiB PM, with a 16 MiB SSD when `tiered`, whose inode
/// table may take up to 90 % of PM (no background threads).
fn small_pool(tiered: bool) -> Fs {
    let fs = if tiered {
        tiered_pool(4 << 20, 16 << 20, 64).2
    } else {
        pm_pool(4 << 20, 64).1
    };
    fs.set_setting("inode_max_percent", "90").unwrap();
    fs
}

/// Asserts that every removal succeeded: `results` are the names and what
/// their unlink or rmdir returned; the message gives the first failures.
fn assert_all_removed(context: &str, results: Vec<(String, std::io::Result<()>)>) {
    let total = results.len();
    let failed: Vec<String> = results
        .into_iter()
        .filter_map(|(name, r)| r.err().map(|e| format!("{name}: {e}")))
        .collect();
    assert!(
        failed.is_empty(),
        "{context}: {} of {total} removals failed, the first: {:?}",
        failed.len(),
        &failed[..failed.len().min(3)]
    );
}

/// Fills `fs` with data until a write is refused; returns the file.
fn fill_with_data(fs: &Fs) -> u64 {
    let big = file(fs, 1, "big");
    let mut off = 0u64;
    while fs.write(big, off, &pattern(off, 64 << 10)).is_ok() {
        off += 64 << 10;
        assert!(off < 1 << 30, "the pool never filled with data");
    }
    let _ = fs.fsync(big, false);
    big
}

/// A running pool of PM 4 MiB + SSD 16 MiB whose inode table may take 90 %
/// of PM, with `n` empty files of Maildir names in one directory: the
/// pool, the directory and the names.
fn pool_with_empty_files(n: u32) -> (Arc<Fs>, u64, Vec<String>) {
    let (_, _, fs) = running_pool(4, 16, 64, "4M");
    fs.set_setting("inode_max_percent", "90").unwrap();
    let d = mkdirs(&fs, 1)[0];
    let names = (0..n)
        .map(|i| {
            let name = maildir_name(i);
            fs.mknod(d, name.as_bytes(), libc::S_IFREG | 0o644, 0, CTX)
                .unwrap();
            name
        })
        .collect();
    (fs, d, names)
}

/// Fills PM with empty files in a new directory `fill` until ENOSPC, then
/// unlinks every one of `names` from `d`: all must go, and the rescue must
/// have made room for them (they failed without it) and say how much.
/// Newest first: the oldest pages of `d`'s log then keep live names until
/// the end, so a log trim (`log_trim.rs`, which drops a log's dead first
/// pages) cannot make the room, and this tests the rescue.
fn fill_then_unlink_all(fs: &Fs, d: u64, names: &[String], what: &str) {
    let fill = fs.mkdir(1, b"fill", 0o755, CTX).unwrap().ino;
    fill_with_files(fs, &[fill]);
    let unlinks = names
        .iter()
        .rev()
        .map(|name| (name.clone(), fs.unlink(d, name.as_bytes())))
        .collect();
    assert_all_removed(what, unlinks);
    assert!(fs.status().space.rescued_bytes > 0, "{what}: no rescue");
}

/// The `i`-th name of a mail spool (Maildir): long, as such names are.
fn maildir_name(i: u32) -> String {
    format!("{i}.M{i}P4242Q{i}.mail.example.org,S=1024:2,")
}

/// Creates the `i`-th mail file in `dir` with 8 KiB written and fsynced;
/// returns its inode and name.
fn mail_file(fs: &Fs, dir: u64, i: u32) -> (u64, String) {
    let name = maildir_name(i);
    let a = fs
        .mknod(dir, name.as_bytes(), libc::S_IFREG | 0o644, 0, CTX)
        .unwrap();
    fs.write(a.ino, 0, &content(i, 8192)).unwrap();
    fs.fsync(a.ino, false).unwrap();
    (a.ino, name)
}

/// Creates files with long names in `dirs`, in turn, until a create is
/// refused; returns the names created in each.
fn fill_with_files(fs: &Fs, dirs: &[u64]) -> Vec<Vec<String>> {
    let mut names = vec![Vec::new(); dirs.len()];
    for i in 0..1_000_000u32 {
        let k = i as usize % dirs.len();
        let name = maildir_name(i);
        match fs.mknod(dirs[k], name.as_bytes(), libc::S_IFREG | 0o644, 0, CTX) {
            Ok(_) => names[k].push(name),
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(e) => panic!("create {name}: {e}"),
        }
    }
    names
}

/// A pool whose PM filled with metadata could not delete anything: each
/// unlink needs a log entry in its directory, and once creates had taken
/// PM's last block the directory's log had no page to grow into, so `rm`
/// failed with ENOSPC on every file and the pool could never be emptied.
/// The first round of creates stops at the inode table's growth, which
/// leaves a part of PM's metadata reserve; a second round reuses the
/// slots the deletes freed and, before the fix, took PM down to its last
/// block (found with xfstests generic/027's loop of creates until ENOSPC
/// and `rm -rf`, under `-o writeback_cache`). Operations that add
/// metadata now leave a part of the reserve to the ones that remove it.
#[test]
fn a_pool_whose_pm_filled_with_metadata_can_still_delete_everything() {
    for tiered in [false, true] {
        let fs = small_pool(tiered);
        let dirs = mkdirs(&fs, 4);
        fill_with_data(&fs);
        for round in 0..3u32 {
            let names = fill_with_files(&fs, &dirs);
            let files: usize = names.iter().map(Vec::len).sum();
            assert!(
                files > 20,
                "tiered={tiered} round {round}: only {files} files"
            );
            // Then what else adds metadata, until PM refuses it too: xattrs,
            // and renames back and forth, which grow a directory's log.
            let big = fs.lookup(1, b"big").unwrap().ino;
            let value = pattern(u64::from(round), 2000);
            for k in 0..100_000u32 {
                let name = format!("user.r{round}.{k}");
                if fs.setxattr(big, name.as_bytes(), &value, 0).is_err() {
                    break;
                }
            }
            let (d, name) = (dirs[0], names[0][0].clone());
            let mut at = name.as_bytes();
            for _ in 0..1_000_000 {
                let to: &[u8] = if at == b"moved" {
                    name.as_bytes()
                } else {
                    b"moved"
                };
                if fs.rename(d, at, d, to, RenameFlags::default()).is_err() {
                    break;
                }
                at = to;
            }
            if at == b"moved" {
                fs.unlink(d, b"moved").unwrap_or_else(|e| {
                    panic!("tiered={tiered} round {round}: unlink on a full pool: {e}")
                });
            }
            // Shrinking frees room too: a truncate and a hole punch of the
            // data file, each in the middle of a block, commit on this PM.
            let size = fs.getattr(big).unwrap().size;
            fs.setattr(
                big,
                SetAttr {
                    size: Some(size - 5000),
                    ..Default::default()
                },
            )
            .unwrap_or_else(|e| panic!("tiered={tiered} round {round}: truncate: {e}"));
            fs.fallocate(big, 3000, 10_000, FallocateMode::PunchHole)
                .unwrap_or_else(|e| panic!("tiered={tiered} round {round}: punch: {e}"));
            let moved_away = at == b"moved";
            for (d, list) in dirs.iter().zip(&names) {
                for name in list {
                    if moved_away && *d == dirs[0] && *name == names[0][0] {
                        continue;
                    }
                    fs.unlink(*d, name.as_bytes()).unwrap_or_else(|e| {
                        panic!(
                            "tiered={tiered} round {round}: unlink of one of {files} files \
                             on a full pool: {e}"
                        )
                    });
                }
            }
        }
        for d in 0..4 {
            fs.rmdir(1, format!("d{d}").as_bytes())
                .unwrap_or_else(|e| panic!("tiered={tiered}: rmdir d{d}: {e}"));
        }
        fs.unlink(1, b"big")
            .unwrap_or_else(|e| panic!("tiered={tiered}: unlink big: {e}"));
        // Room again for what the deletes freed.
        let f = file(&fs, 1, "after");
        fs.write(f, 0, &pattern(9, 64 << 10))
            .unwrap_or_else(|e| panic!("tiered={tiered}: a write after the deletes: {e}"));
        fs.check_allocator().unwrap();
    }
}

/// xfstests generic/416 on the core: a 128 MiB pool filled with 4 KiB
/// files in one directory until a create or write fails, remounted, then
/// every file whose name ends in an odd digit deleted — which must all
/// succeed — and 16 MiB written into the room they left. (Through a mount
/// with `-o writeback_cache` thousands of those deletes failed with ENOSPC;
/// the cause was the kernel's SETATTR of each deleted inode it evicts,
/// which this does not send: `log_migration.rs::times_set_on_an_unlinked_\
/// file_the_kernel_still_holds_take_no_room` and the e2e
/// `test_writeback_cache.py` cover it.)
#[test]
fn a_pool_filled_with_small_files_in_one_directory_deletes_half_of_them_after_a_remount() {
    let (pm, ssd, fs) = running_pool(32, 96, 40_000, "256M");
    let block = [0u8; 4096];
    let mut names = Vec::new();
    for i in 0..60_000u32 {
        let name = format!("{i:05}");
        let made = fs.mknod(1, name.as_bytes(), libc::S_IFREG | 0o644, 0, CTX);
        let Ok(a) = made else { break };
        names.push(name);
        if fs.write(a.ino, 0, &block).is_err() {
            break;
        }
    }
    assert!(names.len() > 10_000, "only {} files", names.len());
    fs.unmount().expect("unmount persists everything");
    drop(fs);
    let fs = Arc::new(mount_tiered(pm.clone(), ssd.clone()));
    fs.set_setting("dram_cache_bytes", "256M").unwrap();
    fs.start_writeback();
    fs.start_migration();
    let odd: Vec<&String> = names
        .iter()
        .filter(|n| n.ends_with(['1', '3', '5', '7', '9']))
        .collect();
    let mut failed = Vec::new();
    for name in &odd {
        if let Err(e) = fs.unlink(1, name.as_bytes()) {
            failed.push((name.to_string(), e.to_string()));
        }
    }
    let st = fs.space_status();
    assert!(
        failed.is_empty(),
        "{} of {} deletes failed (first: {:?}); PM: {st:?}",
        failed.len(),
        odd.len(),
        failed.first()
    );
    let f = file(&fs, 1, "large_file");
    fs.write(f, 0, &pattern(3, 16 << 20))
        .unwrap_or_else(|e| panic!("16 MiB after deleting half of the pool: {e}"));
    fs.check_allocator().unwrap();
    fs.unmount().unwrap();
}

/// A pool full on every tier, whose directories' and files' logs had
/// moved to the SSD (log migration, as a tree left alone for a while has
/// them), must still delete everything in `rm -rf`'s order. An unlink in a
/// directory whose log is on a block tier brings that log back to PM (its
/// whole state), one of a hard-linked file commits the new link count to
/// the file's log, and every unlink adds an entry to its directory's log;
/// while removing files whose data and logs are on the SSD frees SSD room
/// only. Found with fsstress filling a tiered pool (PM 32 MiB, SSD
/// 768 MiB) until both were full: `rm -rf` then failed with ENOSPC on
/// 2,200 of 6,800 names, which a second `rm -rf` removed. A removal
/// refused PM room now waits while migration moves PM data into the room
/// the removals before it freed.
#[test]
fn a_pool_full_on_every_tier_whose_logs_left_pm_can_still_delete_everything() {
    let (_, _, fs) = running_pool(4, 16, 64, "4M");
    fs.set_setting("inode_max_percent", "90").unwrap();
    // The tree: files of 8 KiB written to the SSD, every fourth with a
    // second name in the next directory.
    block_first(&fs);
    let dirs = mkdirs(&fs, 8);
    let mut names: Vec<Vec<String>> = vec![Vec::new(); dirs.len()];
    let mut inos = dirs.clone();
    for (k, &d) in dirs.iter().enumerate() {
        for i in 0..80u32 {
            let (ino, name) = mail_file(&fs, d, i);
            inos.push(ino);
            names[k].push(name);
            if i % 4 == 0 {
                let other = (k + 1) % dirs.len();
                let link = format!("link-{k}-{i}");
                fs.link(ino, dirs[other], link.as_bytes()).unwrap();
                names[other].push(link);
            }
        }
    }
    fs.set_setting("placement_policy", "ziggurat").unwrap();
    fs.move_logs(&inos, 1).unwrap();
    for &d in &dirs {
        assert!(
            fs.log_place(d).unwrap().is_some(),
            "a directory's log left PM"
        );
    }
    // Then the pool fills: data until refused, then files until refused.
    fill_with_data(&fs);
    let fill = fs.mkdir(1, b"fill", 0o755, CTX).unwrap().ino;
    let filled = fill_with_files(&fs, &[fill]);
    let pm_free = fs.space_status().pm_free_bytes;
    assert!(
        pm_free <= fs.space_status().pm_reserve_bytes,
        "PM did not fill: {pm_free} bytes free"
    );
    // `rm -rf`: every name of a directory, then the directory.
    let mut failed = Vec::new();
    let mut removals = 0;
    let mut remove = |what: String, r: std::io::Result<()>| {
        removals += 1;
        if let Err(e) = r {
            failed.push(format!("{what}: {e}"));
        }
    };
    for (k, &d) in dirs.iter().enumerate() {
        for name in &names[k] {
            remove(format!("d{k}/{name}"), fs.unlink(d, name.as_bytes()));
        }
        remove(format!("d{k}"), fs.rmdir(1, format!("d{k}").as_bytes()));
    }
    for name in &filled[0] {
        remove(format!("fill/{name}"), fs.unlink(fill, name.as_bytes()));
    }
    remove("fill".into(), fs.rmdir(1, b"fill"));
    remove("big".into(), fs.unlink(1, b"big"));
    assert!(
        failed.is_empty(),
        "{} of {removals} removals on a full pool failed, the first: {:?}",
        failed.len(),
        &failed[..failed.len().min(5)]
    );
    fs.stop_background_for_crash_test();
    fs.check_allocator().unwrap();
}

/// Truncates of files whose logs are on the SSD, on a pool full on every
/// tier, each bring the file's whole log back to PM first, out of PM's
/// removal reserve. They may take its first half only: the rest is left to
/// unlink and rmdir, so every file can still be deleted afterwards. Before,
/// the truncates took PM to its last block and the unlinks found none
/// (fsstress's truncates and hole punches on a full pool, before `rm -rf`).
#[test]
fn truncates_of_files_with_cold_logs_leave_room_for_deleting_every_file() {
    let (_, _, fs) = tiered_pool(4 << 20, 16 << 20, 64);
    fs.set_setting("inode_max_percent", "90").unwrap();
    block_first(&fs);
    let d = mkdirs(&fs, 1)[0];
    let mut files = Vec::new();
    for i in 0..150u32 {
        let name = format!("f{i}");
        let a = fs
            .mknod(d, name.as_bytes(), libc::S_IFREG | 0o644, 0, CTX)
            .unwrap();
        for k in 0..24u32 {
            let key = format!("user.attribute-with-a-long-name.{k}");
            fs.setxattr(a.ino, key.as_bytes(), &[b'v'; 40], 0).unwrap();
        }
        fs.write(a.ino, 0, &content(i, 8192)).unwrap();
        fs.fsync(a.ino, false).unwrap();
        files.push((name, a.ino));
    }
    fs.set_setting("placement_policy", "ziggurat").unwrap();
    let mut inos: Vec<u64> = files.iter().map(|f| f.1).collect();
    inos.push(d);
    assert_eq!(fs.move_logs(&inos, 1).unwrap(), inos.len() as u64);
    fill_with_data(&fs);
    let fill = fs.mkdir(1, b"fill", 0o755, CTX).unwrap().ino;
    fill_with_files(&fs, &[fill]);
    let mut refused = 0;
    for (_, ino) in &files {
        let set = SetAttr {
            size: Some(5000),
            ..Default::default()
        };
        if fs.setattr(*ino, set).is_err() {
            refused += 1;
        }
    }
    assert!(refused > 0, "the truncates never ran short of PM");
    let unlinks = files
        .iter()
        .map(|(name, _)| (name.clone(), fs.unlink(d, name.as_bytes())))
        .collect();
    assert_all_removed("unlinks after the truncates", unlinks);
    fs.check_allocator().unwrap();
}

/// Symlinks made until the pool refuses them leave PM's removal reserve to
/// the removals, as every other create does: a symlink's target is a PM
/// block of its own, which was taken with no look at the reserve, so on a
/// pool full on every tier fsstress's symlinks took PM to its last block
/// and `rm -rf` then failed with ENOSPC on 2,500 names of 7,000 (found by
/// tracing what took PM's last blocks). On the tiered pool the tree also
/// holds a directory whose log is on the SSD, as a tree left alone has
/// them: its first unlink brings the whole log back to PM before anything
/// is freed.
#[test]
fn symlinks_made_until_refused_leave_room_for_deleting_everything() {
    for tiered in [false, true] {
        let fs = small_pool(tiered);
        let mut removals: Vec<(u64, String)> = Vec::new();
        if tiered {
            block_first(&fs);
            let cold = fs.mkdir(1, b"cold", 0o755, CTX).unwrap().ino;
            let mut inos = vec![cold];
            for i in 0..60u32 {
                let (ino, name) = mail_file(&fs, cold, i);
                inos.push(ino);
                removals.push((cold, name));
            }
            fs.set_setting("placement_policy", "ziggurat").unwrap();
            assert_eq!(fs.move_logs(&inos, 1).unwrap(), inos.len() as u64);
            removals.push((1, "cold".into()));
        }
        let dirs = mkdirs(&fs, 4);
        fill_with_data(&fs);
        let mut links = 0;
        for i in 0..1_000_000u32 {
            let k = i as usize % dirs.len();
            let name = format!("link-{i}");
            let target = format!("../d{}/a-target-some-way-off-{i}", (k + 1) % dirs.len());
            match fs.symlink(dirs[k], name.as_bytes(), target.as_bytes(), CTX) {
                Ok(_) => links += 1,
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
                Err(e) => panic!("tiered={tiered}: symlink {name}: {e}"),
            }
        }
        assert!(links > 20, "tiered={tiered}: only {links} symlinks");
        let st = fs.space_status();
        assert!(
            st.pm_free_bytes >= st.pm_reserve_bytes / 4,
            "tiered={tiered}: {links} symlinks left {} bytes of PM free, under the removal \
             reserve ({} bytes)",
            st.pm_free_bytes,
            st.pm_reserve_bytes / 4
        );
        // `rm -rf` of the root: "cold" first, then each of d0..d3.
        for k in 0..dirs.len() as u32 {
            for i in (k..links).step_by(dirs.len()) {
                removals.push((dirs[k as usize], format!("link-{i}")));
            }
            removals.push((1, format!("d{k}")));
        }
        let results = removals
            .iter()
            .map(|(d, name)| {
                let r = if *d == 1 {
                    fs.rmdir(1, name.as_bytes())
                } else {
                    fs.unlink(*d, name.as_bytes())
                };
                (name.clone(), r)
            })
            .collect();
        assert_all_removed(&format!("tiered={tiered}"), results);
        fs.check_allocator().unwrap();
    }
}

/// A pool full on every tier, whose PM holds data, empties a directory of
/// empty files: each unlink adds an entry to the directory's log and frees
/// no block (an empty file has no log page of its own), so the unlinks use
/// PM's removal reserve up, and with the block tiers full migration has
/// nowhere to move PM's data. A removal refused then moves a little of
/// PM's data into a block tier's recycling reserve (when nothing cached
/// is dirty and the tier has nothing to recycle): before, the first
/// `rm -rf` of such a pool failed with ENOSPC on thousands of names.
#[test]
fn a_pool_full_on_every_tier_empties_a_directory_of_empty_files() {
    let (fs, d, names) = pool_with_empty_files(1500);
    fill_with_data(&fs);
    fill_then_unlink_all(&fs, d, &names, "empty files on a full pool");
    fs.rmdir(1, b"d0").unwrap();
    fs.stop_background_for_crash_test();
    fs.check_allocator().unwrap();
}

/// The same on a pool whose SSD also holds a few dead blocks (a hole
/// punched in a file there): too few for the cleaner to recycle their
/// extent, so they free nothing. The rescue refused any tier with dead
/// blocks, so every unlink after the removal reserve was used up failed
/// with ENOSPC (`scripts/stress_full_pool.sh`: 4 KiB dead, 2,500 names
/// refused). It now runs once recycling and migration had the removal
/// wait's time and freed nothing.
#[test]
fn a_pool_full_on_every_tier_with_a_few_dead_blocks_empties_a_directory_of_empty_files() {
    let (fs, d, names) = pool_with_empty_files(1500);
    block_first(&fs);
    let on_ssd = file(&fs, 1, "on-ssd");
    fs.write(on_ssd, 0, &pattern(9, 512 << 10)).unwrap();
    fs.fsync(on_ssd, false).unwrap();
    fs.set_setting("placement_policy", "ziggurat").unwrap();
    fill_with_data(&fs);
    fs.fallocate(
        on_ssd,
        64 << 10,
        4096,
        terrace_core::FallocateMode::PunchHole,
    )
    .unwrap();
    let dead = fs.status().tiers[1].extents.unwrap().dead_blocks;
    assert!(dead > 0, "the punch left dead blocks on the SSD");
    fill_then_unlink_all(
        &fs,
        d,
        &names,
        "empty files on a full pool with dead blocks",
    );
    fs.stop_background_for_crash_test();
    fs.check_allocator().unwrap();
}

/// A create on a pool full on every tier, where nothing can free PM (no
/// block-tier room for data to leave into, nothing dead to recycle, nothing
/// dirty), fails with ENOSPC at once, as on ext4. Before, the first one
/// waited the whole stall limit (10 s) for a migration that had nowhere to
/// move anything. The wait still gives up (a stall is counted), so later
/// creates do not wait either.
#[test]
fn a_create_on_a_pool_full_on_every_tier_fails_at_once() {
    let (_, _, fs) = running_pool(4, 16, 64, "4M");
    fill_with_data(&fs);
    let dir = mkdirs(&fs, 1)[0];
    let start = Instant::now();
    let names = fill_with_files(&fs, &[dir]);
    let took = start.elapsed();
    assert!(!names[0].is_empty(), "no file was created");
    assert!(
        took < Duration::from_secs(5),
        "creating {} files until ENOSPC took {took:?}: the refused create waited for \
         migration that had nowhere to move data",
        names[0].len()
    );
    assert!(fs.space_status().stalls > 0, "no wait gave up");
    fs.stop_background_for_crash_test();
    fs.check_allocator().unwrap();
}
