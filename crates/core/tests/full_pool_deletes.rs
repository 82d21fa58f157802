//! A pool filled to ENOSPC with small files in one directory, on a PM whose
//! inode table may take half of it, must still delete every file.
//!
//! It did not (found 2026-12-07 by hand, as a user following the README's
//! advice for many small files): PM 16 MiB + SSD 512 MiB with
//! `inode_max_percent=50`, 63,486 files of 8,000 bytes in one directory;
//! the first 24,636 unlinks succeeded, then every one failed with ENOSPC,
//! for good. The files' logs were on the SSD by then (log migration), so an
//! unlink freed no PM, while each added entries to the directory's log on
//! PM. Compaction would have freed the pages of the names already removed,
//! but it rewrites the whole live log (about 2.5 MiB here) into new pages
//! first, and PM had no such room. Removals now trim the directory's log
//! from its head instead (`log_trim.rs`), which needs room for the few
//! live entries of the dropped pages only.

mod common;
use common::*;
use std::sync::Arc;

#[test]
fn a_spool_filled_until_enospc_with_a_large_inode_table_deletes_every_file() {
    let (_, _, fs) = tiered_pool(16 << 20, 512 << 20, 512);
    let fs = Arc::new(fs);
    fs.set_setting("dram_cache_bytes", "64M").unwrap();
    fs.start_writeback();
    fs.start_migration();
    fs.set_setting("inode_max_percent", "50").unwrap();
    let spool = fs.mkdir(1, b"spool", 0o755, CTX).unwrap().ino;
    let mut names = Vec::new();
    let t = std::time::Instant::now();
    for i in 0..200_000u32 {
        let name = format!("m{i}");
        let a = match fs.mknod(spool, name.as_bytes(), libc::S_IFREG | 0o644, 0, CTX) {
            Ok(a) => a,
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(e) => panic!("create {name}: {e}"),
        };
        names.push(name);
        if fs.write(a.ino, 0, &pattern(u64::from(i), 8000)).is_err()
            || fs.fsync(a.ino, false).is_err()
        {
            break;
        }
        fs.forget(a.ino, 1);
    }
    let st = fs.space_status();
    eprintln!(
        "{} files in {:?}; PM free {} of reserve {}, logs {}",
        names.len(),
        t.elapsed(),
        st.pm_free_bytes,
        st.pm_reserve_bytes,
        st.pm_log_bytes
    );
    let waits_before = st.waits;
    let mut failed = Vec::new();
    for name in &names {
        if let Err(e) = fs.unlink(spool, name.as_bytes()) {
            failed.push(format!("{name}: {e}"));
        }
    }
    let st = fs.space_status();
    eprintln!(
        "after: PM free {} logs {}; dir log place {:?}",
        st.pm_free_bytes,
        st.pm_log_bytes,
        fs.log_place(spool).unwrap()
    );
    assert!(
        failed.is_empty(),
        "{} of {} unlinks failed, the first: {:?}",
        failed.len(),
        names.len(),
        &failed[..failed.len().min(3)]
    );
    // Trims alone keep removals going: the names unlinked first leave dead
    // pages at the log's head. A removal that waits instead depends on
    // migration still having something to move off PM; once every file's
    // log had left PM, such waits gave up and unlinks failed with ENOSPC
    // (CI, 2026-12-07: 4 of 63,463), when the trim missed a cut that was
    // there (`log_trim::best_cut`).
    assert_eq!(
        st.waits - waits_before,
        0,
        "removals waited for PM room: a trim found no cut"
    );
    fs.rmdir(1, b"spool").unwrap();
    fs.stop_background_for_crash_test();
    fs.check_allocator().unwrap();
}
