//! Data pinned to PM by a rule against the metadata of the rest of the
//! pool: a PM that pinned data filled to its forced mark must still find
//! room for every new file's inode slot and log (design.md §5e, §5f).
//! Found 2026-12-07: `terrace rule hot pm`, 70 MiB written there on a
//! 64 MiB PM, then three writers creating 30,000 small files each
//! elsewhere got 9,130 ENOSPC while the SSD had 854 MiB of room.

mod common;
use common::*;
use std::sync::Arc;
use std::time::Instant;

const RULE: &[u8] = b"user.terrace.rule";

/// Bytes of each small file.
const SMALL: usize = 1000;

fn small(w: u64, k: u64) -> Vec<u8> {
    pattern(w * 1_000_003 + k, SMALL)
}

/// The reproduction at a quarter of the scale: PM 16 MiB over an SSD of
/// 256 MiB, 20 MiB written to a directory pinned to PM (PM stops at its
/// forced mark, the rest spills), then three writers each create 2,500
/// files of 1,000 bytes in another directory (create, write), with
/// write-back and migration running as in the daemon. The slots and logs of
/// 7,500 files take more PM than the few percent the pinned data left, and
/// nothing but the pinned data can leave PM to make room for the slots.
/// No create or write may fail while the SSD has room; the pinned data
/// that leaves PM for it says so (the rule is unmet), and everything reads
/// back, also after a remount.
#[test]
fn small_files_on_a_pm_full_of_pinned_data_get_no_enospc_while_the_ssd_has_room() {
    let (pm, ssd, fs) = tiered_pool(16 << 20, 256 << 20, 1024);
    let fs = Arc::new(fs);
    fs.set_setting("dram_cache_bytes", "16M").unwrap();
    fs.start_writeback();
    fs.start_migration();
    let hot = fs.mkdir(1, b"hot", 0o755, CTX).unwrap().ino;
    fs.setxattr(hot, RULE, b"pm", 0).unwrap();
    let mut pinned = Vec::new();
    for k in 0..20u64 {
        let f = file(&fs, hot, &format!("f{k}"));
        fs.write(f, 0, &pattern(100 + k, 1 << 20))
            .unwrap_or_else(|e| panic!("pinned write {k}: {e}"));
        pinned.push(f);
    }
    for &f in &pinned {
        fs.fsync(f, false).unwrap();
    }
    let pm_use = fs.status().tiers[0].clone();
    assert!(
        pm_use.used * 100 >= pm_use.capacity * 90,
        "the pinned data did not fill PM: {pm_use:?}"
    );
    let mail = fs.mkdir(1, b"mail", 0o755, CTX).unwrap().ino;
    let start = Instant::now();
    let writers: Vec<_> = (0..3u64)
        .map(|w| {
            let fs = fs.clone();
            std::thread::spawn(move || {
                let mut done = Vec::new();
                let mut errors = Vec::new();
                for k in 0..2500u64 {
                    let r = fs
                        .mknod(
                            mail,
                            format!("w{w}-{k}").as_bytes(),
                            libc::S_IFREG | 0o644,
                            0,
                            CTX,
                        )
                        .map_err(|e| ("create", e))
                        .and_then(|a| {
                            fs.write(a.ino, 0, &small(w, k))
                                .map(|_| a.ino)
                                .map_err(|e| ("write", e))
                        });
                    match r {
                        Ok(ino) => done.push((ino, w, k)),
                        Err((what, e)) => errors.push(format!("{what} w{w}-{k}: {e}")),
                    }
                }
                (done, errors)
            })
        })
        .collect();
    let mut files = Vec::new();
    let mut errors = Vec::new();
    for t in writers {
        let (d, e) = t.join().unwrap();
        files.extend(d);
        errors.extend(e);
    }
    let took = start.elapsed();
    let st = fs.status();
    assert!(
        errors.is_empty(),
        "{} of 7500 small files refused on a PM full of pinned data while the pool \
         had {} MiB of room (first: {:?}); space: {:?}; migration: {:?}",
        errors.len(),
        st.room_bytes >> 20,
        errors.first(),
        st.space,
        fs.migration_status()
    );
    eprintln!("7,500 small files in {took:?}; space: {:?}", st.space);
    // Pinned data left PM for the metadata: the rule is unmet for it, and
    // the status says why PM is full.
    let on_ssd: u64 = pinned.iter().map(|&f| tier_bytes(&fs, f, "ssd")).sum();
    assert!(on_ssd > 0, "no pinned data left PM");
    assert!(st.space.pins_yielded_bytes > 0, "{:?}", st.space);
    for (k, &f) in pinned.iter().enumerate() {
        assert!(
            fs.read(f, 0, 1 << 20).unwrap() == pattern(100 + k as u64, 1 << 20),
            "pinned file {k} reads back wrong"
        );
    }
    for &(ino, w, k) in &files {
        assert!(
            fs.read(ino, 0, SMALL + 1).unwrap() == small(w, k),
            "w{w}-{k}"
        );
    }
    fs.unmount().expect("unmount persists everything");
    drop(fs);
    let fs = mount_tiered(pm.clone(), ssd.clone());
    for &(ino, w, k) in &files {
        assert!(
            fs.read(ino, 0, SMALL + 1).unwrap() == small(w, k),
            "w{w}-{k} after remount"
        );
    }
    for (k, &f) in pinned.iter().enumerate() {
        assert!(fs.read(f, 0, 1 << 20).unwrap() == pattern(100 + k as u64, 1 << 20));
    }
    fs.check_allocator().unwrap();
    fs.unmount().unwrap();
}

/// The same, step by step and without background threads: creates take
/// PM below its metadata reserve on a PM that pinned data filled; the
/// status says that rules fill PM and what to do; one migration pass moves
/// pinned data down until twice the reserve is free; the rule's
/// enforcement in the next passes does not bring it back (no data goes
/// back and forth at the reserve's edge); pinned writes go to the SSD
/// while PM has no room beyond that; and every byte reads back.
#[test]
fn pinned_data_gives_pm_to_metadata_and_does_not_come_back_at_once() {
    let (_, _, fs) = tiered_pool(16 << 20, 256 << 20, 1024);
    let hot = fs.mkdir(1, b"hot", 0o755, CTX).unwrap().ino;
    fs.setxattr(hot, RULE, b"pm", 0).unwrap();
    let mut pinned = Vec::new();
    for k in 0..20u64 {
        let f = file(&fs, hot, &format!("f{k}"));
        fs.write(f, 0, &pattern(100 + k, 1 << 20)).unwrap();
        fs.fsync(f, false).unwrap();
        pinned.push(f);
    }
    let short = |fs: &terrace_core::Fs| {
        let sp = fs.status().space;
        sp.pm_free_bytes.saturating_sub(sp.promised_bytes) < sp.pm_reserve_bytes
    };
    // Creates (no migration runs: they do not wait) until PM is short.
    let mail = fs.mkdir(1, b"mail", 0o755, CTX).unwrap().ino;
    let mut made = 0;
    while !short(&fs) {
        file(&fs, mail, &format!("m{made}"));
        made += 1;
        assert!(made < 20_000, "PM never got short: {:?}", fs.status().space);
    }
    let st = fs.status().space;
    assert!(
        st.state
            .starts_with("PM full of data pinned to it by rules")
            && st.state.contains("terrace rule -r DIR auto"),
        "the status does not say that rules fill PM: {:?}",
        st.state
    );
    let on_ssd =
        |fs: &terrace_core::Fs| -> u64 { pinned.iter().map(|&f| tier_bytes(fs, f, "ssd")).sum() };
    let before = on_ssd(&fs);
    fs.migration_pass();
    let moved = on_ssd(&fs) - before;
    let sp = fs.status().space;
    assert!(moved > 0, "no pinned data gave way: {sp:?}");
    assert!(
        sp.pm_free_bytes - sp.promised_bytes >= 2 * sp.pm_reserve_bytes - 4096,
        "PM not freed to twice its reserve: {sp:?}"
    );
    assert_eq!(sp.pins_yielded_bytes, moved);
    assert!(!short(&fs), "{sp:?}");
    // The rule's enforcement leaves it there while PM has no room beyond
    // twice the reserve.
    for _ in 0..3 {
        fs.migration_pass();
    }
    assert_eq!(
        on_ssd(&fs) - before,
        moved,
        "pinned data went back and forth"
    );
    // A new pinned write as large as what gave way finds no room for it
    // on PM beyond twice the reserve (PM had less than the reserve free
    // before): it spills.
    let late = moved as usize;
    let f = file(&fs, hot, "late");
    fs.write(f, 0, &pattern(999, late)).unwrap();
    fs.fsync(f, false).unwrap();
    assert_eq!(tier_bytes(&fs, f, "pm"), 0, "{:?}", extents(&fs, f));
    // More creates still find room.
    for k in 0..500 {
        file(&fs, mail, &format!("n{k}"));
    }
    for (k, &f) in pinned.iter().enumerate() {
        assert!(fs.read(f, 0, 1 << 20).unwrap() == pattern(100 + k as u64, 1 << 20));
    }
    assert!(fs.read(f, 0, late).unwrap() == pattern(999, late));
    fs.check_allocator().unwrap();
}

/// The value of `user.terrace.moves` of `ino` (what `terrace where`
/// explains an unmet rule by).
fn moves(fs: &terrace_core::Fs, ino: u64) -> String {
    String::from_utf8(fs.getxattr(ino, b"user.terrace.moves").unwrap()).unwrap()
}

/// A file whose data pinned to PM left PM to make room for metadata says
/// so in `user.terrace.moves` (so `terrace where` does not blame "written
/// while pm had no room"), and only such a file: one that spilled when
/// written, or kept its PM data, says nothing; a file whose rule is
/// cleared says nothing either, and one whose data came back to PM once
/// PM had room says nothing again.
#[test]
fn pinned_data_moved_off_pm_for_metadata_says_so_in_its_moves_and_no_other_file_does() {
    let (_, _, fs) = tiered_pool(16 << 20, 256 << 20, 1024);
    let hot = fs.mkdir(1, b"hot", 0o755, CTX).unwrap().ino;
    fs.setxattr(hot, RULE, b"pm", 0).unwrap();
    let mut pinned = Vec::new();
    for k in 0..20u64 {
        let f = file(&fs, hot, &format!("f{k}"));
        fs.write(f, 0, &pattern(100 + k, 1 << 20)).unwrap();
        fs.fsync(f, false).unwrap();
        pinned.push(f);
    }
    let short = |fs: &terrace_core::Fs| {
        let sp = fs.status().space;
        sp.pm_free_bytes.saturating_sub(sp.promised_bytes) < sp.pm_reserve_bytes
    };
    let mail = fs.mkdir(1, b"mail", 0o755, CTX).unwrap().ino;
    let mut made = 0;
    while !short(&fs) {
        file(&fs, mail, &format!("m{made}"));
        made += 1;
        assert!(made < 20_000, "PM never got short: {:?}", fs.status().space);
    }
    for &f in &pinned {
        assert_eq!(moves(&fs, f), "", "nothing moved yet");
    }
    let on_pm = |fs: &terrace_core::Fs| -> Vec<u64> {
        pinned.iter().map(|&f| tier_bytes(fs, f, "pm")).collect()
    };
    let before = on_pm(&fs);
    fs.migration_pass();
    let after = on_pm(&fs);
    let mut gave_way = Vec::new();
    for (k, &f) in pinned.iter().enumerate() {
        let said = moves(&fs, f);
        if after[k] < before[k] {
            assert!(
                said.starts_with("yielded")
                    && said.contains("moved off pm to keep room for metadata")
                    && said.contains("returns when pm has room"),
                "pinned file {k} left PM for metadata: {said:?}"
            );
            gave_way.push(f);
        } else {
            assert_eq!(said, "", "pinned file {k} kept its PM data");
        }
    }
    assert!(!gave_way.is_empty(), "no pinned data gave way");
    // A pinned write that spills (PM has no room beyond twice the
    // reserve): its rule is unmet for room, not for metadata.
    let late = file(&fs, hot, "late");
    fs.write(late, 0, &pattern(999, 1 << 20)).unwrap();
    fs.fsync(late, false).unwrap();
    assert_eq!(tier_bytes(&fs, late, "pm"), 0, "{:?}", extents(&fs, late));
    assert_eq!(moves(&fs, late), "");
    // A file whose rule is cleared has no rule to be unmet.
    let back = gave_way[0];
    fs.removexattr(back, RULE).unwrap();
    assert_eq!(moves(&fs, back), "");
    fs.setxattr(back, RULE, b"pm", 0).unwrap();
    // Room on PM again: the rule's enforcement brings the data back, and
    // then nothing is said.
    fs.unlink(hot, b"late").unwrap();
    for &f in &pinned {
        if f != back {
            fs.removexattr(f, RULE).unwrap();
        }
    }
    for k in 0..made {
        fs.unlink(mail, format!("m{k}").as_bytes()).unwrap();
    }
    let start = Instant::now();
    while tier_bytes(&fs, back, "ssd") > 0 && start.elapsed().as_secs() < 20 {
        // Unpinned PM data makes room for the pin (the rule's enforcement
        // drains it); passes that moved nothing back off up to 2 s.
        fs.migration_pass();
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(
        tier_bytes(&fs, back, "ssd"),
        0,
        "the pinned data did not come back: {:?}; space {:?}",
        extents(&fs, back),
        fs.status().space
    );
    assert_eq!(moves(&fs, back), "", "its rule is met again");
    for (k, &f) in pinned.iter().enumerate() {
        assert!(fs.read(f, 0, 1 << 20).unwrap() == pattern(100 + k as u64, 1 << 20));
    }
    fs.check_allocator().unwrap();
}

/// Removals on a pool full on every tier whose PM data is all pinned to PM
/// by a rule: the rescue (`migrate/rescue.rs`) moves pinned data into the
/// recycling reserve when no other PM data is left to move, as the yield
/// to metadata does, and every unlink succeeds. It left pinned data where
/// it was, so once the removal reserve was used up by removals that free
/// no PM (here names of a file linked elsewhere too), every `rm` of such a
/// pool failed with ENOSPC and it could never be emptied. The file whose
/// data gave way says so in `user.terrace.moves`, and reads back.
#[test]
fn removals_on_a_full_pool_whose_pm_holds_only_pinned_data_all_succeed() {
    let (_, _, fs) = tiered_pool(4 << 20, 16 << 20, 64);
    let fs = Arc::new(fs);
    fs.set_setting("dram_cache_bytes", "4M").unwrap();
    fs.start_writeback();
    fs.start_migration();
    fs.set_setting("inode_max_percent", "90").unwrap();
    // Everything created below `top` inherits the pin.
    let top = fs.mkdir(1, b"top", 0o755, CTX).unwrap().ino;
    fs.setxattr(top, RULE, b"pm", 0).unwrap();
    let target = file(&fs, top, "target");
    let d = fs.mkdir(top, b"d", 0o755, CTX).unwrap().ino;
    let name = |i: u32| format!("{i}.M{i}P4242Q{i}.mail.example.org,S=1024:2,");
    let names: Vec<String> = (0..1500).map(name).collect();
    for n in &names {
        fs.link(target, d, n.as_bytes()).unwrap();
    }
    // Data until a write is refused: pinned to PM up to its pin room, the
    // rest spilled to the SSD until it is full.
    let big = file(&fs, top, "big");
    let mut off = 0u64;
    while fs.write(big, off, &pattern(off, 64 << 10)).is_ok() {
        off += 64 << 10;
        assert!(off < 1 << 30, "the pool never filled with data");
    }
    let _ = fs.fsync(big, false);
    let pm_before = tier_bytes(&fs, big, "pm");
    assert!(pm_before > 0, "{:?}", fs.status().space);
    // Then names until PM refuses them.
    let fill = fs.mkdir(top, b"fill", 0o755, CTX).unwrap().ino;
    for i in 0..1_000_000u32 {
        match fs.mknod(fill, name(i).as_bytes(), libc::S_IFREG | 0o644, 0, CTX) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(e) => panic!("create {i}: {e}"),
        }
    }
    // Each unlink adds to the logs of `d` and `target` and frees nothing.
    let failed: Vec<String> = names
        .iter()
        .filter_map(|n| {
            fs.unlink(d, n.as_bytes())
                .err()
                .map(|e| format!("{n}: {e}"))
        })
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {} unlinks failed on a full pool whose PM holds only pinned data, the first: {:?}; \
         space: {:?}",
        failed.len(),
        names.len(),
        failed.first(),
        fs.status().space
    );
    let sp = fs.status().space;
    assert!(sp.rescued_bytes > 0, "no rescue: {sp:?}");
    assert!(
        tier_bytes(&fs, big, "pm") < pm_before,
        "no pinned data moved"
    );
    let said = String::from_utf8(fs.getxattr(big, b"user.terrace.moves").unwrap()).unwrap();
    assert!(said.starts_with("yielded"), "{said:?}");
    assert!(fs.read(big, 0, off as usize).unwrap() == pattern_chunks(off));
    fs.rmdir(top, b"d").unwrap();
    fs.stop_background_for_crash_test();
    fs.check_allocator().unwrap();
}

/// What `removals_on_a_full_pool_whose_pm_holds_only_pinned_data_all_succeed`
/// wrote to `big`: 64 KiB chunks of `pattern(offset, ..)` up to `len`.
fn pattern_chunks(len: u64) -> Vec<u8> {
    (0..len)
        .step_by(64 << 10)
        .flat_map(|off| pattern(off, 64 << 10))
        .collect()
}
