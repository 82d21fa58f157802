//! The DRAM page cache in front of the block tiers: bounded, merging
//! write-back, reads through the cache, fsync semantics, crashes and device
//! errors.

mod common;
use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use terrace_core::Fs;
use terrace_media::{BlockMedia, FaultBlock, MemBlock, MemMedia};

const SSD: u64 = 96 << 20;

/// Fills PM with a file `filler` (pm-only placement, until a write
/// overflows), then places new data on the block tiers first: a write-back
/// that fails there has no PM to fall back on.
fn fill_pm(fs: &Fs) {
    fs.set_setting("placement_policy", "pm-only").unwrap();
    let filler = file(fs, 1, "filler");
    let mut off = 0;
    while fs.status().placement_overflows == 0 {
        fs.write(filler, off, &[7u8; 65536]).unwrap();
        off += 65536;
    }
    fs.fsync(filler, false).unwrap();
    block_first(fs);
}

#[test]
fn the_cache_never_exceeds_its_bound_under_a_workload_four_times_larger() {
    let (pm, ssd, fs) = tiered_pool(4 << 20, SSD, 64);
    let fs = Arc::new(fs);
    fs.set_setting("dram_cache_bytes", "4M").unwrap();
    fs.start_writeback();
    // Two writers (sequential appends; the PM tier fills after ~3 MiB), and
    // re-reads of what was written, all while write-back runs.
    let writers: Vec<_> = (0..2u64)
        .map(|w| {
            let fs = fs.clone();
            std::thread::spawn(move || {
                let name = format!("f{w}");
                let a = fs
                    .mknod(1, name.as_bytes(), libc::S_IFREG | 0o644, 0, CTX)
                    .unwrap();
                let data = pattern(w, 8 << 20);
                for (k, chunk) in data.chunks(256 << 10).enumerate() {
                    fs.write(a.ino, (k as u64) << 18, chunk).unwrap();
                    let back = fs.read(a.ino, 0, (k + 1) << 18).unwrap();
                    assert!(back == data[..(k + 1) << 18], "writer {w} chunk {k}");
                }
                (a.ino, data)
            })
        })
        .collect();
    let files: Vec<(u64, Vec<u8>)> = writers.into_iter().map(|h| h.join().unwrap()).collect();
    let st = fs.status();
    assert_eq!(st.cache.bound_bytes, 4 << 20);
    assert!(
        st.cache.peak_bytes <= 4 << 20,
        "cache reached {} bytes, bound 4M",
        st.cache.peak_bytes
    );
    assert!(st.cache.writebacks > 0, "nothing was written back");
    assert!(st.tiers[1].used > 0);
    fs.unmount().unwrap();
    drop(fs);
    let fs = mount_tiered(pm.clone(), ssd.clone());
    for (ino, data) in files {
        assert!(fs.read(ino, 0, data.len()).unwrap() == data);
    }
    fs.check_allocator().unwrap();
}

#[test]
fn write_back_merges_adjacent_pages_into_large_sequential_requests() {
    let (_, ssd, fs) = tiered_pool(16 << 20, SSD, 64);
    block_first(&fs);
    let a = file(&fs, 1, "seq");
    let data = pattern(7, 16 << 20);
    for (k, chunk) in data.chunks(64 << 10).enumerate() {
        fs.write(a, (k as u64) << 16, chunk).unwrap();
    }
    let before = ssd.stats();
    fs.fsync(a, false).unwrap();
    let after = ssd.stats();
    let reqs = after.write_requests - before.write_requests;
    let bytes = after.write_bytes - before.write_bytes;
    assert_eq!(bytes, 16 << 20);
    assert!(
        bytes / reqs >= 512 << 10,
        "{reqs} requests for 256 writes of 64 KiB: average {} bytes",
        bytes / reqs
    );
    assert!(fs.read(a, 0, data.len()).unwrap() == data);
}

#[test]
fn random_asynchronous_overwrites_reach_the_ssd_as_large_requests() {
    // PM holds about a quarter of the file; the rest lives on the SSD, and
    // random 4 KiB rewrites of it are gathered by the cache.
    let (pm, ssd, fs) = tiered_pool(4 << 20, SSD, 64);
    fs.set_setting("dram_cache_bytes", "8M").unwrap();
    let a = file(&fs, 1, "rand");
    let mut expect = pattern(3, 16 << 20);
    for (k, chunk) in expect.chunks(1 << 20).enumerate() {
        fs.write(a, (k as u64) << 20, chunk).unwrap();
    }
    fs.fsync(a, false).unwrap();
    let before = ssd.stats();
    let mut rng = StdRng::seed_from_u64(11);
    for _ in 0..4000 {
        let page = rng.gen_range(0..(16u64 << 20) / 4096);
        let v = vec![rng.gen::<u8>(); 4096];
        fs.write(a, page * 4096, &v).unwrap();
        expect[(page * 4096) as usize..(page * 4096 + 4096) as usize].copy_from_slice(&v);
    }
    fs.fsync(a, false).unwrap();
    let after = ssd.stats();
    let reqs = after.write_requests - before.write_requests;
    let bytes = after.write_bytes - before.write_bytes;
    assert!(reqs > 0, "no rewrite reached the SSD");
    assert!(
        bytes / reqs >= 64 << 10,
        "{reqs} requests, average {} bytes: random writes were not gathered",
        bytes / reqs
    );
    assert!(fs.read(a, 0, expect.len()).unwrap() == expect);
    fs.unmount().unwrap();
    drop(fs);
    let fs = mount_tiered(pm, ssd);
    assert!(fs.read(a, 0, expect.len()).unwrap() == expect);
    fs.check_allocator().unwrap();
}

#[test]
fn reads_of_ssd_data_miss_once_per_read_unit_then_hit() {
    let (pm, ssd, fs) = tiered_pool(16 << 20, SSD, 64);
    block_first(&fs);
    let a = file(&fs, 1, "r");
    let data = pattern(5, 4 << 20);
    fs.write(a, 0, &data[..1 << 20]).unwrap();
    fs.write(a, 1 << 20, &data[1 << 20..]).unwrap();
    fs.unmount().unwrap();
    drop(fs);
    let fs = mount_tiered(pm, ssd.clone());
    fs.set_setting("max_read_unit_bytes", "256K").unwrap();
    let reads0 = ssd.stats().read_requests;
    for k in 0..256u64 {
        let got = fs.read(a, k * 4096, 4096).unwrap();
        assert!(got[..] == data[(k * 4096) as usize..(k * 4096 + 4096) as usize]);
    }
    let st = fs.status();
    let dev_reads = ssd.stats().read_requests - reads0;
    assert_eq!(dev_reads, 4, "1 MiB in 256 KiB read units");
    assert_eq!(st.cache.misses, 256);
    assert_eq!(st.cache.hits, 256 - 4);
}

#[test]
fn random_reads_of_ssd_data_read_only_the_blocks_asked_for() {
    let (pm, ssd, fs) = tiered_pool(16 << 20, SSD, 64);
    block_first(&fs);
    let a = file(&fs, 1, "r");
    let data = pattern(6, 8 << 20);
    for (k, c) in data.chunks(1 << 20).enumerate() {
        fs.write(a, (k as u64) << 20, c).unwrap();
    }
    fs.unmount().unwrap();
    drop(fs);
    let fs = mount_tiered(pm, ssd.clone());
    // A small read unit: the warm-up's read-ahead then caches at most 64 × 4
    // of the file's 2,048 blocks, so most measured reads must miss whatever
    // the seed (with 256K units the warm-up could cache most of the file).
    fs.set_setting("max_read_unit_bytes", "16K").unwrap();
    let mut rng = StdRng::seed_from_u64(base_seed("random read unit test"));
    let blocks = (8 << 20) / 4096u64;
    let mut read_one = |fs: &Fs| {
        let k = rng.gen_range(0..blocks);
        let got = fs.read(a, k * 4096, 4096).unwrap();
        assert!(got[..] == data[(k * 4096) as usize..(k * 4096 + 4096) as usize]);
    };
    // Until the file's access class says "random", misses read ahead.
    for _ in 0..64 {
        read_one(&fs);
    }
    let before = ssd.stats();
    for _ in 0..200 {
        read_one(&fs);
    }
    let after = ssd.stats();
    let requests = after.read_requests - before.read_requests;
    assert!(requests > 100, "only {requests} of 200 random reads missed");
    assert_eq!(
        after.read_bytes - before.read_bytes,
        requests * 4096,
        "random reads read ahead"
    );
    assert_eq!(after.max_read_bytes, 16 << 10, "the first reads read ahead");
}

#[test]
fn after_a_crash_each_file_shows_its_fsynced_writes_and_a_prefix_of_the_rest() {
    let base = base_seed("dram cache crash test");
    for k in 0..40 {
        let seed = base.wrapping_add(k);
        let mut rng = StdRng::seed_from_u64(seed);
        let (pm, ssd, fs) = tiered_pool(4 << 20, SSD, 64);
        block_first(&fs);
        fs.set_setting("dram_cache_bytes", "2M").unwrap();
        // Odd seeds: asynchronous files, more writes and fewer syncs, so
        // writes stay cached until cache pressure writes them back in parts
        // (the oldest writes of a file first, each write whole).
        let (ops, choices) = if k % 2 == 1 {
            fs.set_setting("sync_threshold_bytes", "0").unwrap();
            fs.set_setting("dram_cache_bytes", "1M").unwrap();
            (rng.gen_range(20..150), 40)
        } else {
            (rng.gen_range(5..60), 10)
        };
        let mut files = Vec::new();
        for f in 0..3u8 {
            let a = fs
                .mknod(1, &[b'f', b'0' + f], libc::S_IFREG | 0o644, 0, CTX)
                .unwrap();
            // Contents after each write; how many writes an fsync covered.
            files.push((a.ino, vec![Vec::<u8>::new()], 0usize));
        }
        for _ in 0..ops {
            let f = rng.gen_range(0..files.len());
            let (ino, states, synced) = &mut files[f];
            match rng.gen_range(0..choices) {
                0 => {
                    fs.fsync(*ino, false).unwrap();
                    *synced = states.len() - 1;
                }
                1 => fs.flush_all().unwrap(),
                _ => {
                    let mut now = states.last().unwrap().clone();
                    let off = rng.gen_range(0..now.len() as u64 + 100_000);
                    let len = rng.gen_range(1..200_000usize);
                    let buf = vec![rng.gen::<u8>() | 1; len];
                    fs.write(*ino, off, &buf).unwrap();
                    if now.len() < off as usize + len {
                        now.resize(off as usize + len, 0);
                    }
                    now[off as usize..off as usize + len].copy_from_slice(&buf);
                    states.push(now);
                }
            }
        }
        // Crash: the daemon dies; the dirty pages in DRAM die with it.
        drop(fs);
        let fs = mount_tiered(pm.clone(), ssd.clone());
        for (ino, states, synced) in &files {
            let size = fs.getattr(*ino).unwrap().size as usize;
            let got = fs.read(*ino, 0, size).unwrap();
            let k = states.iter().rposition(|s| *s == got);
            match k {
                Some(k) => assert!(
                    k >= *synced,
                    "seed {seed}: inode {ino} lost fsynced writes ({k} < {synced})"
                ),
                None => panic!("seed {seed}: inode {ino} holds no prefix of its writes"),
            }
        }
        fs.check_allocator()
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    }
}

#[test]
fn a_failing_ssd_makes_write_back_retry_on_pm_or_fail_fsync_with_eio() {
    let (pm, ssd, fs) = tiered_pool_on(
        MemMedia::new(4 << 20),
        FaultBlock::new(MemBlock::new(SSD)),
        64,
    );
    block_first(&fs);
    let a = file(&fs, 1, "f");
    let old = pattern(1, 4 << 20);
    fs.write(a, 0, &old[..2 << 20]).unwrap();
    fs.write(a, 2 << 20, &old[2 << 20..]).unwrap();
    fs.fsync(a, false).unwrap();
    let mut expect = old.clone();

    // PM has room: write-back fails on the SSD and lands on PM instead.
    ssd.fail_writes_after(0);
    let new = pattern(2, 256 << 10);
    fs.write(a, 0, &new).unwrap();
    fs.fsync(a, false).unwrap();
    expect[..256 << 10].copy_from_slice(&new);
    assert!(fs.read(a, 0, 4 << 20).unwrap() == expect);

    // Fill PM (with the SSD healthy), then fail the SSD again.
    ssd.heal();
    fill_pm(&fs);
    ssd.fail_writes_after(0);
    let new = pattern(3, 1 << 20);
    // The write goes to the cache and succeeds...
    fs.write(a, 1 << 20, &new).unwrap();
    // ...its write-back fails everywhere: fsync reports EIO, as often as asked.
    for _ in 0..2 {
        let e = fs.fsync(a, false).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EIO));
    }
    expect[1 << 20..2 << 20].copy_from_slice(&new);
    assert!(fs.read(a, 0, 4 << 20).unwrap() == expect, "dirty data lost");
    fs.check_allocator().unwrap();
    ssd.heal();
    fs.fsync(a, false).unwrap();
    fs.unmount().unwrap();
    drop(fs);
    assert_fsck_clean(&*pm, Some(ssd.clone()), Fsck::Metadata, "after unmount");
    let fs = mount_tiered(pm, ssd);
    assert!(fs.read(a, 0, 4 << 20).unwrap() == expect);
}

#[test]
fn truncate_and_pm_writes_after_cached_writes_keep_write_order() {
    let (pm, ssd, fs) = tiered_pool(16 << 20, SSD, 64);
    block_first(&fs);
    let a = fs.mknod(1, b"t", libc::S_IFREG | 0o644, 0, CTX).unwrap();
    fs.write(a.ino, 0, &vec![1u8; 300_000]).unwrap();
    assert_eq!(fs.getattr(a.ino).unwrap().size, 300_000);
    fs.setattr(
        a.ino,
        terrace_core::SetAttr {
            size: Some(100_000),
            ..Default::default()
        },
    )
    .unwrap();
    fs.set_setting("placement_policy", "pm-only").unwrap();
    fs.write(a.ino, 50_000, &[2u8; 10]).unwrap();
    let mut expect = vec![1u8; 100_000];
    expect[50_000..50_010].copy_from_slice(&[2u8; 10]);
    assert!(fs.read(a.ino, 0, 200_000).unwrap() == expect);
    // Without an unmount (a crash), the same state: nothing was left cached.
    drop(fs);
    let fs = mount_tiered(pm, ssd);
    assert!(fs.read(a.ino, 0, 200_000).unwrap() == expect);
}

#[test]
fn lowering_the_bound_at_run_time_shrinks_the_cache() {
    let (_, _, fs) = tiered_pool(16 << 20, SSD, 64);
    block_first(&fs);
    write_file(&fs, "s", &pattern(9, 8 << 20));
    assert!(fs.status().cache.clean_bytes >= 4 << 20);
    fs.set_setting("dram_cache_bytes", "1M").unwrap();
    let st = fs.status().cache;
    assert!(st.clean_bytes + st.dirty_bytes <= 1 << 20, "{st:?}");
    assert!(fs.set_setting("dram_cache_bytes", "100K").is_err());
}

#[test]
fn a_full_pool_refuses_cached_writes_with_enospc_and_keeps_every_accepted_byte() {
    let (pm, ssd, fs) = tiered_pool(4 << 20, SSD, 64);
    // A cache larger than the room left on the SSD: without a reservation
    // per dirty page it would accept writes the pool cannot hold.
    fs.set_setting("dram_cache_bytes", "256M").unwrap();
    let st = fs.statfs();
    assert!(
        st.blocks * 4096 >= (4 << 20) + SSD - (4 << 20),
        "statfs counts every tier: {} blocks",
        st.blocks
    );
    let mut files: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut refused = None;
    'fill: for f in 0..8u64 {
        let a = fs
            .mknod(1, format!("f{f}").as_bytes(), libc::S_IFREG | 0o644, 0, CTX)
            .unwrap();
        let mut data = Vec::new();
        for k in 0..32u64 {
            let chunk = pattern(f * 100 + k, 1 << 20);
            match fs.write(a.ino, data.len() as u64, &chunk) {
                Ok(n) => {
                    assert_eq!(n, chunk.len());
                    data.extend_from_slice(&chunk);
                }
                Err(e) => {
                    refused = Some(e);
                    files.push((a.ino, data));
                    break 'fill;
                }
            }
        }
        files.push((a.ino, data));
    }
    let e = refused.expect("8 x 32 MiB cannot fit in a 100 MiB pool");
    assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
    let accepted: usize = files.iter().map(|(_, d)| d.len()).sum();
    assert!(accepted > 64 << 20, "the pool took only {accepted} bytes");
    assert!(
        fs.statfs().bavail * 4096 < 2 << 20,
        "statfs still shows room"
    );
    // Everything write() accepted can be made durable.
    for (ino, _) in &files {
        fs.fsync(*ino, false)
            .unwrap_or_else(|e| panic!("fsync of inode {ino} after ENOSPC: {e}"));
    }
    assert_eq!(fs.cache().stats().dirty_bytes, 0);
    for (ino, data) in &files {
        assert!(
            fs.read(*ino, 0, data.len() + 1).unwrap() == *data,
            "inode {ino}"
        );
    }
    fs.check_allocator().unwrap();
    fs.unmount().unwrap();
    drop(fs);
    let fs = mount_tiered(pm.clone(), ssd.clone());
    for (ino, data) in &files {
        assert!(
            fs.read(*ino, 0, data.len() + 1).unwrap() == *data,
            "inode {ino} after remount"
        );
    }
    fs.check_allocator().unwrap();
}

#[test]
fn writes_fill_a_tiered_pool_to_the_last_megabyte_even_when_no_single_tier_has_room() {
    let (pm, ssd, fs) = tiered_pool(4 << 20, SSD, 64);
    // 1 MiB writes bypass a 1 MiB cache: each is written through, to one
    // tier when one has room, else spread over PM and the SSD.
    fs.set_setting("dram_cache_bytes", "1M").unwrap();
    let a = file(&fs, 1, "fill");
    let mut data = Vec::new();
    let err = loop {
        let chunk = pattern(data.len() as u64, 1 << 20);
        match fs.write(a, data.len() as u64, &chunk) {
            Ok(_) => data.extend_from_slice(&chunk),
            Err(e) => break e,
        }
        assert!(data.len() < 200 << 20, "the pool never filled");
    };
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC));
    let left = fs.statfs().bavail * 4096;
    assert!(
        left < 1 << 20,
        "ENOSPC with {left} bytes of room left (split over the tiers)"
    );
    fs.fsync(a, false).unwrap();
    assert!(fs.read(a, 0, data.len() + 1).unwrap() == data);
    fs.check_allocator().unwrap();
    fs.unmount().unwrap();
    drop(fs);
    let fs = mount_tiered(pm.clone(), ssd.clone());
    assert!(fs.read(a, 0, data.len() + 1).unwrap() == data);
    fs.check_allocator().unwrap();
}

#[test]
fn fallocate_larger_than_pm_takes_blocks_from_every_tier_and_reads_zeros() {
    let (pm, ssd, fs) = tiered_pool(4 << 20, SSD, 64);
    let a = file(&fs, 1, "prealloc");
    let len = 12u64 << 20;
    fs.fallocate(a, 0, len, terrace_core::FallocateMode::Allocate)
        .unwrap();
    assert_eq!(fs.getattr(a).unwrap().size, len);
    assert!(tier_bytes(&fs, a, "ssd") > 0, "nothing beyond PM");
    assert!(fs.read(a, 0, len as usize).unwrap().iter().all(|&b| b == 0));
    fs.check_allocator().unwrap();
    fs.unmount().unwrap();
    drop(fs);
    let fs = mount_tiered(pm.clone(), ssd.clone());
    assert_eq!(fs.getattr(a).unwrap().size, len);
    fs.check_allocator().unwrap();
}

#[test]
fn fsync_waits_for_a_move_in_flight_instead_of_failing_with_enospc() {
    // Dirty cached pages hold room for their blocks. A move from PM to the
    // SSD takes SSD blocks before it frees its PM blocks (at its commit):
    // for that while the pool has less free space than the dirty pages
    // were promised, and a write-back then must wait for the move, not
    // fail an fsync with ENOSPC.
    let ssd = FaultBlock::new(MemBlock::new(16 << 20));
    let (_, ssd, fs) = tiered_pool_on(MemMedia::new(8 << 20), ssd, 64);
    let fs = Arc::new(fs);
    let cold = fs.mknod(1, b"cold", libc::S_IFREG | 0o644, 0, CTX).unwrap();
    let cold_data = pattern(1, 2 << 20);
    fs.write(cold.ino, 0, &cold_data).unwrap();
    fs.fsync(cold.ino, false).unwrap();
    assert_eq!(tier_bytes(&fs, cold.ino, "pm"), 2 << 20);
    // A file pinned to the SSD fills the pool with dirty cached pages.
    let hot = fs.mknod(1, b"hot", libc::S_IFREG | 0o644, 0, CTX).unwrap();
    fs.setxattr(hot.ino, b"user.terrace.rule", b"ssd", 0)
        .unwrap();
    let mut hot_data = Vec::new();
    let err = loop {
        let chunk = pattern(2 + hot_data.len() as u64, 256 << 10);
        match fs.write(hot.ino, hot_data.len() as u64, &chunk) {
            Ok(_) => hot_data.extend_from_slice(&chunk),
            Err(e) => break e,
        }
        assert!(hot_data.len() < 64 << 20, "the pool never filled");
    };
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC));
    assert!(
        fs.cache().stats().dirty_bytes > 4 << 20,
        "the writes were not cached: {:?}",
        fs.cache().stats()
    );
    // Move the cold file to the SSD, and keep the move in flight (its
    // sync held) while the hot file is synced.
    ssd.hold_syncs();
    let mover = {
        let fs = fs.clone();
        std::thread::spawn(move || fs.migrate_file(cold.ino, 1))
    };
    let start = std::time::Instant::now();
    while ssd.syncs_waiting() == 0 {
        assert!(start.elapsed().as_secs() < 10, "the move never synced");
        std::thread::yield_now();
    }
    let syncer = {
        let fs = fs.clone();
        std::thread::spawn(move || fs.fsync(hot.ino, false))
    };
    std::thread::sleep(std::time::Duration::from_millis(300));
    let early = syncer.is_finished();
    ssd.release_syncs();
    let synced = syncer.join().unwrap();
    assert!(
        !early || synced.is_ok(),
        "fsync did not wait for the move in flight: {synced:?}"
    );
    synced.unwrap();
    assert_eq!(mover.join().unwrap().unwrap(), 2 << 20);
    assert!(fs.read(hot.ino, 0, hot_data.len() + 1).unwrap() == hot_data);
    assert!(fs.read(cold.ino, 0, cold_data.len() + 1).unwrap() == cold_data);
    fs.check_allocator().unwrap();
}

/// A file filled until ENOSPC through the DRAM cache and deleted while the
/// background write-back is storing its pages (the kernel still holding a
/// reference, so the inode stays as a zombie): every block comes back. A
/// write-back that committed its blocks to the zombie leaked them (16 MiB
/// per write-back request) until the next mount (xfstests generic/015).
#[test]
fn a_file_deleted_during_its_write_back_gives_back_every_block() {
    for round in 0..6 {
        let (_pm, _ssd, fs) =
            tiered_pool_on(MemMedia::new(64 << 20), MemBlock::new(192 << 20), 7000);
        let fs = std::sync::Arc::new(fs);
        fs.set_setting("size_fresh_large_bytes", "256K").unwrap();
        fs.start_writeback();
        let free0 = fs.statfs().bfree;
        let f = file(&fs, 1, "fill");
        fs.open(f, libc::O_WRONLY).unwrap();
        let buf = vec![7u8; 1 << 20];
        let mut off = 0u64;
        while let Ok(n) = fs.write(f, off, &buf) {
            off += n as u64;
        }
        assert!(off > 128 << 20, "round {round}: the pool filled at {off}");
        fs.release(f).unwrap();
        fs.unlink(1, b"fill").unwrap(); // the kernel's lookup keeps a zombie
                                        // Let a write-back in flight finish.
        std::thread::sleep(std::time::Duration::from_millis(300));
        fs.check_allocator().unwrap();
        let free1 = fs.statfs().bfree;
        // The root directory's log may have grown by a page.
        assert!(
            free1 + 2 >= free0,
            "round {round}: {} blocks not given back",
            free0 - free1
        );
        fs.forget(f, 1);
        fs.unmount().unwrap();
    }
}

/// An SSD whose next sync, once armed, waits until let go (then syncs).
struct HeldSync {
    dev: Arc<MemBlock>,
    armed: std::sync::atomic::AtomicBool,
    inside: std::sync::atomic::AtomicBool,
    release: std::sync::atomic::AtomicBool,
}

impl Hooks for HeldSync {
    fn inner(&self) -> &dyn BlockMedia {
        &*self.dev
    }
    fn sync(&self) -> std::io::Result<()> {
        use std::sync::atomic::Ordering::SeqCst;
        if self.armed.swap(false, SeqCst) {
            self.inside.store(true, SeqCst);
            while !self.release.load(SeqCst) {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        self.dev.sync()
    }
    fn describe(&self) -> String {
        "held sync".into()
    }
}

#[test]
fn a_page_rewritten_while_its_write_back_runs_claims_a_block_of_its_own() {
    // The write-back's block will hold the page's older content, and the
    // rewritten page needs another: the rewrite claimed no room (the page
    // was dirty already), so on a pool with little room the pool accepted
    // pages it then had no block for, and fsync and unmount failed with
    // ENOSPC while the data was in DRAM only.
    use std::sync::atomic::Ordering::SeqCst;
    let pm = Arc::new(MemMedia::new(16 << 20));
    mkfs_pm_ssd(&*pm, SSD, 64);
    let ssd = Arc::new(Hooked(HeldSync {
        dev: Arc::new(MemBlock::new(SSD)),
        armed: false.into(),
        inside: false.into(),
        release: false.into(),
    }));
    let fs = Arc::new(mount_tiered(pm.clone(), ssd.clone()));
    fs.set_setting("dram_cache_bytes", "16M").unwrap();
    block_first(&fs);
    const PAGES: u64 = 64;
    let f = fs
        .mknod(1, b"f", libc::S_IFREG | 0o644, 0, CTX)
        .unwrap()
        .ino;
    fs.write(f, 0, &pattern(1, (PAGES * 4096) as usize))
        .unwrap();
    let room = |fs: &Fs| fs.statfs().bavail;
    let before = room(&fs);
    ssd.armed.store(true, SeqCst);
    let syncer = {
        let fs = fs.clone();
        std::thread::spawn(move || fs.fsync(f, false))
    };
    let t0 = std::time::Instant::now();
    while !ssd.inside.load(SeqCst) {
        assert!(
            t0.elapsed().as_secs() < 10,
            "the write-back never synced the ssd: {:?}",
            fs.extent_rows(f)
        );
        std::thread::yield_now();
    }
    // The rewrite goes into the cache at once; judged synchronous (an
    // fsync followed the first write), it then waits for the write-back
    // running to write it back itself.
    let newer = pattern(2, (PAGES * 4096) as usize);
    let writer = {
        let (fs, newer) = (fs.clone(), newer.clone());
        std::thread::spawn(move || fs.write(f, 0, &newer))
    };
    let t0 = std::time::Instant::now();
    while room(&fs) + PAGES > before && t0.elapsed().as_millis() < 1000 {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let during = room(&fs);
    ssd.release.store(true, SeqCst);
    syncer.join().unwrap().unwrap();
    writer.join().unwrap().unwrap();
    assert!(
        during + PAGES <= before,
        "the rewrites claimed {} blocks, not {PAGES}",
        before.saturating_sub(during)
    );
    assert_eq!(fs.read(f, 0, newer.len()).unwrap(), newer);
    // Counted once more while in flight, and no more once written back.
    fs.fsync(f, false).unwrap();
    assert_eq!(
        fs.status().cache.dirty_bytes,
        0,
        "a page counted twice for good"
    );
    fs.unmount().unwrap();
}

/// One file whose write-back keeps failing (its rule pins it to the HDD,
/// which fails every write) neither stops the write-back of the other
/// files behind it nor fails their cached writes with its error: before,
/// a pass stopped at the first failure (the oldest file, every pass) and a
/// writer that needed cache room got the other file's EIO.
#[test]
fn a_file_whose_write_back_fails_stalls_and_fails_no_other_file() {
    use terrace_format::TierKind;
    let pm = Arc::new(MemMedia::new(8 << 20));
    let ssd = Arc::new(MemBlock::new(SSD));
    let hdd = Arc::new(FaultBlock::new(MemBlock::new(SSD)));
    mkfs_tiers(&*pm, &[(TierKind::Ssd, SSD), (TierKind::Hdd, SSD)], 64);
    let tiers: Vec<(u8, Arc<dyn BlockMedia>)> = vec![(1, ssd.clone()), (2, hdd.clone())];
    let fs = Fs::mount_with_tiers(pm.clone(), tiers).unwrap();
    // PM full, so that a failed write-back has nowhere to go but fail.
    fill_pm(&fs);
    fs.set_setting("dram_cache_bytes", "4M").unwrap();
    let pinned = file(&fs, 1, "pinned");
    fs.setxattr(pinned, b"user.terrace.rule", b"hdd", 0)
        .unwrap();
    hdd.fail_writes_after(0);
    let stuck = pattern(1, 512 << 10);
    fs.write(pinned, 0, &stuck).unwrap();
    assert!(
        fs.status().cache.dirty_bytes >= 512 << 10,
        "the write was not cached"
    );

    // Writes of another file, four times the cache: each needs room the
    // pinned file's dirty pages hold, and its write-back fails.
    let other = file(&fs, 1, "other");
    let data = pattern(2, 16 << 20);
    for (k, piece) in data.chunks(64 << 10).enumerate() {
        fs.write(other, (k as u64) << 16, piece)
            .unwrap_or_else(|e| panic!("write {k} of the other file: {e}"));
    }
    // A background pass writes back every old file but the pinned one.
    fs.set_setting("writeback_age_ns", "0").unwrap();
    fs.writeback_pass();
    let dirty = fs.status().cache.dirty_bytes;
    assert!(
        dirty <= (512 << 10) + 4096,
        "{dirty} bytes still dirty after a pass: the other file was not written back"
    );
    fs.fsync(other, false).unwrap();
    assert!(fs.read(other, 0, data.len()).unwrap() == data);
    // The pinned file keeps its data and reports its own error.
    assert_eq!(
        fs.fsync(pinned, false).unwrap_err().raw_os_error(),
        Some(libc::EIO)
    );
    assert!(
        fs.read(pinned, 0, stuck.len()).unwrap() == stuck,
        "dirty data lost"
    );
    hdd.heal();
    fs.fsync(pinned, false).unwrap();
    fs.check_allocator().unwrap();
}
