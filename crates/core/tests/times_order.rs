//! Times keep the order of the events they stamp (xfstests generic/423):
//! a file created after another was written is not born before that write,
//! and when the kernel stamps writes itself (the FUSE writeback cache) a
//! new file is not born after the kernel's clock, which stamps its first
//! write.

mod common;
use common::*;
use terrace_core::fs::coarse_now_ns;

/// Found 2026-11-30: births on the coarse clock (the writeback cache's
/// fix) came up to a tick before the write of another file made just
/// before, without the writeback cache (generic/423's symlink after its
/// file). 300 rounds: each lands inside one tick of the write.
#[test]
fn a_file_created_after_another_was_written_is_not_born_before_that_write() {
    let (_pm, fs) = pm_pool(64 << 20, 2048);
    for k in 0..300 {
        let written = file(&fs, 1, &format!("w{k}"));
        fs.write(written, 0, b"data").unwrap();
        let mtime = fs.getattr(written).unwrap().mtime;
        let born = file(&fs, 1, &format!("b{k}"));
        let link = fs
            .symlink(1, format!("s{k}").as_bytes(), b"nowhere", CTX)
            .unwrap()
            .ino;
        for ino in [born, link] {
            let a = fs.getattr(ino).unwrap();
            assert!(
                a.btime >= mtime && a.mtime >= mtime,
                "round {k}: inode {ino} born at {} (mtime {}) before the write at {mtime}",
                a.btime,
                a.mtime
            );
        }
    }
}

/// Under the writeback cache the kernel stamps the new file's writes with
/// its coarse clock: a birth on the fine clock could come after them.
#[test]
fn when_the_kernel_stamps_writes_a_new_file_is_not_born_after_the_kernels_clock() {
    let (_pm, fs) = pm_pool(64 << 20, 2048);
    fs.set_kernel_stamps_writes(true);
    for k in 0..300 {
        let ino = file(&fs, 1, &format!("f{k}"));
        let kernel_now = coarse_now_ns();
        let born = fs.getattr(ino).unwrap().btime;
        assert!(
            born <= kernel_now,
            "round {k}: born at {born}, after the kernel's clock read right after ({kernel_now})"
        );
    }
}

/// Found in review 2026-12-07: a write kept in the DRAM cache is written
/// back later with the time of the write; a chmod between the two (which
/// does not write the cache back first) set a later ctime, and the
/// write-back set ctime back to the write's time: `stat` showed ctime go
/// backwards, and a remount kept the earlier one. ext4 keeps the chmod's.
#[test]
fn a_cached_write_written_back_after_a_chmod_does_not_move_ctime_back() {
    let (pm, ssd, fs) = tiered_pool(16 << 20, 32 << 20, 64);
    block_first(&fs);
    let f = file(&fs, 1, "f");
    fs.write(f, 0, &[7u8; 8192]).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(5));
    fs.setattr(
        f,
        terrace_core::SetAttr {
            mode: Some(0o600),
            ..Default::default()
        },
    )
    .unwrap();
    let after_chmod = fs.getattr(f).unwrap();
    fs.fsync(f, false).unwrap();
    let after_write_back = fs.getattr(f).unwrap();
    assert_eq!(
        after_write_back.ctime, after_chmod.ctime,
        "ctime moved at write-back"
    );
    assert_eq!(after_write_back.mtime, after_chmod.mtime);
    fs.unmount().unwrap();
    drop(fs);
    let fs = mount_tiered(pm, ssd);
    assert_eq!(
        fs.getattr(f).unwrap().ctime,
        after_chmod.ctime,
        "after a remount"
    );
}
