//! Extended attribute values up to the VFS limit of 64 KiB (xfstests
//! generic/020): logged as one XattrSet entry and XattrAppend entries in one
//! commit, they read back whole after a remount, a log compaction and a
//! crash at any point of the commit (old value or new, never a prefix).

mod common;
use common::*;
use std::sync::Arc;
use terrace_core::Fs;
use terrace_media::{CrashMedia, LossMode, MemMedia, PmMedia};

fn value(seed: u8, n: usize) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
}

#[test]
fn values_up_to_64_kib_round_trip_and_larger_ones_are_e2big() {
    let (pm, fs) = pm_pool(32 << 20, 64);
    let f = fs.mknod(1, b"f", libc::S_IFREG | 0o644, 0, CTX).unwrap();
    let sizes = [0usize, 1, 3584, 3585, 10_000, 65_535, 65_536];
    for (k, &n) in sizes.iter().enumerate() {
        let name = format!("user.v{n}");
        fs.setxattr(f.ino, name.as_bytes(), &value(k as u8, n), 0)
            .unwrap_or_else(|e| panic!("{n} bytes: {e}"));
    }
    let e = fs
        .setxattr(f.ino, b"user.toobig", &vec![1; 65_537], 0)
        .unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::E2BIG));
    // Rewritten many times: the log is compacted, the values stay.
    for round in 0..40u8 {
        fs.setxattr(f.ino, b"user.v65536", &value(round, 65_536), 0)
            .unwrap();
    }
    let check = |fs: &Fs, what: &str| {
        for (k, &n) in sizes.iter().enumerate() {
            let want = if n == 65_536 {
                value(39, n)
            } else {
                value(k as u8, n)
            };
            let got = fs.getxattr(f.ino, format!("user.v{n}").as_bytes()).unwrap();
            assert!(got == want, "{what}: {n} bytes differ");
        }
    };
    check(&fs, "mounted");
    assert!(fs.status().compactions > 0, "the log was never compacted");
    fs.unmount().unwrap();
    drop(fs);
    let fs = mount(pm);
    check(&fs, "after a remount");
}

#[test]
fn a_crash_during_a_64_kib_xattr_commit_leaves_the_old_value_or_the_new_whole() {
    let (pm, fs) = pm_pool_on(CrashMedia::new(16 << 20), 64);
    let f = fs.mknod(1, b"f", libc::S_IFREG | 0o644, 0, CTX).unwrap();
    let old = value(1, 20_000);
    let new = value(2, 65_536);
    fs.setxattr(f.ino, b"user.x", &old, 0).unwrap();
    pm.sync_all().unwrap();
    let ((), trace) = pm.trace(|| fs.setxattr(f.ino, b"user.x", &new, 0).unwrap());
    let n = trace.len();
    let mut seen = (false, false);
    for k in (0..=n).step_by((n / 60).max(1)).chain([n]) {
        for mode in [LossMode::AllUnflushed, LossMode::RandomLines(k as u64)] {
            let img = MemMedia::from_image(trace.image_at(k, mode));
            let fs2 = Fs::mount(Arc::new(img) as Arc<dyn PmMedia>).unwrap();
            let got = fs2.getxattr(f.ino, b"user.x").unwrap();
            assert!(
                got == old || got == new,
                "crash at {k}/{n}: {} bytes",
                got.len()
            );
            seen.0 |= got == old;
            seen.1 |= got == new;
        }
    }
    assert!(
        seen.0 && seen.1,
        "both outcomes occur across the crash points"
    );
}

#[test]
fn the_names_of_a_file_always_fit_in_one_listxattr_answer() {
    // 300 names of 255 bytes were all taken, and listxattr could never
    // return them again (the VFS's 64 KiB): getfattr, cp -a and rsync -X
    // failed on the file for good. A name past that is ENOSPC, as on ext4.
    let (_, fs) = pm_pool(64 << 20, 64);
    let f = fs
        .mknod(1, b"f", libc::S_IFREG | 0o644, 0, CTX)
        .unwrap()
        .ino;
    let mut n = 0;
    let refused = loop {
        let name = format!("user.{n:0>250}");
        match fs.setxattr(f, name.as_bytes(), b"v", 0) {
            Ok(()) => n += 1,
            Err(e) => break e,
        }
        assert!(n < 1000, "names without end");
    };
    assert_eq!(refused.raw_os_error(), Some(libc::ENOSPC));
    let listed: usize = fs.listxattr(f).unwrap().iter().map(|n| n.len() + 1).sum();
    assert!(listed <= 65536, "{listed} bytes of names");
    assert!(listed > 65536 - 257, "room was left: {listed}");
    // An existing name's value still changes; a removal makes room.
    fs.setxattr(f, format!("user.{:0>250}", 0).as_bytes(), b"w", 0)
        .unwrap();
    fs.removexattr(f, format!("user.{:0>250}", 1).as_bytes())
        .unwrap();
    fs.setxattr(f, format!("user.{:0>250}", n).as_bytes(), b"v", 0)
        .unwrap();
}

#[test]
fn a_namespace_prefix_alone_is_no_name() {
    let (_, fs) = pm_pool(64 << 20, 64);
    let f = fs
        .mknod(1, b"f", libc::S_IFREG | 0o644, 0, CTX)
        .unwrap()
        .ino;
    for name in ["user.", "trusted.", "security."] {
        let e = fs.setxattr(f, name.as_bytes(), b"v", 0).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{name}");
        let e = fs.getxattr(f, name.as_bytes()).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{name}");
    }
}
