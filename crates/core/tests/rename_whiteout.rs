//! `RENAME_WHITEOUT` (what overlayfs asks of its upper file system): the
//! rename and the whiteout it leaves at the source name are one commit, the
//! whiteout is a character device 0:0 of mode 0 owned by the caller, and a
//! crash at any point leaves the state before or after with no slot lost.

mod common;
use common::*;
use terrace_core::{Ctx, FileType, Fs, RenameFlags};
use terrace_media::{CrashMedia, LossMode};

const CALLER: Ctx = Ctx {
    uid: 1000,
    gid: 1000,
    umask: 0,
};

fn whiteout() -> RenameFlags {
    RenameFlags {
        whiteout: Some(CALLER),
        ..Default::default()
    }
}

fn errno_of<T: std::fmt::Debug>(r: std::io::Result<T>) -> i32 {
    r.unwrap_err().raw_os_error().expect("an errno")
}

/// The name `name` in `dir` is a whiteout owned by the caller.
fn assert_whiteout(fs: &Fs, dir: u64, name: &str) {
    let a = fs.lookup(dir, name.as_bytes()).unwrap();
    fs.forget(a.ino, 1);
    assert_eq!(a.kind, FileType::CharDevice, "{name}");
    assert_eq!(a.mode, libc::S_IFCHR, "{name}: mode 0");
    assert_eq!(a.rdev, 0, "{name}: device 0:0");
    assert_eq!((a.uid, a.gid, a.nlink), (1000, 1000, 1), "{name}");
}

#[test]
fn a_whiteout_rename_moves_the_source_and_leaves_a_whiteout_in_its_place() {
    let (pm, fs) = pm_pool(8 << 20, 64);
    let f = file_holding(&fs, "a", b"upper data");
    let d = fs.mkdir(1, b"d", 0o755, CTX).unwrap().ino;
    let free_slots = fs.statfs().ffree;

    // Within a directory, across directories, over an existing file, and a
    // directory as the source (overlayfs does all four).
    fs.rename(1, b"a", 1, b"b", whiteout()).unwrap();
    assert_whiteout(&fs, 1, "a");
    assert_eq!(content(&fs, f), b"upper data");
    fs.rename(1, b"b", d, b"c", whiteout()).unwrap();
    assert_whiteout(&fs, 1, "b");
    let victim = file_holding(&fs, "victim", b"old");
    fs.rename(d, b"c", 1, b"victim", whiteout()).unwrap();
    assert_whiteout(&fs, d, "c");
    assert_eq!(
        fs.lookup(1, b"victim").unwrap().ino,
        f,
        "the target was replaced"
    );
    assert_eq!(
        fs.getattr(victim).unwrap().nlink,
        0,
        "the replaced file lost its name"
    );
    let sub = fs.mkdir(1, b"sub", 0o755, CTX).unwrap().ino;
    fs.rename(1, b"sub", d, b"sub2", whiteout()).unwrap();
    assert_whiteout(&fs, 1, "sub");
    assert_eq!(fs.lookup(d, b"sub2").unwrap().ino, sub);
    assert_eq!(
        fs.statfs().ffree,
        free_slots - 2 - 4,
        "one slot per whiteout (and per file made; the replaced file is still looked up)"
    );

    // Refusals create nothing: NOREPLACE onto a name, EXCHANGE with it, a
    // missing source.
    let slots = fs.statfs().ffree;
    let noreplace = RenameFlags {
        noreplace: true,
        ..whiteout()
    };
    let exchange = RenameFlags {
        exchange: true,
        ..whiteout()
    };
    for (flags, want) in [(noreplace, libc::EEXIST), (exchange, libc::EINVAL)] {
        let got = errno_of(fs.rename(1, b"victim", d, b"sub2", flags));
        assert_eq!(got, want, "{flags:?}");
    }
    assert_eq!(
        errno_of(fs.rename(1, b"nothing", d, b"x", whiteout())),
        libc::ENOENT
    );
    assert_eq!(fs.statfs().ffree, slots, "no slot taken by a refusal");
    fs.rename(1, b"victim", d, b"free", noreplace).unwrap();
    assert_whiteout(&fs, 1, "victim");

    // Everything holds after a remount, and fsck finds the pool clean.
    let tree = fs_tree(&fs);
    fs.unmount().unwrap();
    drop(fs);
    let fs = mount(pm.clone());
    assert_same_tree(&fs_tree(&fs), &tree, "after a remount");
    assert_whiteout(&fs, 1, "a");
    fs.unmount().unwrap();
    assert_fsck_clean(&*pm, None, Fsck::Metadata, "after whiteout renames");
}

#[test]
fn a_crash_at_any_point_of_a_whiteout_rename_leaves_before_or_after() {
    for (what, into) in [("same directory", false), ("another directory", true)] {
        let (media, fs) = pm_pool_on(CrashMedia::new(4 << 20), 64);
        file_holding(&fs, "a", b"upper data");
        let d = fs.mkdir(1, b"d", 0o755, CTX).unwrap().ino;
        file_holding(&fs, "target", b"replaced");
        let to = if into { d } else { 1 };
        let before = fs_tree(&fs);
        let (r, trace) = media.trace(|| fs.rename(1, b"a", to, b"target", whiteout()));
        r.unwrap();
        let after = fs_tree(&fs);
        assert_ne!(before, after);
        let n = trace.len();
        for k in 0..=n {
            for mode in [
                LossMode::AllUnflushed,
                LossMode::RandomLines(k as u64),
                LossMode::RandomWords(k as u64 + 7),
            ] {
                let ctx = format!("{what}: crash after event {k}/{n} {mode:?}");
                let (pm, fs) = recover(trace.image_at(k, mode), None, Fsck::Metadata, &ctx);
                assert_before_or_after(&fs_tree(&fs), &before, &after, k == n, &ctx);
                fs.unmount().unwrap();
                assert_fsck_clean(
                    &*pm,
                    None,
                    Fsck::Metadata,
                    &format!("{ctx}: after recovery"),
                );
            }
        }
    }
}
