//! Per-file placement rules (HetFS) and access classification: pinned files'
//! writes go to their tier, migration never moves them off it and brings
//! their other data there, directories pass rules to new children (crash-
//! atomically), bad rules are refused, and the `hetfs` placement policy
//! streams sequentially written files to disk.

mod common;
use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use terrace_media::{CrashMedia, LossMode, MemBlock, PmMedia};

const PM: u64 = 32 << 20;
const SSD: u64 = 128 << 20;
const RULE: &[u8] = b"user.terrace.rule";

#[test]
fn a_file_pinned_to_the_ssd_takes_even_small_synchronous_writes_there() {
    let (_, _, fs) = tiered_pool(PM, SSD, 64);
    let f = file(&fs, 1, "log");
    fs.setxattr(f, RULE, b"ssd", 0).unwrap();
    for k in 0..16u64 {
        fs.write(f, k * 100, &[b'x'; 100]).unwrap();
        fs.fsync(f, false).unwrap();
    }
    assert_eq!(tier_bytes(&fs, f, "pm"), 0);
    assert!(tier_bytes(&fs, f, "ssd") > 0);
    assert_eq!(fs.read(f, 0, 1600).unwrap(), vec![b'x'; 1600]);
    // Without the rule, the same pattern stays on PM.
    let g = file(&fs, 1, "log2");
    for k in 0..16u64 {
        fs.write(g, k * 100, &[b'y'; 100]).unwrap();
        fs.fsync(g, false).unwrap();
    }
    assert_eq!(tier_bytes(&fs, g, "ssd"), 0);
}

#[test]
fn a_rule_naming_no_tier_is_refused_and_rules_are_for_files_and_directories() {
    let (_, _, fs) = tiered_pool(PM, SSD, 64);
    let f = file(&fs, 1, "f");
    let e = fs.setxattr(f, RULE, b"tape", 0).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
    let e = fs.setxattr(f, RULE, b"7", 0).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
    assert_eq!(
        fs.getxattr(f, RULE).unwrap_err().raw_os_error(),
        Some(libc::ENODATA)
    );
    let l = fs.symlink(1, b"l", b"f", CTX).unwrap().ino;
    let e = fs.setxattr(l, RULE, b"ssd", 0).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EPERM));
    // The other names under the prefix stay read-only.
    let e = fs.setxattr(f, b"user.terrace.tiers", b"x", 0).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EPERM));
    for ok in [&b"pm"[..], b"ssd", b"1", b"0"] {
        fs.setxattr(f, RULE, ok, 0).unwrap();
    }
    fs.removexattr(f, RULE).unwrap();
}

#[test]
fn new_files_inherit_their_directory_rule_and_keep_it_across_remounts() {
    let (pm, ssd, fs) = tiered_pool(PM, SSD, 64);
    let d = fs.mkdir(1, b"archive", 0o755, CTX).unwrap().ino;
    fs.setxattr(d, RULE, b"ssd", 0).unwrap();
    let f = file(&fs, d, "a");
    let sub = fs.mkdir(d, b"sub", 0o755, CTX).unwrap().ino;
    let g = file(&fs, sub, "b");
    let outside = file(&fs, 1, "c");
    for ino in [f, sub, g] {
        assert_eq!(fs.getxattr(ino, RULE).unwrap(), b"ssd");
    }
    assert!(fs.getxattr(outside, RULE).is_err());
    fs.write(g, 0, &pattern(1, 64 << 10)).unwrap();
    fs.fsync(g, false).unwrap();
    assert_eq!(tier_bytes(&fs, g, "pm"), 0);
    fs.unmount().unwrap();
    drop(fs);
    let fs = mount_tiered(pm, ssd);
    assert_eq!(fs.getxattr(g, RULE).unwrap(), b"ssd");
    assert_eq!(fs.read(g, 0, 64 << 10).unwrap(), pattern(1, 64 << 10));
    let h = file(&fs, sub, "after-remount");
    assert_eq!(fs.getxattr(h, RULE).unwrap(), b"ssd");
}

#[test]
fn a_crash_while_creating_in_a_ruled_directory_leaves_no_file_or_a_file_with_the_rule() {
    let (pm, ssd, fs) = tiered_pool_on(CrashMedia::new(PM), MemBlock::new(SSD), 64);
    let d = fs.mkdir(1, b"d", 0o755, CTX).unwrap().ino;
    fs.setxattr(d, RULE, b"ssd", 0).unwrap();
    pm.sync_all().unwrap();
    let (attr, trace) = pm.trace(|| {
        fs.mknod(d, b"child", libc::S_IFREG | 0o644, 0, CTX)
            .unwrap()
    });
    let n = trace.len();
    let mut rng = StdRng::seed_from_u64(base_seed("rule inheritance crash test"));
    for kk in 0..=n {
        let mode = if kk % 2 == 0 {
            LossMode::AllUnflushed
        } else {
            LossMode::RandomLines(rng.gen())
        };
        let what = format!("crash at {kk}/{n}");
        let (_, fs2) = recover(
            trace.image_at(kk, mode),
            Some(ssd.image()),
            Fsck::Metadata,
            &what,
        );
        match fs2.lookup(d, b"child") {
            Ok(a) => {
                assert_eq!(a.ino, attr.ino);
                assert_eq!(fs2.getxattr(a.ino, RULE).unwrap(), b"ssd", "{what}");
            }
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "{what}"),
        }
    }
}

#[test]
fn migration_leaves_a_file_pinned_to_pm_and_moves_the_others() {
    let (_, _, fs) = tiered_pool(PM, SSD, 64);
    fs.set_setting("migration_policy", "ziggurat").unwrap();
    fs.set_setting("migration_age_ns", "0s").unwrap();
    let pinned = file(&fs, 1, "index");
    let other = file(&fs, 1, "table");
    fs.setxattr(pinned, RULE, b"pm", 0).unwrap();
    fs.write(pinned, 0, &pattern(2, 4 << 20)).unwrap();
    fs.write(other, 0, &pattern(3, 4 << 20)).unwrap();
    fs.set_setting("migration_threshold", "1").unwrap();
    fs.migration_pass();
    // The pinned file never moved (not down and back up either).
    let m = fs.status().migration;
    assert_eq!((m.bytes_down, m.bytes_up), (4 << 20, 0), "{m:?}");
    assert_eq!(tier_bytes(&fs, pinned, "pm"), 4 << 20);
    assert_eq!(tier_bytes(&fs, other, "pm"), 0);
    assert_eq!(tier_bytes(&fs, other, "ssd"), 4 << 20);
    assert!(fs.read(pinned, 0, 4 << 20).unwrap() == pattern(2, 4 << 20));
}

#[test]
fn a_new_rule_brings_the_file_data_to_its_tier_and_clearing_it_restores_automatic_placement() {
    let (_, _, fs) = tiered_pool(PM, SSD, 64);
    let data = pattern(4, 3 << 20);
    let f = file_holding(&fs, "f", &data);
    assert_eq!(tier_bytes(&fs, f, "pm"), 3 << 20);
    fs.setxattr(f, RULE, b"ssd", 0).unwrap();
    fs.migration_pass();
    assert_eq!(tier_bytes(&fs, f, "pm"), 0);
    assert_eq!(tier_bytes(&fs, f, "ssd"), 3 << 20);
    // Pinned down: reads do not bring it back up.
    for _ in 0..50 {
        fs.read(f, 0, 3 << 20).unwrap();
    }
    fs.migration_pass();
    assert_eq!(tier_bytes(&fs, f, "ssd"), 3 << 20);
    fs.setxattr(f, RULE, b"pm", XATTR_REPLACE).unwrap();
    fs.migration_pass();
    assert_eq!(tier_bytes(&fs, f, "pm"), 3 << 20);
    fs.removexattr(f, RULE).unwrap();
    fs.write(f, 0, &[1u8; 100]).unwrap();
    fs.fsync(f, false).unwrap();
    assert!(fs.read(f, 100, data.len() - 100).unwrap() == data[100..]);
    fs.check_allocator().unwrap();
}

/// A pin to a block tier without room for all of the file is followed as
/// far as the room goes (`terrace migrate` instead leaves such a file
/// whole, `migration.rs`): the part that fits moves, the rest stays, and
/// nothing is lost.
#[test]
fn a_pin_to_a_tier_too_small_for_the_whole_file_moves_what_fits() {
    // Moves go in groups of 16 MiB (group_migration_bytes): two fit.
    let (_, _, fs) = tiered_pool(128 << 20, 40 << 20, 64);
    let data = pattern(6, 56 << 20);
    let f = file_holding(&fs, "big", &data);
    let on_pm = tier_bytes(&fs, f, "pm");
    assert!(
        on_pm > 40 << 20,
        "the file must be larger than the SSD: {on_pm}"
    );
    fs.setxattr(f, RULE, b"ssd", 0).unwrap();
    fs.migration_pass();
    let on_ssd = tier_bytes(&fs, f, "ssd");
    assert!(on_ssd >= 16 << 20, "only {on_ssd} bytes followed the pin");
    assert_eq!(tier_bytes(&fs, f, "pm") + on_ssd, 56 << 20);
    assert!(fs.read(f, 0, data.len()).unwrap() == data);
    fs.check_allocator().unwrap();
}

#[test]
fn access_traces_classify_files_and_hetfs_streams_sequential_files_to_disk() {
    let (_, _, fs) = tiered_pool(PM, SSD, 64);
    fs.set_setting("placement_policy", "hetfs").unwrap();
    fs.set_setting("sync_threshold_bytes", "64K").unwrap();
    let seq = file(&fs, 1, "stream");
    let rnd = file(&fs, 1, "random");
    let chunk = pattern(5, 256 << 10);
    for k in 0..32u64 {
        fs.write(seq, k * (256 << 10), &chunk).unwrap();
    }
    let mut rng = StdRng::seed_from_u64(base_seed("hetfs test"));
    for _ in 0..64 {
        let b = rng.gen_range(0..1024u64);
        fs.write(rnd, b * 4096, &[7u8; 4096]).unwrap();
    }
    let class = |ino| String::from_utf8(fs.getxattr(ino, b"user.terrace.access").unwrap()).unwrap();
    assert!(class(seq).starts_with("class=sequential"), "{}", class(seq));
    assert!(class(rnd).starts_with("class=random"), "{}", class(rnd));
    fs.fsync(seq, false).unwrap();
    // Once classified (after 16 requests), the stream went to the SSD.
    assert!(
        tier_bytes(&fs, seq, "ssd") >= 16 * (256 << 10),
        "{}",
        tier_bytes(&fs, seq, "ssd")
    );
    assert_eq!(tier_bytes(&fs, rnd, "ssd"), 0);
    for k in 0..32u64 {
        assert!(fs.read(seq, k * (256 << 10), 256 << 10).unwrap() == chunk);
    }
}

const XATTR_REPLACE: i32 = 2;

/// Issue 15, point 5: a file pinned to PM while PM is full of other files'
/// data gets its place: migration moves unpinned data down to make room, and
/// the pinned data comes up.
#[test]
fn a_file_pinned_to_a_full_pm_makes_migration_evict_unpinned_data_for_it() {
    let (_, _, fs) = tiered_pool(PM, SSD, 64);
    fs.set_setting("migration_policy", "ziggurat").unwrap();
    // A threshold PM never reaches: only the rule can make room.
    fs.set_setting("migration_threshold", "99").unwrap();
    // The 3 MiB writes below are bulk: let them fill PM past 80 %.
    fs.set_setting("placement_bulk_pm_percent", "100").unwrap();
    let pinned = file(&fs, 1, "index");
    fs.setxattr(pinned, RULE, b"ssd", 0).unwrap();
    fs.write(pinned, 0, &pattern(2, 4 << 20)).unwrap();
    fs.fsync(pinned, false).unwrap();
    // Other files fill PM to the brim (the rest spills to the SSD).
    let mut others = Vec::new();
    for k in 0..12 {
        let f = file(&fs, 1, &format!("t{k}"));
        fs.write(f, 0, &pattern(10 + k, 3 << 20)).unwrap();
        others.push(f);
    }
    let pm = &fs.status().tiers[0];
    assert!(pm.used * 100 / pm.capacity >= 90, "PM is not full: {pm:?}");
    fs.setxattr(pinned, RULE, b"pm", XATTR_REPLACE).unwrap();
    for _ in 0..10 {
        fs.migration_pass();
        if tier_bytes(&fs, pinned, "pm") == 4 << 20 {
            break;
        }
    }
    assert_eq!(
        tier_bytes(&fs, pinned, "pm"),
        4 << 20,
        "the pinned file did not get PM: {:?}",
        fs.status().migration
    );
    assert!(fs.read(pinned, 0, 4 << 20).unwrap() == pattern(2, 4 << 20));
    for (k, f) in others.iter().enumerate() {
        assert!(fs.read(*f, 0, 3 << 20).unwrap() == pattern(10 + k as u64, 3 << 20));
    }
    fs.check_allocator().unwrap();
}

/// Data pinned to PM is data migration may not move: if it could fill PM
/// to the last block, every create of the pool (whose inode slot and log
/// live on PM) would wait for a migration that has nothing to move, then
/// fail with ENOSPC while the SSD had room. Pinned writes stop at the
/// forced mark and spill to the SSD; the room above it stays for metadata.
#[test]
fn data_pinned_to_pm_stops_at_the_forced_mark_and_leaves_the_rest_to_metadata() {
    let (_, _, fs) = tiered_pool(PM, SSD, 64);
    let db = fs.mkdir(1, b"db", 0o755, CTX).unwrap().ino;
    fs.setxattr(db, RULE, b"pm", 0).unwrap();
    // 40 MiB pinned to a 32 MiB PM.
    let mut pinned = Vec::new();
    for k in 0..40u64 {
        let f = file(&fs, db, &format!("t{k}"));
        fs.write(f, 0, &pattern(100 + k, 1 << 20)).unwrap();
        pinned.push(f);
    }
    let forced = u64::from(fs.settings().migration_params().forced_percent);
    let pm = fs.status().tiers[0].clone();
    assert!(
        pm.used * 100 <= pm.capacity * (forced + 1),
        "pinned data took PM past its forced mark ({forced}%): {pm:?}"
    );
    for &f in &pinned {
        fs.fsync(f, false).unwrap();
    }
    let spilled: u64 = pinned.iter().map(|&f| tier_bytes(&fs, f, "ssd")).sum();
    assert!(spilled >= 8 << 20, "only {spilled} bytes spilled");
    // The pool still creates files and directories outside the pinned
    // directory: their metadata finds PM room (no migration runs here, so
    // nothing could make room for it).
    let other = fs.mkdir(1, b"mail", 0o755, CTX).unwrap().ino;
    for k in 0..3000 {
        fs.mknod(
            other,
            format!("m{k}").as_bytes(),
            libc::S_IFREG | 0o644,
            0,
            CTX,
        )
        .unwrap_or_else(|e| panic!("create {k} on a PM full of pinned data: {e}"));
    }
    for (k, &f) in pinned.iter().enumerate() {
        assert!(
            fs.read(f, 0, 1 << 20).unwrap() == pattern(100 + k as u64, 1 << 20),
            "pinned file {k} reads back wrong"
        );
    }
    fs.check_allocator().unwrap();
}

/// Small files written through the DRAM cache hold PM log room promised to
/// their write-back. On a PM short of room for metadata (here: data pinned
/// there with the forced mark at 100 %, which since 2026-12-07 leaves twice
/// the metadata reserve free, then creates taking PM below the reserve; no
/// migration pass runs, which would move pinned data down for them), one
/// write-back pass writes every dirty file back, however young, and gives
/// the promises back: creates waiting for PM room otherwise waited for the
/// write-back age (5 s) each time.
#[test]
fn a_write_back_pass_gives_back_the_promised_log_room_when_pm_is_short_of_it() {
    let (_, _, fs) = tiered_pool(PM, SSD, 64);
    fs.set_setting("migration_forced_percent", "100").unwrap();
    let db = fs.mkdir(1, b"db", 0o755, CTX).unwrap().ino;
    fs.setxattr(db, RULE, b"pm", 0).unwrap();
    for k in 0..32u64 {
        let f = file(&fs, db, &format!("t{k}"));
        fs.write(f, 0, &pattern(200 + k, 1 << 20)).unwrap();
    }
    let mut small = Vec::new();
    for k in 0..50u64 {
        let f = file(&fs, 1, &format!("s{k}"));
        fs.write(f, 0, &pattern(300 + k, 3000)).unwrap();
        small.push(f);
    }
    let mut k = 0;
    while !fs.status().space.state.starts_with("PM full") {
        file(&fs, 1, &format!("e{k}"));
        k += 1;
        assert!(k < 20_000, "PM never got short: {:?}", fs.status().space);
    }
    let st = fs.status();
    assert!(
        st.space.promised_bytes > 0,
        "nothing promised: {:?}",
        st.space
    );
    assert!(
        st.space.state.starts_with("PM full"),
        "PM not short: {:?}",
        st.space
    );
    fs.writeback_pass();
    let st = fs.status();
    assert_eq!(
        st.cache.dirty_bytes, 0,
        "young dirty files stayed: {:?}",
        st.cache
    );
    assert_eq!(st.space.promised_bytes, 0, "{:?}", st.space);
    for (k, &f) in small.iter().enumerate() {
        assert!(fs.read(f, 0, 3000).unwrap() == pattern(300 + k as u64, 3000));
    }
    fs.check_allocator().unwrap();
}

/// `terrace migrate` leaves a file where a rule pins it (the rule's
/// enforcement would bring the data back within a pass, after the command
/// had said it moved) and says why; files without a rule, or pinned to the
/// target, move.
#[test]
fn migrating_a_file_pinned_elsewhere_leaves_it_and_names_the_rule() {
    let (_, _, fs) = tiered_pool(PM, SSD, 64);
    let pinned = file(&fs, 1, "wal");
    let free = file(&fs, 1, "data");
    let to_ssd = file(&fs, 1, "archive");
    for (k, f) in [pinned, free, to_ssd].into_iter().enumerate() {
        fs.write(f, 0, &pattern(400 + k as u64, 1 << 20)).unwrap();
    }
    fs.setxattr(pinned, RULE, b"pm", 0).unwrap();
    fs.setxattr(to_ssd, RULE, b"ssd", 0).unwrap();
    let (moved, errors) = fs.migrate_files(&[pinned, free, to_ssd], 1).unwrap();
    assert_eq!(moved, 2 << 20);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].0, pinned);
    let why = errors[0]
        .1
        .get_ref()
        .and_then(|e| e.downcast_ref::<terrace_core::rules::PinnedElsewhere>())
        .expect("a PinnedElsewhere error");
    assert_eq!(why.tier, "pm");
    assert!(errors[0].1.to_string().contains("terrace rule"));
    assert_eq!(tier_bytes(&fs, pinned, "pm"), 1 << 20);
    assert_eq!(tier_bytes(&fs, free, "ssd"), 1 << 20);
    assert_eq!(tier_bytes(&fs, to_ssd, "ssd"), 1 << 20);
    // Without the rule it moves.
    fs.removexattr(pinned, RULE).unwrap();
    assert_eq!(fs.migrate_file(pinned, 1).unwrap(), 1 << 20);
    assert!(fs.read(pinned, 0, 1 << 20).unwrap() == pattern(400, 1 << 20));
}
