//! Pools that must be refused, and refusing them writes nothing; fsck finds the
//! damage and `repair` makes the pool mountable again.

mod common;
use common::*;
use std::sync::Arc;
use terrace_core::{fsck, Fs, OpenError};
use terrace_format::{inode_offset, INODE_OFF_LOG_HEAD, LOG_PAGE_HEADER};
use terrace_media::{MemMedia, PmMedia};

fn pool_with_dir_and_file() -> (Arc<MemMedia>, u64) {
    let (m, fs) = pm_pool(8 << 20, 64);
    let d = fs.mkdir(1, b"d", 0o755, CTX).unwrap();
    let f = fs
        .mknod(d.ino, b"f", libc::S_IFREG | 0o644, 0, CTX)
        .unwrap();
    fs.write(f.ino, 0, b"hello").unwrap();
    fs.unmount().unwrap();
    (m, d.ino)
}

#[test]
fn a_refused_mount_leaves_the_pool_byte_for_byte_unchanged() {
    let (m, dir) = pool_with_dir_and_file();
    let off = m.load_u64(inode_offset(dir) + INODE_OFF_LOG_HEAD) + LOG_PAGE_HEADER + 12;
    let mut b = [0u8; 1];
    m.read(off, &mut b);
    b[0] ^= 0xff;
    m.write(off, &b);
    let before = m.image();
    let err = Fs::mount(m.clone() as Arc<dyn PmMedia>)
        .err()
        .expect("corrupt log must be refused");
    assert!(matches!(err, OpenError::Corrupt(_)), "{err}");
    assert!(err.to_string().contains("checksum"), "{err}");
    assert!(m.image() == before, "a refused mount wrote to the pool");
    let report = fsck::check(&*m, &[], &mut |_, _| {}).unwrap();
    assert!(!report.is_clean());
    assert!(m.image() == before, "fsck without repair wrote to the pool");
    let repaired = fsck::repair(m.clone() as Arc<dyn PmMedia>, &[], &mut |_, _| {}).unwrap();
    assert!(repaired.is_clean(), "{:?}", repaired.problems);
    let fs = mount(m.clone());
    fs.check_allocator().unwrap();
}

#[test]
fn not_a_pool_and_newer_versions_are_refused_without_writes() {
    let m = Arc::new(MemMedia::from_image(vec![0x5a; 4 << 20]));
    let before = m.image();
    assert!(matches!(
        Fs::mount(m.clone() as Arc<dyn PmMedia>).err(),
        Some(OpenError::NotAPool(_))
    ));
    assert!(m.image() == before);

    let (m, _) = pool_with_dir_and_file();
    let mut sb = terrace_core::recovery::read_superblock(&*m).unwrap();
    sb.version = terrace_format::FORMAT_VERSION + 1;
    terrace_core::mkfs::write_superblock(&*m, &sb);
    let before = m.image();
    let err = Fs::mount(m.clone() as Arc<dyn PmMedia>).err().unwrap();
    assert!(matches!(err, OpenError::NewerVersion(_)), "{err}");
    assert!(m.image() == before);
}

#[test]
fn one_damaged_superblock_copy_is_survived_and_two_are_reported() {
    let (m, _) = pool_with_dir_and_file();
    m.write(100, &[0xee; 4]);
    let fs = mount(m.clone());
    assert_eq!(
        fs.lookup(1, b"d").unwrap().kind,
        terrace_core::FileType::Directory
    );
    fs.unmount().unwrap();
    drop(fs);
    m.write(100, &[0xee; 4]);
    m.write(4096 + 100, &[0xee; 4]);
    let err = Fs::mount(m.clone() as Arc<dyn PmMedia>).err().unwrap();
    assert!(matches!(err, OpenError::BadSuperblock(_)), "{err}");
}
