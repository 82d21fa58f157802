//! Tests of [`BlockFile`]: round trips through aligned and misaligned
//! buffers in direct and buffered mode, on a regular file, tmpfs, a loop
//! device and ramfs (the last two need root and are skipped without it).

use super::*;
use std::process::Command;

const B: usize = BLOCK_SIZE as usize;

/// A buffer of `len` bytes whose start is 1 byte past a 4096 boundary.
struct Misaligned(AlignedBuf, usize);
impl Misaligned {
    fn new(len: usize) -> Misaligned {
        Misaligned(AlignedBuf::zeroed(len + 1), len)
    }
    fn get(&mut self) -> &mut [u8] {
        &mut self.0[1..=self.1]
    }
}

fn pattern(block: u64, n: usize) -> Vec<u8> {
    (0..n * B)
        .map(|i| (block as usize * 31 + i / B * 7 + i % 251) as u8)
        .collect()
}

/// Round trips through misaligned and aligned buffers, checks stats and
/// reopens the media buffered to see the data reached it.
fn exercise(f: &BlockFile) {
    let blocks = f.blocks();
    assert!(blocks >= 16);
    let before = f.stats();
    // Misaligned single- and multi-block writes.
    let mut w = Misaligned::new(3 * B);
    w.get().copy_from_slice(&pattern(2, 3));
    f.write_blocks(2, w.get()).unwrap();
    let mut w1 = Misaligned::new(B);
    w1.get().copy_from_slice(&pattern(blocks - 1, 1));
    f.write_blocks(blocks - 1, w1.get()).unwrap();
    // Aligned write.
    f.write_blocks(8, &AlignedBuf::from_slice(&pattern(8, 4)))
        .unwrap();
    // Misaligned and aligned reads.
    let mut r = Misaligned::new(3 * B);
    f.read_blocks(2, r.get()).unwrap();
    assert_eq!(r.get(), &pattern(2, 3)[..]);
    let mut a = AlignedBuf::zeroed(4 * B);
    f.read_blocks(8, &mut a).unwrap();
    assert_eq!(&a[..], &pattern(8, 4)[..]);
    let mut v = Misaligned::new(B);
    f.read_blocks(blocks - 1, v.get()).unwrap();
    assert_eq!(v.get(), &pattern(blocks - 1, 1)[..]);
    f.sync().unwrap();
    let s = f.stats();
    assert_eq!(s.write_requests - before.write_requests, 3);
    assert_eq!(s.write_bytes - before.write_bytes, 8 * 4096);
    assert_eq!(s.read_requests - before.read_requests, 3);
    assert_eq!(s.read_bytes - before.read_bytes, 8 * 4096);
    assert!(s.max_write_bytes >= 4 * 4096);
    assert_eq!(s.syncs - before.syncs, 1);
    // Out of range and misaligned lengths are errors.
    let e = f.read_blocks(blocks, v.get()).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    let e = f.write_blocks(0, &v.get()[..512]).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    // The data is on the media: read it back buffered.
    let g = BlockFile::open_with(f.path(), DirectIo::Off).unwrap();
    assert!(!g.is_direct() && g.fallback_reason().is_none());
    let mut all = vec![0u8; 12 * B];
    g.read_blocks(0, &mut all).unwrap();
    assert_eq!(&all[2 * B..5 * B], &pattern(2, 3)[..]);
    assert_eq!(&all[8 * B..], &pattern(8, 4)[..]);
}

fn tempdir_in(dir: &str) -> Option<tempfile::TempDir> {
    tempfile::Builder::new()
        .prefix("terrace-block-")
        .tempdir_in(dir)
        .ok()
}

#[test]
fn direct_io_accepts_unaligned_caller_buffers() {
    let dir = tempdir_in("/tmp").expect("tempdir in /tmp");
    let path = dir.path().join("tier");
    let f = BlockFile::create(&path, 1 << 20).unwrap();
    eprintln!("{} / {:?}", f.describe(), f.fallback_reason());
    assert_eq!(f.len(), 1 << 20);
    assert!(!f.is_block_device());
    let tmpfs = on_tmpfs(&File::open(&path).unwrap());
    assert_eq!(f.is_direct(), !tmpfs, "{:?}", f.fallback_reason());
    exercise(&f);
    if f.is_direct() {
        // Two misaligned writes and two misaligned reads in `exercise`.
        assert_eq!(f.bounced_requests(), 4);
    }
    // A regular file: compare with std's view of it.
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(&bytes[2 * B..5 * B], &pattern(2, 3)[..]);
    // Required direct I/O works wherever preferred direct I/O does.
    if !tmpfs {
        assert!(BlockFile::open_with(&path, DirectIo::Require)
            .unwrap()
            .is_direct());
    }
}

#[test]
fn a_read_only_open_reads_and_refuses_every_write() {
    for parent in ["/tmp", "/dev/shm"] {
        let Some(dir) = tempdir_in(parent) else {
            continue;
        };
        let path = dir.path().join("tier");
        let f = BlockFile::create(&path, 64 << 10).unwrap();
        let data = AlignedBuf::from_slice(&pattern(0, 2));
        f.write_blocks(3, &data).unwrap();
        f.sync().unwrap();
        drop(f);
        let before = std::fs::read(&path).unwrap();
        let r = BlockFile::open_read_only(&path).unwrap();
        let mut back = AlignedBuf::zeroed(2 * B);
        r.read_blocks(3, &mut back).unwrap();
        assert_eq!(&back[..], &pattern(0, 2)[..]);
        assert!(r.is_read_only());
        assert!(r.describe().ends_with(", read-only"), "{}", r.describe());
        let e = r.write_blocks(0, &data).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{e}");
        let e = r.discard(0, 1).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{e}");
        r.sync().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), before, "{parent}");
        // No write permission is needed.
        let mut perm = std::fs::metadata(&path).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o444);
        std::fs::set_permissions(&path, perm).unwrap();
        BlockFile::open_read_only(&path).unwrap();
    }
}

#[test]
fn tmpfs_falls_back_to_buffered_io() {
    let Some(dir) = tempdir_in("/dev/shm") else {
        eprintln!("skipped: no /dev/shm");
        return;
    };
    let path = dir.path().join("tier");
    let f = BlockFile::create(&path, 256 << 10).unwrap();
    if !on_tmpfs(&File::open(&path).unwrap()) {
        eprintln!("skipped: /dev/shm is not tmpfs");
        return;
    }
    assert!(!f.is_direct());
    let why = f.fallback_reason().expect("fallback reason");
    assert!(why.contains("tmpfs"), "{why}");
    assert!(f.describe().contains("buffered"));
    exercise(&f);
    assert_eq!(f.bounced_requests(), 0);
}

#[test]
fn open_errors_name_the_path_and_odd_sizes_round_down() {
    let dir = tempdir_in("/tmp").unwrap();
    let missing = dir.path().join("missing");
    let e = BlockFile::open(&missing).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::NotFound);
    assert!(e.to_string().contains("missing"), "{e}");
    let e = BlockFile::open(dir.path()).unwrap_err();
    assert!(
        e.to_string().contains(&*dir.path().to_string_lossy()),
        "{e}"
    );
    let small = dir.path().join("small");
    std::fs::write(&small, [0u8; 4095]).unwrap();
    let e = BlockFile::open(&small).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    assert!(e.to_string().contains("smaller than one"), "{e}");
    let odd = dir.path().join("odd");
    std::fs::write(&odd, vec![0u8; 3 * B + 100]).unwrap();
    assert_eq!(BlockFile::open(&odd).unwrap().len(), 3 * BLOCK_SIZE);
    // create: refuses a different size, accepts the same one, creates sparse.
    let e = BlockFile::create(&odd, 4 * BLOCK_SIZE).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
    let e = BlockFile::create(dir.path().join("x"), 100).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    let fresh = dir.path().join("fresh");
    assert_eq!(
        BlockFile::create(&fresh, 8 * BLOCK_SIZE).unwrap().blocks(),
        8
    );
    assert_eq!(
        BlockFile::create(&fresh, 8 * BLOCK_SIZE).unwrap().blocks(),
        8
    );
}

#[test]
fn concurrent_requests_on_disjoint_blocks() {
    let dir = tempdir_in("/tmp").unwrap();
    let f = BlockFile::create(dir.path().join("tier"), 64 * BLOCK_SIZE).unwrap();
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let f = &f;
            s.spawn(move || {
                for i in 0..32u64 {
                    let blk = i * 2 + t;
                    f.write_blocks(blk, &pattern(blk, 1)).unwrap();
                }
            });
        }
    });
    let mut all = vec![0u8; 64 * B];
    f.read_blocks(0, &mut all).unwrap();
    for blk in 0..64u64 {
        let b = blk as usize;
        assert_eq!(&all[b * B..(b + 1) * B], &pattern(blk, 1)[..]);
    }
    assert_eq!(f.stats().write_requests, 64);
}

/// A loop device attached to a file; detached on drop (also on panic).
struct LoopDev(PathBuf);

impl LoopDev {
    fn attach(file: &Path) -> Option<LoopDev> {
        let out = Command::new("losetup")
            .args(["-f", "--show"])
            .arg(file)
            .output()
            .ok()?;
        if !out.status.success() {
            eprintln!(
                "skipped: losetup failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
            return None;
        }
        let dev = String::from_utf8_lossy(&out.stdout).trim().to_string();
        Some(LoopDev(PathBuf::from(dev)))
    }
}

impl Drop for LoopDev {
    fn drop(&mut self) {
        let ok = Command::new("losetup")
            .arg("-d")
            .arg(&self.0)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!("warning: losetup -d {} failed", self.0.display());
        }
    }
}

#[test]
fn loop_device_direct_io_bounces_unaligned_buffers() {
    let dir = tempdir_in("/tmp").unwrap();
    let backing = dir.path().join("backing");
    File::create(&backing).unwrap().set_len(64 << 20).unwrap();
    let Some(dev) = LoopDev::attach(&backing) else {
        return;
    };
    let f = BlockFile::open(&dev.0).unwrap();
    eprintln!("{} / {:?}", f.describe(), f.fallback_reason());
    assert!(f.is_block_device());
    assert!(f.is_direct(), "{:?}", f.fallback_reason());
    assert_eq!(f.len(), 64 << 20);
    // The kernel itself rejects a misaligned O_DIRECT buffer here.
    let raw = open_mode(&dev.0, true, true).unwrap();
    let mut m = Misaligned::new(B);
    let e = raw.read_at(m.get(), 0).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{e}");
    drop(raw);
    exercise(&f);
    assert_eq!(f.bounced_requests(), 4);
    // After sync the data is in the backing file.
    drop(f);
    let bytes = std::fs::read(&backing).unwrap();
    assert_eq!(&bytes[8 * B..12 * B], &pattern(8, 4)[..]);
    // Creating on a device: must be large enough; uses the first `size` bytes.
    let e = BlockFile::create(&dev.0, 128 << 20).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    assert_eq!(BlockFile::create(&dev.0, 1 << 20).unwrap().len(), 1 << 20);
}

/// A ramfs mounted on a directory; unmounted on drop (also on panic).
struct RamfsMount(PathBuf);

impl RamfsMount {
    fn mount(dir: &Path) -> Option<RamfsMount> {
        let ok = Command::new("mount")
            .args(["-t", "ramfs", "terrace-test"])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!("skipped: cannot mount ramfs (not root?)");
            return None;
        }
        Some(RamfsMount(dir.to_path_buf()))
    }
}

impl Drop for RamfsMount {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(&self.0)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!("warning: umount {} failed", self.0.display());
        }
    }
}

#[test]
fn refused_o_direct_falls_back_to_buffered_io() {
    // ramfs refuses O_DIRECT at open with EINVAL (tmpfs accepts it since 6.6).
    let dir = tempdir_in("/tmp").unwrap();
    let Some(mnt) = RamfsMount::mount(dir.path()) else {
        return;
    };
    let path = mnt.0.join("tier");
    let f = BlockFile::create(&path, 256 << 10).unwrap();
    if f.is_direct() {
        eprintln!("skipped: this kernel's ramfs accepts O_DIRECT");
        return;
    }
    let why = f.fallback_reason().expect("fallback reason");
    assert!(why.contains("refuses O_DIRECT"), "{why}");
    exercise(&f);
    assert_eq!(f.bounced_requests(), 0);
    let e = BlockFile::open_with(&path, DirectIo::Require).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    assert!(e.to_string().contains("O_DIRECT required"), "{e}");
    drop(f);
}

/// Rough latency of 4 KiB random reads and write+sync, for the notes:
/// `cargo test -p terrace-media --release -- --ignored --nocapture measure`.
#[test]
#[ignore]
fn measure_block_file_latency() {
    use std::time::Instant;
    let tmp = tempdir_in("/tmp").unwrap();
    let shm = tempdir_in("/dev/shm").unwrap();
    let backing = tmp.path().join("backing");
    File::create(&backing).unwrap().set_len(64 << 20).unwrap();
    let dev = LoopDev::attach(&backing);
    let mut targets: Vec<(String, BlockFile)> = Vec::new();
    let tfile = tmp.path().join("tier");
    for (name, mode) in [
        ("/tmp direct", DirectIo::Prefer),
        ("/tmp buffered", DirectIo::Off),
    ] {
        let f = BlockFile::create_with(&tfile, 64 << 20, mode).unwrap();
        targets.push((name.into(), f));
    }
    targets.push((
        "/dev/shm".into(),
        BlockFile::create(shm.path().join("tier"), 64 << 20).unwrap(),
    ));
    if let Some(d) = &dev {
        targets.push(("loop direct".into(), BlockFile::open(&d.0).unwrap()));
    }
    for (name, f) in &targets {
        let n = f.blocks();
        let fill = AlignedBuf::from_slice(&vec![0x5a; 1 << 20]);
        for i in 0..n / 256 {
            f.write_blocks(i * 256, &fill).unwrap();
        }
        f.sync().unwrap();
        let mut a = AlignedBuf::zeroed(B);
        let mut m = Misaligned::new(B);
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let iters = 2000;
        let t = Instant::now();
        for _ in 0..iters {
            f.read_blocks(next(), &mut a).unwrap();
        }
        let aligned = t.elapsed() / iters;
        let t = Instant::now();
        for _ in 0..iters {
            f.read_blocks(next(), m.get()).unwrap();
        }
        let misaligned = t.elapsed() / iters;
        let t = Instant::now();
        for _ in 0..200 {
            f.write_blocks(next(), &a).unwrap();
            f.sync().unwrap();
        }
        let wsync = t.elapsed() / 200;
        eprintln!(
            "{name:14} 4K read {aligned:?} (misaligned buffer {misaligned:?}), 4K write+fdatasync {wsync:?}"
        );
    }
}

#[test]
fn discard_punches_a_file_tier_and_reads_of_it_return_zeros() {
    use std::os::unix::fs::MetadataExt;
    const BLOCK: usize = BLOCK_SIZE as usize;
    let dir = tempdir_in("/var/tmp").expect("tempdir in /var/tmp");
    let path = dir.path().join("tier.img");
    let f = BlockFile::create(&path, 64 * BLOCK_SIZE).unwrap();
    let data = crate::AlignedBuf::from_slice(&[7u8; 16 * BLOCK]);
    f.write_blocks(8, &data).unwrap();
    f.sync().unwrap();
    let held = std::fs::metadata(&path).unwrap().blocks() * 512;
    f.discard(8, 8).unwrap();
    let after = std::fs::metadata(&path).unwrap().blocks() * 512;
    assert!(
        after + 8 * BLOCK_SIZE <= held,
        "the hole gave its space back: {held} -> {after}"
    );
    let mut buf = crate::AlignedBuf::zeroed(16 * BLOCK);
    f.read_blocks(8, &mut buf).unwrap();
    assert!(buf[..8 * BLOCK].iter().all(|&b| b == 0), "discarded blocks");
    assert!(buf[8 * BLOCK..].iter().all(|&b| b == 7), "the rest is kept");
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 64 * BLOCK_SIZE);
    assert_eq!(f.stats().discard_bytes, 8 * BLOCK_SIZE);
    assert_eq!(
        f.discard(60, 8).unwrap_err().kind(),
        io::ErrorKind::InvalidInput,
        "a range past the end"
    );
}
