//! One flipped bit in an in-use inode slot (its static part or its check)
//! costs nothing: the slot's crc32c corrects it. A read-write mount refuses
//! the pool and names the file, a read-only mount serves the file as it was
//! written, and `fsck --repair` writes the corrected slot back. Before
//! 2026-12-07 the slot failed its check and was freed: the file was lost
//! although its log and data were intact.

mod common;
use common::*;
use std::sync::Arc;
use terrace_core::{fsck, Fs, OpenError};
use terrace_format::inode_offset;
use terrace_media::{BlockMedia, MemBlock, MemMedia, PmMedia};

const SSD: u64 = 32 << 20;

#[test]
fn one_flipped_bit_in_a_files_slot_is_corrected_and_the_file_kept_whole() {
    let (pm, ssd, fs) = tiered_pool(4 << 20, SSD, 64);
    let dir = fs.mkdir(1, b"d", 0o750, CTX).unwrap().ino;
    let a = fs
        .mknod(dir, b"keep", libc::S_IFREG | 0o640, 0, CTX)
        .unwrap();
    let data = pattern(7, 3 << 20); // most of it on the SSD
    fs.write(a.ino, 0, &data).unwrap();
    fs.fsync(a.ino, false).unwrap();
    let want = fs.getattr(a.ino).unwrap();
    fs.unmount().unwrap();
    let (pm_image, ssd_image) = (pm.image(), ssd.image());
    let path = format!("inode {} (/d/keep)", a.ino);

    // Mode, uid, gid, btime, parent hint, and the check itself.
    for (byte, bit) in [(24, 1), (28, 3), (32, 0), (50, 6), (56, 2), (121, 5)] {
        let ctx = format!("byte {byte} bit {bit}");
        let pm = Arc::new(MemMedia::from_image(pm_image.clone()));
        let ssd = Arc::new(MemBlock::from_image(ssd_image.clone()));
        let tiers = || vec![(1u8, ssd.clone() as Arc<dyn BlockMedia>)];
        let at = inode_offset(a.ino) + byte;
        let mut b = [0u8; 1];
        pm.read(at, &mut b);
        pm.write(at, &[b[0] ^ (1 << bit)]);

        let e = Fs::mount_with_tiers(pm.clone(), tiers())
            .err()
            .unwrap_or_else(|| panic!("{ctx}: a read-write mount took the flipped bit"));
        let msg = e.to_string();
        assert!(matches!(e, OpenError::Corrupt(_)), "{ctx}: {msg}");
        for part in [&path, "flipped", "fsck --repair"] {
            assert!(msg.contains(part), "{ctx}: {part:?} not in {msg}");
        }

        let ro = Fs::mount_read_only(pm.clone(), tiers()).unwrap();
        let got = ro.getattr(a.ino).unwrap();
        assert_eq!(
            (got.mode, got.uid, got.gid, got.btime),
            (want.mode, want.uid, want.gid, want.btime),
            "{ctx}"
        );
        assert!(
            ro.read(a.ino, 0, data.len()).unwrap() == data,
            "{ctx}: data"
        );
        ro.unmount().unwrap();

        let report = fsck::repair(pm.clone(), &tiers(), &mut |_, _| {}).unwrap();
        let fixed = format!("corrected one flipped bit (byte {byte}) of the slot of {path}");
        assert!(
            report.repaired.contains(&fixed),
            "{ctx}: {:?}",
            report.repaired
        );
        fsck_clean_with(&*pm, &tiers(), Fsck::Data, &ctx);
        let slot = inode_offset(a.ino);
        let (mut now, mut was) = (vec![0u8; 128], vec![0u8; 128]);
        pm.read(slot, &mut now);
        was.copy_from_slice(&pm_image[slot as usize..slot as usize + 128]);
        assert_eq!(now, was, "{ctx}: the slot differs from the one written");

        let fs = mount_tiered(pm.clone(), ssd.clone());
        let got = fs.getattr(a.ino).unwrap();
        assert_eq!(
            (got.mode, got.uid, got.size),
            (want.mode, want.uid, want.size),
            "{ctx}"
        );
        assert!(
            fs.read(a.ino, 0, data.len()).unwrap() == data,
            "{ctx}: data"
        );
        fs.unmount().unwrap();
    }
}
