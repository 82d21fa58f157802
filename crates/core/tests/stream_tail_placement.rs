//! A stream of `write()`s that are not page-aligned reaches the file system
//! as large pieces and small ones (FUSE cuts a 1 MiB `write()` from an
//! unaligned buffer into 1020 KiB and 4 KiB). The small pieces belong to the
//! stream: once the stream leaves PM, they go down with it, so the file lies
//! on the block tier in long runs. Before, each 4 KiB piece stayed on PM,
//! was migrated on its own, and a file written this way lay on the HDD in
//! runs of 1.3 MiB (a user's report, 2026-12-07).

mod common;
use common::*;

const PIECE: usize = 1020 << 10;
const TAIL: usize = 4 << 10;

#[test]
fn the_small_pieces_of_an_unaligned_stream_go_down_with_it_in_long_runs() {
    let (_pm, _ssd, fs) = tiered_pool(16 << 20, 256 << 20, 64);
    let ino = file(&fs, 1, "stream");
    let mut data = Vec::new();
    let mut off = 0u64;
    for k in 0..64u64 {
        let piece = pattern(k, PIECE);
        let tail = pattern(1000 + k, TAIL);
        fs.write(ino, off, &piece).unwrap();
        fs.write(ino, off + PIECE as u64, &tail).unwrap();
        off += (PIECE + TAIL) as u64;
        data.extend_from_slice(&piece);
        data.extend_from_slice(&tail);
    }
    fs.fsync(ino, false).unwrap();
    let (runs, bytes) = fs.runs_on_tier(ino, 1).unwrap();
    let on_pm = tier_bytes(&fs, ino, "pm");
    let pm_pieces = extents(&fs, ino)
        .into_iter()
        .filter(|e| e.2 == "pm" && e.1 == TAIL as u64)
        .count();
    assert!(bytes > 32 << 20, "the stream did not leave PM: {bytes} on the SSD");
    // The tails written after the stream left PM went with it.
    assert!(
        pm_pieces <= 20 && runs * (4 << 20) <= bytes,
        "{pm_pieces} 4 KiB pieces on PM ({on_pm} bytes there); {runs} runs for {bytes} bytes \
         on the SSD"
    );
    // All of it on the block tier: in a few long runs, not one per write.
    fs.migrate_file(ino, 1).unwrap();
    let (runs, bytes) = fs.runs_on_tier(ino, 1).unwrap();
    assert_eq!(bytes, data.len() as u64);
    assert!(runs <= 8, "{runs} runs on the SSD after the file moved down whole");
    assert_eq!(content(&fs, ino), data);
    fs.unmount().unwrap();
}
