//! Reads of block-tier data do not hold the inode lock across device I/O
//! (issue 16 point 3), and stay right while the file changes under them:
//! the blocks a reader reads are never freed (and reused) before it is done
//! (`read_pins`).

mod common;
use common::*;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use terrace_media::{FaultBlock, MemBlock, MemMedia};

const KIB: u64 = 1 << 10;

/// A file pinned to the SSD holding `len` bytes of `byte`, written back.
fn ssd_file(fs: &terrace_core::Fs, name: &str, len: u64, byte: u8) -> u64 {
    let ino = file(fs, 1, name);
    fs.setxattr(ino, b"user.terrace.rule", b"ssd", 0).unwrap();
    fs.write(ino, 0, &vec![byte; len as usize]).unwrap();
    fs.fsync(ino, false).unwrap();
    ino
}

#[test]
fn a_reader_does_not_wait_for_another_readers_device_read_of_the_same_file() {
    let ssd = FaultBlock::new(MemBlock::new(64 << 20));
    let (_, ssd, fs) = tiered_pool_on(MemMedia::new(16 << 20), ssd, 64);
    let fs = Arc::new(fs);
    fs.set_setting("dram_cache_bytes", "1M").unwrap();
    let ino = ssd_file(&fs, "db", 4096 * KIB, 5);
    // A small PM part of the same file (an appended 4 KiB, on PM).
    fs.setxattr(ino, b"user.terrace.rule", b"pm", 0).unwrap();
    fs.write(ino, 4096 * KIB, &[6u8; 4096]).unwrap();
    fs.fsync(ino, false).unwrap();
    // Another file pushes the first one's pages out of the DRAM cache.
    ssd_file(&fs, "filler", 4096 * KIB, 9);
    ssd.hold_reads();
    let slow = {
        let fs = fs.clone();
        std::thread::spawn(move || fs.read(ino, 0, 64 * KIB as usize).unwrap())
    };
    let start = Instant::now();
    while ssd.reads_waiting() == 0 {
        assert!(start.elapsed() < Duration::from_secs(10), "no device read");
        std::thread::sleep(Duration::from_millis(1));
    }
    // The device read is in flight; a read of the PM part goes on.
    let (tx, rx) = std::sync::mpsc::channel();
    {
        let fs = fs.clone();
        std::thread::spawn(move || tx.send(fs.read(ino, 4096 * KIB, 4096).unwrap()));
    }
    let fast = rx.recv_timeout(Duration::from_secs(5));
    ssd.release_reads();
    let fast = fast.expect("a read of PM data waited for another reader's device read");
    assert_eq!(fast, vec![6u8; 4096]);
    assert_eq!(slow.join().unwrap(), vec![5u8; 64 * KIB as usize]);
}

#[test]
fn readers_see_whole_rewrites_while_the_file_is_rewritten_truncated_and_freed() {
    // Every rewrite replaces the whole file with one byte value and is
    // written back, so its old SSD blocks are freed and soon reused: a
    // reader that read freed blocks would see a mix of values (or fail a
    // checksum).
    let (_pm, _ssd, fs) = tiered_pool(16 << 20, 64 << 20, 64);
    let fs = Arc::new(fs);
    // A cache of 1 MiB: most reads of the 4 MiB file go to the device, and
    // each rewrite (over half the cache) is written through.
    fs.set_setting("dram_cache_bytes", "1M").unwrap();
    let len = 4096 * KIB;
    let ino = ssd_file(&fs, "f", len, 1);
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..2)
        .map(|r| {
            let (fs, stop, reads) = (fs.clone(), stop.clone(), reads.clone());
            std::thread::spawn(move || {
                let mut k = r as u64;
                while !stop.load(Ordering::Relaxed) {
                    k = (k * 7 + 3) % 64;
                    let data = fs.read(ino, k * 64 * KIB, (64 * KIB) as usize).unwrap();
                    // Empty (truncated) or one value throughout.
                    if let Some(&first) = data.first() {
                        assert!(
                            data.iter().all(|&b| b == first),
                            "a read mixed two versions of the file"
                        );
                    }
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let start = Instant::now();
    let mut v = 1u8;
    while start.elapsed() < Duration::from_secs(2) {
        v = v.wrapping_add(1).max(1);
        if v % 5 == 0 {
            let size = terrace_core::SetAttr {
                size: Some(0),
                ..Default::default()
            };
            fs.setattr(ino, size).unwrap();
        }
        fs.write(ino, 0, &vec![v; len as usize]).unwrap();
        fs.fsync(ino, false).unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().unwrap();
    }
    assert!(reads.load(Ordering::Relaxed) > 100, "too few reads to tell");
    assert_eq!(fs.status().checksum_errors, 0);
}
