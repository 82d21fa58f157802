//! `Fs::readdirplus` (issue 16 point 2): every entry it gives attributes for
//! counts as one kernel lookup, exactly as `Fs::lookup` does, because the
//! kernel makes an inode of it and forgets it later; "." and ".." count
//! nothing. Too few and an unlinked file the kernel still holds would lose
//! its slot under it; too many and deleted files would never free theirs.

mod common;
use common::*;

#[test]
fn entries_listed_with_attributes_count_as_lookups_and_match_getattr() {
    let (_pm, fs) = pm_pool(16 << 20, 256);
    let d = fs.mkdir(1, b"d", 0o755, CTX).unwrap().ino;
    let mut made = Vec::new();
    for i in 0..100u32 {
        let name = format!("f{i}");
        let a = fs
            .mknod(d, name.as_bytes(), libc::S_IFREG | 0o640, 0, CTX)
            .unwrap();
        fs.write(a.ino, 0, &vec![7u8; i as usize * 10]).unwrap();
        fs.forget(a.ino, 1); // the creation's lookup, given back
        made.push((name, a.ino));
    }
    let sub = fs.mkdir(d, b"sub", 0o700, CTX).unwrap().ino;
    fs.forget(sub, 1);

    // In small batches, as the adapter asks for them.
    let mut listed = Vec::new();
    let mut off = 0;
    loop {
        let batch = fs.readdirplus(d, off, 7).unwrap();
        let Some(last) = batch.last() else { break };
        off = last.0.next_offset;
        listed.extend(batch);
    }
    assert_eq!(listed.len(), 2 + 101);
    for (e, attr) in &listed {
        if e.name == b"." || e.name == b".." {
            assert!(attr.is_none(), "{:?} carries attributes", e.name);
            continue;
        }
        let a = attr.as_ref().expect("attributes of a live entry");
        assert_eq!(a.ino, e.ino);
        assert_eq!(*a, fs.getattr(e.ino).unwrap(), "{:?}", e.name);
    }

    // Each listed file holds exactly one lookup: unlinked, it stays
    // readable (the kernel may still stat it) until that one is forgotten.
    for (name, ino) in &made[..50] {
        fs.unlink(d, name.as_bytes()).unwrap();
        assert_eq!(
            fs.getattr(*ino).unwrap().nlink,
            0,
            "{name}: freed while the kernel holds the inode readdirplus gave it"
        );
        fs.forget(*ino, 1);
        assert!(
            fs.getattr(*ino).is_err(),
            "{name}: not freed at its last forget"
        );
    }
    // The directory and its parent were never counted: their lookups are
    // the ones taken here.
    let before = fs.statfs().ffree;
    fs.rmdir(d, b"sub").unwrap();
    fs.forget(sub, 1);
    assert_eq!(fs.statfs().ffree, before + 1, "sub's slot not freed");
}
