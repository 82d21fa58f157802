//! POSIX ACLs in the core (`acl.rs`): an access ACL and the mode bits move
//! together — in `setxattr`, in chmod, at creation under a default ACL —
//! each change one commit, so a crash at any point shows the mode and the
//! ACL of before or of after, never one without the other.

mod common;
use common::*;
use terrace_core::acl::{
    Acl, AclEntry, ACL_ACCESS, ACL_DEFAULT, GROUP_OBJ, MASK, OTHER, USER, USER_OBJ,
};
use terrace_core::{Ctx, Fs, SetAttr};
use terrace_media::{CrashMedia, LossMode};

const U: u32 = u32::MAX;

fn acl(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    Acl(entries
        .iter()
        .map(|&(tag, perm, id)| AclEntry { tag, perm, id })
        .collect())
    .encode()
}

/// user::rw-, user:1000:rwx, group::r--, mask::rwx, other::---
fn named() -> Vec<u8> {
    acl(&[
        (USER_OBJ, 6, U),
        (USER, 7, 1000),
        (GROUP_OBJ, 4, U),
        (MASK, 7, U),
        (OTHER, 0, U),
    ])
}

/// A caller with umask 077.
const STRICT: Ctx = Ctx {
    umask: 0o077,
    ..CTX
};

/// Creates regular file `name` (mode 0666 asked) in `dir` as [`STRICT`].
fn create_strict(fs: &Fs, dir: u64, name: &str) -> u64 {
    fs.mknod(dir, name.as_bytes(), libc::S_IFREG | 0o666, 0, STRICT)
        .unwrap()
        .ino
}

fn perms(fs: &Fs, ino: u64) -> u32 {
    fs.getattr(ino).unwrap().mode & 0o7777
}

fn chmod(fs: &Fs, ino: u64, mode: u32) {
    fs.setattr(
        ino,
        SetAttr {
            mode: Some(mode),
            ..Default::default()
        },
    )
    .unwrap();
}

#[test]
fn an_access_acl_sets_the_mode_and_chmod_rewrites_the_acl() {
    let (_pm, fs) = pm_pool(8 << 20, 64);
    let f = file_holding(&fs, "f", b"x");
    chmod(&fs, f, 0o2644);
    fs.setxattr(f, ACL_ACCESS, &named(), 0).unwrap();
    assert_eq!(
        perms(&fs, f),
        0o2670,
        "group bits from the mask, set-GID kept"
    );
    assert_eq!(fs.getxattr(f, ACL_ACCESS).unwrap(), named());
    // chmod: owner, mask and other follow; the named entry and the group
    // entry stay.
    chmod(&fs, f, 0o640);
    let got = Acl::parse(&fs.getxattr(f, ACL_ACCESS).unwrap()).unwrap();
    let perm = |tag| got.0.iter().find(|e| e.tag == tag).unwrap().perm;
    assert_eq!((perm(USER_OBJ), perm(MASK), perm(OTHER)), (6, 4, 0));
    assert_eq!((perm(USER), perm(GROUP_OBJ)), (7, 4));
    // An ACL the mode says entirely replaces the stored one with nothing.
    let minimal = acl(&[(USER_OBJ, 7, U), (GROUP_OBJ, 5, U), (OTHER, 1, U)]);
    fs.setxattr(f, ACL_ACCESS, &minimal, 0).unwrap();
    assert_eq!(perms(&fs, f), 0o751);
    assert_eq!(
        fs.getxattr(f, ACL_ACCESS).unwrap_err().raw_os_error(),
        Some(libc::ENODATA)
    );
    // A caller outside the group without CAP_FSETID loses set-GID.
    chmod(&fs, f, 0o2644);
    fs.setxattr_as(f, ACL_ACCESS, &named(), 0, false).unwrap();
    assert_eq!(perms(&fs, f), 0o670);
    // Malformed values and default ACLs on files are refused, nothing set.
    let e = |r: std::io::Result<()>| r.unwrap_err().raw_os_error();
    assert_eq!(
        e(fs.setxattr(f, ACL_ACCESS, &named()[..10], 0)),
        Some(libc::EINVAL)
    );
    assert_eq!(
        e(fs.setxattr(f, ACL_DEFAULT, &named(), 0)),
        Some(libc::EACCES)
    );
    assert_eq!(perms(&fs, f), 0o670);
}

#[test]
fn new_inodes_take_the_default_acl_and_ignore_the_umask_under_it() {
    let (pm, fs) = pm_pool(8 << 20, 64);
    let d = fs.mkdir(1, b"d", 0o755, CTX).unwrap().ino;
    let dflt = acl(&[
        (USER_OBJ, 7, U),
        (USER, 7, 1000),
        (GROUP_OBJ, 5, U),
        (MASK, 7, U),
        (OTHER, 0, U),
    ]);
    fs.setxattr(d, ACL_DEFAULT, &dflt, 0).unwrap();
    let f = create_strict(&fs, d, "f");
    assert_eq!(perms(&fs, f), 0o660, "masked by the ACL, not the umask");
    assert!(fs.getxattr(f, ACL_ACCESS).is_ok());
    assert!(
        fs.getxattr(f, ACL_DEFAULT).is_err(),
        "files get no default ACL"
    );
    let sub = fs.mkdir(d, b"sub", 0o777, STRICT).unwrap().ino;
    assert_eq!(perms(&fs, sub), 0o770);
    assert_eq!(fs.getxattr(sub, ACL_DEFAULT).unwrap(), dflt, "passed on");
    let (t, _) = fs.tmpfile(d, 0o644, libc::O_WRONLY, STRICT).unwrap();
    assert_eq!(perms(&fs, t.ino), 0o640);
    // Without a default ACL the umask applies.
    let plain = create_strict(&fs, 1, "plain");
    assert_eq!(perms(&fs, plain), 0o600);
    assert!(fs.getxattr(plain, ACL_ACCESS).is_err());
    // All of it after a remount.
    fs.unmount().unwrap();
    drop(fs);
    let fs = mount(pm.clone());
    assert_eq!(perms(&fs, f), 0o660);
    assert_eq!(fs.getxattr(sub, ACL_DEFAULT).unwrap(), dflt);
    fs.unmount().unwrap();
    assert_fsck_clean(&*pm, None, Fsck::Metadata, "after ACLs");
}

/// `-o noacl` (`Fs::set_posix_acls(false)`): stored ACLs stay, but are not
/// applied, as on ext4 — a new inode under a default ACL takes the umask
/// and no ACL, and chmod leaves the access ACL as it was.
#[test]
fn with_acls_off_default_acls_are_not_inherited_and_chmod_leaves_the_acl() {
    let (_pm, fs) = pm_pool(8 << 20, 64);
    let d = fs.mkdir(1, b"d", 0o755, CTX).unwrap().ino;
    let dflt = acl(&[(USER_OBJ, 7, U), (GROUP_OBJ, 7, U), (OTHER, 7, U)]);
    fs.setxattr(d, ACL_DEFAULT, &dflt, 0).unwrap();
    let f = file_holding(&fs, "f", b"x");
    fs.setxattr(f, ACL_ACCESS, &named(), 0).unwrap();
    fs.set_posix_acls(false);
    let g = create_strict(&fs, d, "g");
    assert_eq!(perms(&fs, g), 0o600, "the umask, not the default ACL");
    assert!(fs.getxattr(g, ACL_ACCESS).is_err(), "no ACL passed on");
    let sub = fs.mkdir(d, b"sub", 0o777, STRICT).unwrap().ino;
    assert_eq!(perms(&fs, sub), 0o700);
    assert!(fs.getxattr(sub, ACL_DEFAULT).is_err());
    chmod(&fs, f, 0o600);
    assert_eq!(perms(&fs, f), 0o600);
    assert_eq!(fs.getxattr(f, ACL_ACCESS).unwrap(), named(), "left alone");
    // On again: the stored ACLs apply as before.
    fs.set_posix_acls(true);
    let h = create_strict(&fs, d, "h");
    assert_eq!(perms(&fs, h), 0o666);
}

/// The mode and the access ACL of `ino` in the pool recovered from `img`.
fn mode_and_acl(img: Vec<u8>, ino: u64, ctx: &str) -> (u32, Option<Vec<u8>>) {
    let (pm, fs) = recover(img, None, Fsck::Metadata, ctx);
    let got = (perms(&fs, ino), fs.getxattr(ino, ACL_ACCESS).ok());
    fs.unmount().unwrap();
    assert_fsck_clean(&*pm, None, Fsck::Metadata, ctx);
    got
}

/// One traced change of the crash test.
type Step = Box<dyn Fn(&Fs)>;

#[test]
fn a_crash_never_separates_an_acl_from_its_mode() {
    let (media, fs) = pm_pool_on(CrashMedia::new(4 << 20), 64);
    let f = file_holding(&fs, "f", b"x");
    chmod(&fs, f, 0o644);
    let steps: [(&str, Step); 3] = [
        (
            "setfacl",
            Box::new(move |fs: &Fs| fs.setxattr(f, ACL_ACCESS, &named(), 0).unwrap()),
        ),
        ("chmod", Box::new(move |fs: &Fs| chmod(fs, f, 0o600))),
        (
            "setfacl -b",
            Box::new(move |fs: &Fs| {
                let base = acl(&[(USER_OBJ, 6, U), (GROUP_OBJ, 4, U), (OTHER, 4, U)]);
                fs.setxattr(f, ACL_ACCESS, &base, 0).unwrap()
            }),
        ),
    ];
    for (what, step) in steps {
        let before = (perms(&fs, f), fs.getxattr(f, ACL_ACCESS).ok());
        let ((), trace) = media.trace(|| step(&fs));
        let after = (perms(&fs, f), fs.getxattr(f, ACL_ACCESS).ok());
        assert_ne!(before, after, "{what} changed something");
        let n = trace.len();
        for k in 0..=n {
            for mode in [LossMode::AllUnflushed, LossMode::RandomWords(k as u64)] {
                let ctx = format!("{what}: crash after event {k}/{n} {mode:?}");
                let got = mode_and_acl(trace.image_at(k, mode), f, &ctx);
                assert!(
                    got == after || (k < n && got == before),
                    "{ctx}: {got:?}, before {before:?}, after {after:?}"
                );
            }
        }
    }
}
