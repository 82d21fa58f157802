//! Link limits as on ext4: a file has at most 65,000 names (link fails
//! with EMLINK past them), while a directory takes any number of
//! subdirectories — by mkdir or by a rename that moves one in (ext4's
//! `dir_nlink`, on by default). Terrace refused the 64,999th mkdir with
//! EMLINK, and a rename moved a directory in past that limit anyway.

mod common;
use common::*;
use terrace_core::RenameFlags;

#[test]
fn a_directory_takes_more_than_65000_subdirectories_as_on_ext4() {
    let (_, fs) = pm_pool(256 << 20, 70_000);
    let big = fs.mkdir(1, b"big", 0o755, CTX).unwrap().ino;
    for n in 0..65_001 {
        fs.mkdir(big, format!("s{n}").as_bytes(), 0o755, CTX)
            .unwrap_or_else(|e| panic!("mkdir s{n}: {e}"));
    }
    assert_eq!(fs.getattr(big).unwrap().nlink, 65_003);
    // A directory moved in counts, as one moved out does.
    let other = fs.mkdir(1, b"other", 0o755, CTX).unwrap().ino;
    fs.mkdir(other, b"d", 0o755, CTX).unwrap();
    fs.rename(other, b"d", big, b"d", RenameFlags::default())
        .unwrap();
    assert_eq!(fs.getattr(big).unwrap().nlink, 65_004);
    assert_eq!(fs.getattr(other).unwrap().nlink, 2);
    fs.rename(big, b"s0", other, b"s0", RenameFlags::default())
        .unwrap();
    assert_eq!(fs.getattr(big).unwrap().nlink, 65_003);
    fs.check_allocator().unwrap();
}

#[test]
fn a_file_has_at_most_65000_names() {
    let (_, fs) = pm_pool(64 << 20, 64);
    let f = fs
        .mknod(1, b"f", libc::S_IFREG | 0o644, 0, CTX)
        .unwrap()
        .ino;
    for n in 1..65_000 {
        fs.link(f, 1, format!("l{n}").as_bytes())
            .unwrap_or_else(|e| panic!("link l{n}: {e}"));
    }
    assert_eq!(fs.getattr(f).unwrap().nlink, 65_000);
    let e = fs.link(f, 1, b"one_more").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EMLINK));
    assert!(fs.lookup(1, b"one_more").is_err());
}
