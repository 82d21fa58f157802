//! Tiers attached to a mounted pool (`Fs::attach_tier`, design.md §3
//! "Adding a tier to a mounted pool"): the superblock names the tier before
//! any data reaches it, the tier takes data at once, and the pool mounts
//! with it afterwards; out-of-order tiers are refused with nothing changed.

mod common;
use common::*;
use std::sync::Arc;
use terrace_format::TierKind;
use terrace_media::{BlockMedia, MemBlock, PmMedia};

#[test]
fn a_tier_attached_to_a_mounted_pool_takes_data_at_once_and_mounts_with_the_pool() {
    let (pm, fs) = pm_pool(4 << 20, 64);
    let a = fs.mknod(1, b"a", libc::S_IFREG | 0o644, 0, CTX).unwrap();
    let small = pattern(1, 1 << 20);
    fs.write(a.ino, 0, &small).unwrap();
    let ssd = Arc::new(MemBlock::new(32 << 20));
    fs.attach_tier(tier_record(1, TierKind::Ssd, 32 << 20), ssd.clone())
        .unwrap();
    assert_eq!(fs.superblock().tiers.len(), 2, "the superblock names it");
    // More than the 4 MiB PM holds: the new tier takes the rest.
    let b = fs.mknod(1, b"b", libc::S_IFREG | 0o644, 0, CTX).unwrap();
    let big = pattern(2, 12 << 20);
    fs.write(b.ino, 0, &big)
        .expect("no ENOSPC once a tier with room is attached");
    fs.fsync(b.ino, false).unwrap();
    fs.migrate_file(a.ino, 1).unwrap();
    assert_eq!(tier_bytes(&fs, a.ino, "ssd"), 1 << 20);
    assert!(fs.status().tiers[1].used > 0);
    fs.check_allocator().unwrap();
    fs.unmount().unwrap();
    drop(fs);
    let fs = mount_tiered(pm.clone(), ssd.clone());
    assert_eq!(fs.read(a.ino, 0, small.len()).unwrap(), small);
    assert_eq!(fs.read(b.ino, 0, big.len()).unwrap(), big);
    fs.check_allocator().unwrap();
    fs.unmount().unwrap();
    assert_fsck_clean(
        &*pm,
        Some(ssd as Arc<dyn BlockMedia>),
        Fsck::Data,
        "after the attach",
    );
}

#[test]
fn a_crash_after_the_attach_leaves_a_pool_that_mounts_with_the_empty_tier_or_without_it() {
    let (pm, fs) = pm_pool(4 << 20, 64);
    let a = fs.mknod(1, b"a", libc::S_IFREG | 0o644, 0, CTX).unwrap();
    let data = pattern(3, 1 << 20);
    fs.write(a.ino, 0, &data).unwrap();
    fs.fsync(a.ino, false).unwrap();
    let ssd = Arc::new(MemBlock::new(32 << 20));
    fs.attach_tier(tier_record(1, TierKind::Ssd, 32 << 20), ssd.clone())
        .unwrap();
    // The daemon dies here: no unmount. The tier holds nothing, so the pool
    // mounts whether its device is there or not.
    let image = Arc::new(terrace_media::MemMedia::from_image(pm.image()));
    drop(fs);
    let fs = mount_tiered(image.clone() as Arc<dyn PmMedia>, ssd);
    assert_eq!(fs.superblock().tiers.len(), 2);
    assert_eq!(fs.read(a.ino, 0, data.len()).unwrap(), data);
    drop(fs);
    let image = Arc::new(terrace_media::MemMedia::from_image(pm.image()));
    let fs = mount(image as Arc<dyn PmMedia>);
    assert_eq!(fs.read(a.ino, 0, data.len()).unwrap(), data);
}

#[test]
fn a_tier_that_breaks_the_order_is_refused_and_changes_nothing() {
    let (_pm, fs) = pm_pool(4 << 20, 64);
    let before = fs.superblock();
    let dev = || Arc::new(MemBlock::new(32 << 20)) as Arc<dyn BlockMedia>;
    for (rec, why) in [
        (tier_record(1, TierKind::Pm, 32 << 20), "one pm tier"),
        (tier_record(2, TierKind::Ssd, 32 << 20), "id 1"),
        (tier_record(1, TierKind::S3, 32 << 20), "before it"),
        (tier_record(1, TierKind::Ssd, 512 << 10), "two extents"),
    ] {
        let e = fs.attach_tier(rec, dev()).unwrap_err();
        assert!(e.contains(why), "{e:?} should say {why:?}");
        assert_eq!(fs.superblock(), before, "a refused attach wrote");
        assert!(fs.status().tiers.len() == 1);
    }
    fs.attach_tier(tier_record(1, TierKind::Hdd, 32 << 20), dev())
        .unwrap();
    let e = fs
        .attach_tier(tier_record(2, TierKind::Ssd, 32 << 20), dev())
        .unwrap_err();
    assert!(e.contains("fastest to slowest"), "{e}");
}

/// A PM-only pool on durable-fence media answers fsync with ENOSYS once
/// (the adapter calls `leave_fsync_to_kernel` first), and the kernel then
/// completes every later fsync of the mount itself. When a block tier is
/// attached after that, writes must not stay in the DRAM cache: no fsync
/// would ever reach the daemon to write them back. So a write after the
/// attach is durable when it returns — here it survives a crash with no
/// fsync request at all. (Without the flag the same write stays cached and
/// the crash loses it: the control half of the test.)
#[test]
fn writes_after_a_tier_attach_survive_a_crash_when_the_kernel_completes_fsync_itself() {
    for kernel_fsync in [true, false] {
        let (pm, fs) = pm_pool(8 << 20, 64);
        assert!(fs.fsync_is_noop(), "PM-only on durable-fence media");
        if kernel_fsync {
            fs.leave_fsync_to_kernel().unwrap();
        }
        let ssd = Arc::new(MemBlock::new(256 << 20));
        fs.attach_tier(tier_record(1, TierKind::Ssd, 256 << 20), ssd.clone())
            .unwrap();
        assert!(!fs.fsync_is_noop(), "a tier is attached");
        let f = fs.mknod(1, b"bulk", libc::S_IFREG | 0o644, 0, CTX).unwrap();
        // Three times PM: most of it goes to the new tier.
        let data = pattern(7, 24 << 20);
        for (k, chunk) in data.chunks(1 << 20).enumerate() {
            fs.write(f.ino, (k << 20) as u64, chunk).unwrap();
        }
        // The daemon dies: no fsync reached it, no unmount.
        let image = Arc::new(terrace_media::MemMedia::from_image(pm.image()));
        drop(fs);
        let fs = mount_tiered(image as Arc<dyn PmMedia>, ssd);
        let got = fs.read(f.ino, 0, data.len()).unwrap();
        if kernel_fsync {
            assert!(got == data, "every acknowledged write survives");
        } else {
            assert!(
                got != data,
                "control: with fsync requests expected, the write was cached \
                 (if this fails, the test no longer shows anything)"
            );
        }
    }
}
