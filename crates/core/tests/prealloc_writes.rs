//! Writes into preallocated space never fail for room (POSIX
//! `posix_fallocate`: "subsequent writes to the range shall not fail for
//! lack of free space"; xfstests generic/274). Data is copy-on-write, so on
//! a pool with no room left a write over preallocated zeros goes into the
//! preallocated blocks themselves (design.md §5i, "Writes into preallocated
//! space"), and a crash at any moment of it leaves the range as it was or
//! as written, never torn.

mod common;
use common::*;
use std::sync::Arc;
use terrace_core::{FallocateMode, Fs};
use terrace_media::{BlockLoss, BlockMedia, LossMode, MemBlock, MemMedia};

const PM: u64 = 16 << 20;
const SSD: u64 = 48 << 20;
const CHUNK: u64 = 64 << 10;

/// Fills the pool: 1 MiB writes, then 4 KiB writes, each file fsync'd,
/// until ENOSPC. Returns the files written and their contents.
fn fill_pool(fs: &Fs) -> Vec<(u64, Vec<u8>)> {
    let mut files = Vec::new();
    for (k, size) in [(0u64, 1usize << 20), (1, 4096)] {
        let ino = file(fs, 1, &format!("fill{k}"));
        let mut data = Vec::new();
        loop {
            let chunk = pattern(data.len() as u64 + k, size);
            match fs.write(ino, data.len() as u64, &chunk) {
                Ok(_) => data.extend_from_slice(&chunk),
                Err(e) => {
                    assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "filling: {e}");
                    break;
                }
            }
            if data.len() % (4 << 20) == 0 {
                fs.fsync(ino, false).unwrap();
            }
        }
        fs.fsync(ino, false)
            .unwrap_or_else(|e| panic!("fsync of a filler: {e}"));
        files.push((ino, data));
    }
    files
}

/// A file holding 64 KiB of data and `prealloc` bytes preallocated after
/// it, past its end (`falloc -k`, as generic/274 does).
fn preallocated(fs: &Fs, name: &str, prealloc: u64) -> (u64, Vec<u8>) {
    let ino = file_holding(fs, name, &pattern(7, CHUNK as usize));
    fs.fallocate(ino, CHUNK, prealloc, FallocateMode::AllocateKeepSize)
        .unwrap_or_else(|e| panic!("fallocate {name}: {e}"));
    fs.fsync(ino, false).unwrap();
    (ino, pattern(7, CHUNK as usize))
}

/// Writes 64 KiB chunks of `seed` data over `[CHUNK, CHUNK + prealloc)`:
/// the odd chunks first, then the even ones (generic/274's fragmenting
/// order); every write must succeed. Returns the file's content after.
fn fill_preallocation(fs: &Fs, ino: u64, head: &[u8], prealloc: u64, seed: u64) -> Vec<u8> {
    let chunks = prealloc / CHUNK;
    let mut want = head.to_vec();
    want.resize((CHUNK + prealloc) as usize, 0);
    for first in [1u64, 0] {
        for k in (first..chunks).step_by(2) {
            let at = CHUNK + k * CHUNK;
            let data = pattern(seed + k, CHUNK as usize);
            fs.write(ino, at, &data)
                .unwrap_or_else(|e| panic!("write of chunk {k} into preallocated space: {e}"));
            want[at as usize..(at + CHUNK) as usize].copy_from_slice(&data);
        }
    }
    want
}

/// Unmounts `fs`, checks the pool with its data (fsck `--data`), mounts it
/// again and checks the allocator and `files`.
fn remount_and_check(pm: Arc<MemMedia>, ssd: Arc<MemBlock>, fs: Fs, files: &[(u64, Vec<u8>)]) {
    fs.unmount().unwrap();
    drop(fs);
    assert_fsck_clean(&*pm, Some(ssd.clone()), Fsck::Data, "after unmount");
    let fs = mount_tiered(pm, ssd);
    fs.check_allocator().unwrap();
    assert_files(&fs, files, "after a remount");
    fs.unmount().unwrap();
}

#[test]
fn writes_into_preallocated_space_succeed_on_a_full_pool() {
    let (pm, ssd, fs) = tiered_pool(PM, SSD, 64);
    // A large preallocation goes to the SSD, a small one stays on PM.
    let (big, big_head) = preallocated(&fs, "big", 4 << 20);
    let (small, small_head) = preallocated(&fs, "small", CHUNK);
    assert!(
        tier_bytes(&fs, big, "ssd") >= 4 << 20,
        "{:?}",
        extents(&fs, big)
    );
    assert!(
        tier_bytes(&fs, small, "pm") >= CHUNK,
        "{:?}",
        extents(&fs, small)
    );
    let fillers = fill_pool(&fs);
    let big_want = fill_preallocation(&fs, big, &big_head, 4 << 20, 100);
    let small_want = fill_preallocation(&fs, small, &small_head, CHUNK, 200);
    fs.fsync(big, false).unwrap();
    fs.fsync(small, false).unwrap();
    assert!(
        fs.status().prealloc_in_place_writes > 0,
        "a full pool wrote the preallocated space in place"
    );
    let mut files = fillers;
    files.push((big, big_want));
    files.push((small, small_want));
    assert_files(&fs, &files, "after writing the preallocated space");
    remount_and_check(pm, ssd, fs, &files);
}

#[test]
fn writes_into_preallocated_space_with_room_left_are_copy_on_write_as_before() {
    let (_, _, fs) = tiered_pool(PM, SSD, 64);
    let (big, head) = preallocated(&fs, "big", 1 << 20);
    let want = fill_preallocation(&fs, big, &head, 1 << 20, 300);
    assert_eq!(fs.status().prealloc_in_place_writes, 0);
    assert_files(&fs, &[(big, want)], "with room");
    fs.unmount().unwrap();
}

/// A crash at every PM crash point of one write into preallocated space on
/// a full pool (and the device blocks of the same moment) recovers clean,
/// checksums included, with the range as it was (zeros) or as written.
fn crash_points_keep_the_range_before_or_after(tier: &str, prealloc: u64) {
    let (pm, ssd, fs) = crash_pool(PM, SSD, 64);
    let (ino, head) = preallocated(&fs, "f", prealloc);
    assert!(
        tier_bytes(&fs, ino, tier) >= prealloc,
        "{:?}",
        extents(&fs, ino)
    );
    fill_pool(&fs);
    // Half-block ends: the in-place write keeps the zeros around it.
    let at = CHUNK + CHUNK / 2 + 512;
    let data = pattern(9, 3 * 4096);
    let before = content(&fs, ino);
    let (r, trace) = pm.trace(|| fs.write(ino, at, &data));
    r.expect("a write into preallocated space on a full pool");
    assert!(fs.status().prealloc_in_place_writes > 0, "written in place");
    let mut after = before.clone();
    after.resize(before.len().max(at as usize + data.len()), 0);
    after[at as usize..at as usize + data.len()].copy_from_slice(&data);
    assert_eq!(content(&fs, ino), after);
    let n = trace.len();
    assert!(n > 2, "the write made PM crash points ({n})");
    // Each crash point twice: every unflushed PM line and unsynced device
    // block lost, then a random part of them kept (a torn data write).
    let points = (0..=n).flat_map(|k| [(k, None), (k, Some(k as u64 + 1))]);
    for (k, seed) in points {
        let ctx = format!("{tier}: crash at {k}/{n} (random part kept: {seed:?})");
        let (pm_loss, ssd_loss) = match seed {
            None => (LossMode::AllUnflushed, BlockLoss::AllUnsynced),
            Some(s) => (LossMode::RandomLines(s), BlockLoss::RandomBlocks(s)),
        };
        let pm_img = trace.image_at(k, pm_loss);
        let ssd_img = ssd.image_at_time(trace.time_after(k), ssd_loss);
        let (_, crashed) = recover(pm_img, Some(ssd_img), Fsck::Data, &ctx);
        let got = content(&crashed, ino);
        assert!(
            got == before || got == after,
            "{ctx}: the range is neither as it was nor as written"
        );
        assert_eq!(&got[..head.len()], &head[..], "{ctx}: the head");
        if k == n {
            assert!(got == after, "{ctx}: the acknowledged write is lost");
        }
        crashed.unmount().unwrap();
    }
    fs.unmount().unwrap();
}

#[test]
fn a_crash_during_a_write_into_preallocated_ssd_blocks_leaves_it_whole_or_undone() {
    crash_points_keep_the_range_before_or_after("ssd", 1 << 20);
}

#[test]
fn a_crash_during_a_write_into_preallocated_pm_blocks_leaves_it_whole_or_undone() {
    crash_points_keep_the_range_before_or_after("pm", CHUNK);
}

#[test]
fn readers_scrub_and_migration_beside_writes_into_preallocated_space_see_no_torn_or_damaged_data() {
    let (pm, ssd, fs) = tiered_pool(PM, SSD, 64);
    let prealloc = 4u64 << 20;
    let (ino, head) = preallocated(&fs, "big", prealloc);
    fill_pool(&fs);
    let done = std::sync::atomic::AtomicBool::new(false);
    let stop = || done.load(std::sync::atomic::Ordering::Relaxed);
    let chunks = prealloc / CHUNK;
    let want = std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut reads = 0u64;
            while !stop() {
                for k in (0..chunks).rev() {
                    let got = fs.read(ino, CHUNK + k * CHUNK, CHUNK as usize).unwrap();
                    // Past the end of the file yet, or a whole write.
                    assert!(
                        got.is_empty()
                            || got.iter().all(|&b| b == 0)
                            || got == pattern(500 + k, CHUNK as usize),
                        "chunk {k} read torn"
                    );
                    reads += 1;
                }
            }
            reads
        });
        let scrubber = s.spawn(|| {
            let mut passes = 0u64;
            while !stop() {
                let r = fs.scrub(0, false);
                assert_eq!(r.bad_blocks, 0, "scrub found damage: {:?}", r.unrepairable);
                passes += 1;
            }
            passes
        });
        let migrator = s.spawn(|| {
            while !stop() {
                fs.migration_pass();
                std::thread::yield_now();
            }
        });
        let want = fill_preallocation(&fs, ino, &head, prealloc, 500);
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(reader.join().unwrap() > 0);
        assert!(scrubber.join().unwrap() > 0);
        migrator.join().unwrap();
        want
    });
    let st = fs.status();
    assert!(st.prealloc_in_place_writes > 0, "written in place");
    assert_eq!(st.checksum_errors, 0, "no read found damage");
    let files = [(ino, want)];
    assert_files(&fs, &files, "after the writes");
    remount_and_check(pm, ssd, fs, &files);
}

/// Memory media that holds one read of block `pause_at` after reading it,
/// until the test lets it go (`go`), telling the test it got there
/// (`reached`).
struct PausingRead {
    inner: terrace_media::MemBlock,
    pause_at: std::sync::atomic::AtomicU64,
    reached: std::sync::Mutex<std::sync::mpsc::Sender<()>>,
    go: std::sync::Mutex<std::sync::mpsc::Receiver<()>>,
}

impl Hooks for PausingRead {
    fn inner(&self) -> &dyn terrace_media::BlockMedia {
        &self.inner
    }
    fn read_blocks(&self, block: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.inner.read_blocks(block, buf)?;
        let at = self.pause_at.load(std::sync::atomic::Ordering::SeqCst);
        let n = buf.len() as u64 / 4096;
        if (block..block + n).contains(&at)
            && self
                .pause_at
                .compare_exchange(
                    at,
                    u64::MAX,
                    std::sync::atomic::Ordering::SeqCst,
                    std::sync::atomic::Ordering::SeqCst,
                )
                .is_ok()
        {
            self.reached.lock().unwrap().send(()).unwrap();
            let _ = self
                .go
                .lock()
                .unwrap()
                .recv_timeout(std::time::Duration::from_secs(10));
        }
        Ok(())
    }
}

#[test]
fn a_reader_of_preallocated_blocks_finishes_before_they_are_written_in_place() {
    use std::sync::mpsc::channel;
    let (reached_tx, reached) = channel();
    let (go, go_rx) = channel();
    let media = Hooked(PausingRead {
        inner: terrace_media::MemBlock::new(SSD),
        pause_at: u64::MAX.into(),
        reached: reached_tx.into(),
        go: go_rx.into(),
    });
    let (_, ssd, fs) = tiered_pool_on(MemMedia::new(PM), media, 64);
    let prealloc = 1u64 << 20;
    let (ino, _) = preallocated(&fs, "f", prealloc);
    // The preallocation is inside the file, so a read reaches its blocks.
    fs.write(ino, CHUNK + prealloc, &[1u8; 4096]).unwrap();
    fs.fsync(ino, false).unwrap();
    fill_pool(&fs);
    let (_, _, _, block) = extents(&fs, ino)
        .into_iter()
        .find(|e| e.0 == CHUNK && e.2 == "ssd")
        .expect("the preallocated extent on the SSD");
    let data = pattern(11, CHUNK as usize);
    std::thread::scope(|s| {
        // A reader captures the preallocated zeros and reads them from the
        // device with the file unlocked, held there by the media.
        ssd.pause_at
            .store(block, std::sync::atomic::Ordering::SeqCst);
        let reader = s.spawn(|| fs.read(ino, CHUNK, CHUNK as usize));
        reached
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("the reader reached the device");
        // A write into the same blocks meanwhile (no room: in place).
        let writer = s.spawn(|| fs.write(ino, CHUNK, &data));
        std::thread::sleep(std::time::Duration::from_millis(300));
        go.send(()).unwrap();
        let got = reader.join().unwrap().expect("the read");
        assert!(
            got.iter().all(|&b| b == 0),
            "the read is of before the write"
        );
        writer
            .join()
            .unwrap()
            .expect("the write into preallocated space");
    });
    assert!(fs.status().prealloc_in_place_writes > 0, "written in place");
    // What the reader cached of the blocks is not served after the write.
    assert_eq!(fs.read(ino, CHUNK, CHUNK as usize).unwrap(), data);
    assert_eq!(fs.status().checksum_errors, 0);
    fs.unmount().unwrap();
}

#[test]
fn preallocated_blocks_a_clone_shares_are_never_written_in_place() {
    let (_, _, fs) = tiered_pool(PM, SSD, 64);
    let src = file_holding(&fs, "src", &pattern(7, CHUNK as usize));
    let len = CHUNK + (1 << 20);
    fs.fallocate(src, CHUNK, 1 << 20, FallocateMode::Allocate)
        .unwrap();
    let dst = file(&fs, 1, "dst");
    assert_eq!(fs.copy_range(src, 0, dst, 0, len).unwrap(), len);
    let (src_before, dst_before) = (content(&fs, src), content(&fs, dst));
    fill_pool(&fs);
    // The source's blocks are shared with the clone, whichever entry
    // carries the shared flag: no write goes into them.
    for ino in [src, dst] {
        let e = fs
            .write(ino, CHUNK, &pattern(13, CHUNK as usize))
            .expect_err("a write over shared blocks of a full pool");
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
    }
    assert_eq!(fs.status().prealloc_in_place_writes, 0);
    assert_eq!(content(&fs, src), src_before);
    assert_eq!(content(&fs, dst), dst_before);
    fs.unmount().unwrap();
}
