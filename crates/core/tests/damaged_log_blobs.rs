//! A damaged log blob on a block tier (a cold inode's log, moved there by
//! log migration) costs what it damaged, not the pool: a read-write mount
//! refuses the pool and names the file's path, a read-only mount serves
//! the rest (the damaged file's data returns EIO, its directory's other
//! names still work), and `fsck --repair` keeps every entry of the blob
//! whose own checksum holds (design.md §3.6).

mod common;
use common::*;
use std::sync::Arc;
use terrace_core::{fsck, Fs, OpenError};
use terrace_format::{
    decode_tier_log_head, inode_offset, Entry, INODE_OFF_LOG_HEAD, INODE_OFF_LOG_TAIL,
};
use terrace_media::{BlockMedia, MemBlock, MemMedia, PmMedia};

const SSD: u64 = 64 << 20;

fn tiers(ssd: &Arc<MemBlock>) -> Vec<(u8, Arc<dyn BlockMedia>)> {
    vec![(1, ssd.clone() as Arc<dyn BlockMedia>)]
}

/// Where inode `ino`'s blob lies on the SSD (byte address of its start)
/// and its entries with their byte offsets from that start.
fn blob_entries(pm: &MemMedia, ssd: &MemBlock, ino: u64) -> (u64, Vec<(usize, Entry)>) {
    let head = pm.load_u64(inode_offset(ino) + INODE_OFF_LOG_HEAD);
    let bytes = terrace_format::decode_tail(pm.load_u64(inode_offset(ino) + INODE_OFF_LOG_TAIL))
        .expect("tail word");
    let (_, block, offset) = decode_tier_log_head(head);
    let start = block.get() * 4096 + offset;
    let mut buf = vec![0u8; ((offset + bytes).div_ceil(4096) * 4096) as usize];
    ssd.read_blocks(block.get(), &mut buf).unwrap();
    let blob = &buf[offset as usize..(offset + bytes) as usize];
    let mut at = terrace_format::LOG_BLOB_HEADER;
    let mut out = Vec::new();
    while at < blob.len() {
        let (e, n) = Entry::decode(&blob[at..]).unwrap();
        out.push((at, e));
        at += n;
    }
    (start, out)
}

/// Repairs the pool, checks it is then clean (`how`), mounts it and checks
/// its allocator; returns the repair's report and the pool.
fn repair_and_mount(pm: &Arc<MemMedia>, ssd: &Arc<MemBlock>, how: Fsck) -> (fsck::FsckReport, Fs) {
    let report = fsck::repair(pm.clone(), &tiers(ssd), &mut |_, _| {}).unwrap();
    fsck_clean_with(&**pm, &tiers(ssd), how, "after the repair");
    let fs = mount_tiered(pm.clone(), ssd.clone());
    fs.check_allocator().unwrap();
    (report, fs)
}

/// Flips one bit of the byte at SSD byte address `addr`.
fn flip(ssd: &MemBlock, addr: u64) {
    let mut b = vec![0u8; 4096];
    ssd.read_blocks(addr / 4096, &mut b).unwrap();
    b[(addr % 4096) as usize] ^= 0x08;
    ssd.write_blocks(addr / 4096, &b).unwrap();
    ssd.sync().unwrap();
}

/// A directory `mail` of 40 small files, and a file `big` of 200 KiB with
/// two xattrs, their data on the SSD and their logs moved there; cleanly
/// unmounted. Returns the media, the directory's inode, its files (name,
/// inode, contents) and big's inode and contents.
#[allow(clippy::type_complexity)]
fn cold_pool() -> (
    Arc<MemMedia>,
    Arc<MemBlock>,
    u64,
    Vec<(String, u64, Vec<u8>)>,
    (u64, Vec<u8>),
) {
    let (pm, ssd, fs) = tiered_pool(16 << 20, SSD, 512);
    let dir = fs.mkdir(1, b"mail", 0o755, CTX).unwrap().ino;
    let mut files = Vec::new();
    for i in 0..40u64 {
        let name = format!("message-{i:03}");
        let ino = file(&fs, dir, &name);
        let data = pattern(i + 1, 500 + (i as usize * 331) % 6000);
        fs.write(ino, 0, &data).unwrap();
        files.push((name, ino, data));
    }
    let big_data = pattern(99, 200 << 10);
    let big = file_holding(&fs, "big", &big_data);
    fs.setxattr(big, b"user.kind", b"archive", 0).unwrap();
    fs.setxattr(big, b"user.owner", b"ops", 0).unwrap();
    let mut inos: Vec<u64> = files.iter().map(|f| f.1).collect();
    inos.extend([big, dir]);
    for &ino in &inos {
        if ino != dir {
            fs.migrate_file(ino, 1).unwrap();
        }
    }
    assert_eq!(fs.move_logs(&inos, 1).unwrap(), inos.len() as u64);
    fs.unmount().unwrap();
    (pm, ssd, dir, files, (big, big_data))
}

#[test]
fn a_flipped_bit_in_a_directorys_cold_log_is_served_around_read_only_and_repair_keeps_every_other_name(
) {
    let (pm, ssd, dir, files, (big, big_data)) = cold_pool();
    let (start, entries) = blob_entries(&pm, &ssd, dir);
    // One name of the directory: the byte in the middle of its entry.
    let (at, lost_name, lost_ino) = entries
        .iter()
        .find_map(|(at, e)| match e {
            Entry::DentryAdd { name, ino, .. } if name == b"message-017" => {
                Some((*at, String::from_utf8(name.clone()).unwrap(), *ino))
            }
            _ => None,
        })
        .expect("the name is in the blob");
    flip(&ssd, start + at as u64 + 20);

    // Read-write: refused, naming the inode, its path and the way out.
    let e = Fs::mount_with_tiers(pm.clone(), tiers(&ssd))
        .err()
        .expect("refused");
    let msg = e.to_string();
    assert!(matches!(e, OpenError::Corrupt(_)), "{msg}");
    for want in [&format!("inode {dir} (/mail):"), "-o ro", "fsck --repair"] {
        assert!(msg.contains(want), "{want:?} not in: {msg}");
    }
    let report = fsck::check(&*pm, &tiers(&ssd), &mut |_, _| {}).unwrap();
    assert!(
        report.problems.iter().any(
            |p| p.contains(&format!("inode {dir} (/mail):")) && p.contains("lost: 1, read: 40")
        ),
        "fsck names the path and what was read: {:?}",
        report.problems
    );

    // Read-only: everything else is there, and nothing is written.
    let (pm_image, ssd_image) = (pm.image(), ssd.image());
    let fs = Fs::mount_read_only(pm.clone(), tiers(&ssd)).expect("read-only rescue mount");
    assert!(
        fs.mount_report()
            .damaged
            .iter()
            .any(|d| d.contains("(/mail)")),
        "{:?}",
        fs.mount_report().damaged
    );
    let listed: Vec<Vec<u8>> = fs
        .readdir(dir, 0, 1000)
        .unwrap()
        .into_iter()
        .map(|d| d.name)
        .collect();
    for (name, ino, data) in &files {
        if *name == lost_name {
            assert!(!listed.contains(&name.as_bytes().to_vec()));
            continue;
        }
        assert!(
            listed.contains(&name.as_bytes().to_vec()),
            "{name} not listed"
        );
        assert_eq!(fs.lookup(dir, name.as_bytes()).unwrap().ino, *ino);
        assert_eq!(&fs.read(*ino, 0, data.len() + 10).unwrap(), data, "{name}");
    }
    assert_eq!(fs.read(big, 0, big_data.len()).unwrap(), big_data);
    // The file only the lost name led to is shown where repair will keep
    // it, in memory only: a copy of the mount takes it too.
    let lf = fs.lookup(1, b"lost+found").expect("lost+found shown").ino;
    assert_eq!(fs.getattr(lf).unwrap().mode & 0o7777, 0o700);
    let shown = fs.lookup(lf, format!("#{lost_ino}").as_bytes()).unwrap();
    assert_eq!(shown.ino, lost_ino);
    let (_, _, lost_data) = files.iter().find(|f| f.0 == lost_name).unwrap();
    assert_eq!(
        &fs.read(lost_ino, 0, lost_data.len() + 10).unwrap(),
        lost_data
    );
    assert!(
        fs.mount_report()
            .damaged
            .iter()
            .any(|d| d.contains("1 file that no directory names") && d.contains("/lost+found")),
        "{:?}",
        fs.mount_report().damaged
    );
    fs.unmount().unwrap();
    drop(fs);
    assert!(
        pm.image() == pm_image && ssd.image() == ssd_image,
        "a read-only mount wrote"
    );

    // Repair keeps every other name; the lost one's file is in /lost+found.
    let (report, fs) = repair_and_mount(&pm, &ssd, Fsck::Data);
    assert!(
        report
            .repaired
            .iter()
            .any(|r| r.contains("(/mail)") && r.contains("40 entries")),
        "{:?}",
        report.repaired
    );
    for (name, ino, data) in &files {
        let found = if *name == lost_name {
            let lf = fs.lookup(1, b"lost+found").unwrap().ino;
            fs.lookup(lf, format!("#{lost_ino}").as_bytes())
                .unwrap()
                .ino
        } else {
            fs.lookup(dir, name.as_bytes()).unwrap().ino
        };
        assert_eq!(found, *ino, "{name}");
        assert_eq!(&fs.read(*ino, 0, data.len() + 10).unwrap(), data, "{name}");
    }
    assert_eq!(fs.getxattr(big, b"user.kind").unwrap(), b"archive");
}

#[test]
fn a_flipped_bit_in_a_files_cold_log_gives_eio_read_only_and_repair_keeps_its_data() {
    let (pm, ssd, _dir, files, (big, big_data)) = cold_pool();
    let (start, entries) = blob_entries(&pm, &ssd, big);
    // The second xattr's value: the file's data entries are intact.
    let at = entries
        .iter()
        .find_map(|(at, e)| match e {
            Entry::XattrSet { name, .. } if name == b"user.owner" => Some(*at),
            _ => None,
        })
        .expect("the xattr is in the blob");
    flip(&ssd, start + at as u64 + 30);
    let msg = Fs::mount_with_tiers(pm.clone(), tiers(&ssd))
        .err()
        .expect("refused")
        .to_string();
    assert!(msg.contains(&format!("inode {big} (/big):")), "{msg}");

    let fs = Fs::mount_read_only(pm.clone(), tiers(&ssd)).expect("read-only rescue mount");
    // What was read of it is served, its data is not: it may be incomplete.
    assert_eq!(fs.getattr(big).unwrap().size, big_data.len() as u64);
    assert_eq!(
        fs.read(big, 0, 100).unwrap_err().raw_os_error(),
        Some(libc::EIO)
    );
    assert_eq!(
        fs.open(big, libc::O_RDONLY).unwrap_err().raw_os_error(),
        Some(libc::EIO)
    );
    for (_, ino, data) in &files {
        assert_eq!(&fs.read(*ino, 0, data.len()).unwrap(), data);
    }
    fs.unmount().unwrap();
    drop(fs);

    // Repair keeps the data and the intact xattr; the damaged one is gone.
    let (report, fs) = repair_and_mount(&pm, &ssd, Fsck::Data);
    assert!(
        report
            .repaired
            .iter()
            .any(|r| r.contains("(/big)") && r.contains("rewrote")),
        "{:?}",
        report.repaired
    );
    assert_eq!(fs.read(big, 0, big_data.len() + 1).unwrap(), big_data);
    assert_eq!(fs.getxattr(big, b"user.kind").unwrap(), b"archive");
    assert_eq!(
        fs.getxattr(big, b"user.owner").unwrap_err().raw_os_error(),
        Some(libc::ENODATA)
    );
}

#[test]
fn a_blob_whose_header_is_damaged_is_refused_read_write_served_read_only_and_repair_empties_it() {
    let (pm, ssd, _dir, files, (big, _)) = cold_pool();
    let (start, _) = blob_entries(&pm, &ssd, big);
    flip(&ssd, start + 9); // the owner field: nothing of it is known to be big's
    assert!(Fs::mount_with_tiers(pm.clone(), tiers(&ssd)).is_err());
    let fs = Fs::mount_read_only(pm.clone(), tiers(&ssd)).expect("read-only rescue mount");
    assert_eq!(
        fs.read(big, 0, 100).unwrap_err().raw_os_error(),
        Some(libc::EIO)
    );
    for (_, ino, data) in &files {
        assert_eq!(&fs.read(*ino, 0, data.len()).unwrap(), data);
    }
    fs.unmount().unwrap();
    drop(fs);
    let (report, fs) = repair_and_mount(&pm, &ssd, Fsck::Metadata);
    assert!(
        report
            .repaired
            .iter()
            .any(|r| r.contains("emptied") && r.contains("(/big)")),
        "{:?}",
        report.repaired
    );
    assert_eq!(fs.getattr(big).unwrap().size, 0);
}

/// Damage a read-only mount cannot serve around is still refused: with a
/// block owned by two files, what either reads cannot be trusted.
#[test]
fn a_read_only_mount_refuses_a_pool_whose_blocks_are_owned_twice() {
    let (pm, ssd, _dir, files, _) = cold_pool();
    // Point one file's first data extent at another's: a block owned twice.
    let (start_a, ea) = blob_entries(&pm, &ssd, files[0].1);
    let (_, eb) = blob_entries(&pm, &ssd, files[1].1);
    let (Some((at, Entry::Write(mut wa))), Some((_, Entry::Write(wb)))) = (
        ea.iter()
            .find(|(_, e)| matches!(e, Entry::Write(_)))
            .cloned(),
        eb.iter()
            .find(|(_, e)| matches!(e, Entry::Write(_)))
            .cloned(),
    ) else {
        panic!("data entries")
    };
    wa.block = wb.block;
    // Rewrite the entry and the blob's payload checksum: a well-formed lie.
    let mut blob = vec![0u8; 8192];
    ssd.read_blocks(start_a / 4096, &mut blob).unwrap();
    let off = (start_a % 4096) as usize;
    let enc = Entry::Write(wa).encode();
    blob[off + at..off + at + enc.len()].copy_from_slice(&enc);
    let payload = u64::from_le_bytes(blob[off + 24..off + 32].try_into().unwrap()) as usize;
    let crc = terrace_format::crc(&blob[off + 64..off + 64 + payload]);
    blob[off + 32..off + 36].copy_from_slice(&crc.to_le_bytes());
    let h = terrace_format::crc(&blob[off..off + 60]);
    blob[off + 60..off + 64].copy_from_slice(&h.to_le_bytes());
    ssd.write_blocks(start_a / 4096, &blob).unwrap();
    let e = Fs::mount_read_only(pm.clone(), tiers(&ssd))
        .err()
        .expect("refused");
    assert!(
        e.to_string().contains("block") || e.to_string().contains("owned"),
        "{e}"
    );
}

/// A repair that keeps what reads of a damaged blob writes it to PM log
/// pages only after the same repair corrected the damaged words of other
/// logs: the scan before that could not walk those logs, counted their
/// pages and data blocks free, and the rewritten log took them (found in
/// review, 2026-12-07).
#[test]
fn repair_keeps_a_damaged_blob_without_taking_the_pages_of_a_log_it_corrects() {
    use terrace_format::INODE_OFF_LOG_HEAD;
    let (pm, ssd, _dir, files, (big, big_data)) = cold_pool();
    let fs = mount_tiered(pm.clone(), ssd.clone());
    let hot = file(&fs, 1, "hot");
    let mut want = Vec::new();
    for k in 0..300u64 {
        let piece = pattern(k + 7, 100);
        fs.write(hot, k * 100, &piece).unwrap();
        fs.fsync(hot, false).unwrap();
        want.extend(piece);
    }
    assert!(
        tier_bytes(&fs, hot, "pm") > 0,
        "the hot file's data is on PM"
    );
    fs.unmount().unwrap();
    drop(fs);
    let (start, entries) = blob_entries(&pm, &ssd, big);
    let at = entries
        .iter()
        .find_map(|(at, e)| matches!(e, Entry::XattrSet { .. }).then_some(*at))
        .unwrap();
    flip(&ssd, start + at as u64 + 30);
    // The hot file's head word, one bit off: repair corrects it.
    let addr = inode_offset(hot) + INODE_OFF_LOG_HEAD;
    pm.store_u64(addr, pm.load_u64(addr) ^ 1 << 13);
    pm.persist(addr, 8);

    let (report, fs) = repair_and_mount(&pm, &ssd, Fsck::Data);
    assert!(
        report.repaired.iter().any(|r| r.contains("corrected")),
        "{:?}",
        report.repaired
    );
    assert!(
        report
            .repaired
            .iter()
            .any(|r| r.contains("(/big)") && r.contains("rewrote")),
        "{:?}",
        report.repaired
    );
    assert!(
        fs.read(hot, 0, want.len() + 1).unwrap() == want,
        "the hot file changed"
    );
    assert_eq!(fs.read(big, 0, big_data.len() + 1).unwrap(), big_data);
    for (name, ino, data) in &files {
        assert_eq!(&fs.read(*ino, 0, data.len() + 1).unwrap(), data, "{name}");
    }
}

/// When the entry lost is the attributes one (the last of a blob), the
/// file keeps the size its data entries recorded and only its owner's
/// permissions: a file made private after its creation stays private,
/// read-only mount and repair alike (found in review, 2026-12-07).
#[test]
fn a_lost_attribute_entry_keeps_the_size_and_no_one_but_the_owner_gets_access() {
    let (pm, ssd, _dir, _files, (big, big_data)) = {
        // cold_pool, with big made private before its log moves.
        let (pm, ssd, dir, files, big) = cold_pool();
        let fs = mount_tiered(pm.clone(), ssd.clone());
        fs.setattr(
            big.0,
            terrace_core::SetAttr {
                mode: Some(0o640),
                ..Default::default()
            },
        )
        .unwrap();
        fs.migrate_file(big.0, 1).unwrap();
        assert_eq!(fs.move_logs(&[big.0], 1).unwrap(), 1);
        fs.unmount().unwrap();
        (pm, ssd, dir, files, big)
    };
    let (start, entries) = blob_entries(&pm, &ssd, big);
    let (at, _) = entries
        .iter()
        .find(|(_, e)| matches!(e, Entry::Attr(_)))
        .expect("an attribute entry");
    flip(&ssd, start + *at as u64 + 12);
    let fs = Fs::mount_read_only(pm.clone(), tiers(&ssd)).expect("read-only rescue mount");
    let a = fs.getattr(big).unwrap();
    assert_eq!(a.mode & 0o7777, 0o600, "was 0o640, created 0o644");
    assert_eq!(a.size, big_data.len() as u64);
    fs.unmount().unwrap();
    drop(fs);
    let (report, fs) = repair_and_mount(&pm, &ssd, Fsck::Data);
    assert!(
        report
            .repaired
            .iter()
            .any(|r| r.contains("(/big)") && r.contains("rewrote")),
        "{:?}",
        report.repaired
    );
    assert_eq!(fs.getattr(big).unwrap().mode & 0o7777, 0o600);
    assert_eq!(fs.read(big, 0, big_data.len() + 1).unwrap(), big_data);
}

/// A lost entry that mapped data would leave a hole of zeros where the
/// data was: repair keeps the rest of the file but marks it with
/// `user.terrace.damaged`, and its reads (and copies) fail with EIO until
/// its owner removes the mark, accepting what is left (found by a new
/// user, 2026-12-07: the repaired file read zeros, no error).
#[test]
fn a_file_that_lost_a_data_entry_reads_eio_after_repair_until_its_mark_is_removed() {
    const DAMAGED: &[u8] = b"user.terrace.damaged";
    let (pm, ssd, _dir, files, (big, big_data)) = cold_pool();
    let (start, entries) = blob_entries(&pm, &ssd, big);
    let at = entries
        .iter()
        .find_map(|(at, e)| matches!(e, Entry::Write(_)).then_some(*at))
        .expect("a data entry");
    flip(&ssd, start + at as u64 + 26); // its block number
    let report = fsck::check(&*pm, &tiers(&ssd), &mut |_, _| {}).unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.contains("(/big)") && p.contains("may be incomplete")),
        "{:?}",
        report.problems
    );
    let (_, fs) = repair_and_mount(&pm, &ssd, Fsck::Data);
    assert_eq!(fs.getattr(big).unwrap().size, big_data.len() as u64);
    assert_eq!(
        fs.read(big, 0, 4096).unwrap_err().raw_os_error(),
        Some(libc::EIO)
    );
    let why = String::from_utf8(fs.getxattr(big, DAMAGED).unwrap()).unwrap();
    assert!(why.contains("may be incomplete"), "{why}");
    assert!(fs.listxattr(big).unwrap().contains(&DAMAGED.to_vec()));
    let copy = file(&fs, 1, "copy");
    assert_eq!(
        fs.copy_range(big, 0, copy, 0, 4096)
            .unwrap_err()
            .raw_os_error(),
        Some(libc::EIO)
    );
    assert_eq!(
        fs.setxattr(copy, DAMAGED, b"x", 0)
            .unwrap_err()
            .raw_os_error(),
        Some(libc::EPERM),
        "nobody sets the mark"
    );
    for (name, ino, data) in &files {
        assert_eq!(&fs.read(*ino, 0, data.len() + 1).unwrap(), data, "{name}");
    }
    // The mark survives a remount; its removal gives what is left.
    fs.unmount().unwrap();
    drop(fs);
    let fs = mount_tiered(pm.clone(), ssd.clone());
    assert_eq!(
        fs.read(big, 0, 4096).unwrap_err().raw_os_error(),
        Some(libc::EIO)
    );
    fs.removexattr(big, DAMAGED).unwrap();
    let left = fs.read(big, 0, big_data.len()).unwrap();
    assert_eq!(left.len(), big_data.len());
    assert!(left != big_data, "the lost entry mapped some of the data");
}

/// A pool left by a crash and damaged too: the read-write mount's refusal
/// points to `-o ro`, which serves the pool recovered in memory around
/// the damage, so files can be copied off before the repair (found by a
/// new user, 2026-12-07: `-o ro` refused a pool that needed recovery, and
/// the repair was the only way on).
#[test]
fn a_crashed_and_damaged_pool_mounts_read_only_around_the_damage() {
    let (pm, ssd, _dir, files, (big, _)) = cold_pool();
    let fresh = pattern(77, 9000);
    {
        let fs = mount_tiered(pm.clone(), ssd.clone());
        let f = file_holding(&fs, "fresh", &fresh);
        fs.fsync(f, false).unwrap();
        fs.stop_background_for_crash_test(); // a crash: not clean
    }
    let (start, entries) = blob_entries(&pm, &ssd, big);
    let (at, _) = entries
        .iter()
        .find(|(_, e)| matches!(e, Entry::XattrSet { .. }))
        .unwrap();
    flip(&ssd, start + *at as u64 + 30);
    let msg = Fs::mount_with_tiers(pm.clone(), tiers(&ssd))
        .err()
        .expect("refused")
        .to_string();
    assert!(msg.contains("-o ro") && msg.contains("(/big)"), "{msg}");
    let (pm_image, ssd_image) = (pm.image(), ssd.image());
    let fs = Fs::mount_read_only(pm.clone(), tiers(&ssd)).expect("read-only rescue mount");
    assert!(fs.mount_report().recovered_in_memory);
    assert_eq!(
        fs.read(big, 0, 10).unwrap_err().raw_os_error(),
        Some(libc::EIO)
    );
    let f = fs.lookup(1, b"fresh").unwrap().ino;
    assert_eq!(fs.read(f, 0, fresh.len() + 1).unwrap(), fresh);
    for (name, ino, data) in &files {
        assert_eq!(&fs.read(*ino, 0, data.len() + 1).unwrap(), data, "{name}");
    }
    fs.unmount().unwrap();
    drop(fs);
    assert!(
        pm.image() == pm_image && ssd.image() == ssd_image,
        "it wrote"
    );
}
