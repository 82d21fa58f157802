//! POSIX ACLs (`setfacl`/`getfacl`), as ext4 keeps them: two extended
//! attributes, `system.posix_acl_access` and `system.posix_acl_default`, in
//! the kernel's `posix_acl_xattr` format, and the mode bits kept in step
//! with the access ACL (design.md §5r).
//!
//! The kernel checks permissions against the ACLs itself (it reads them
//! with getxattr and caches them, `FUSE_POSIX_ACL`); what it leaves to the
//! file system, and so to this module, is what ext4 does in `ext4_set_acl`,
//! `ext4_init_acl` and `ext4_acl_chmod`:
//! - setting an access ACL sets the permission bits from it, and an ACL the
//!   mode bits say entirely (owner, group, other only) is not stored
//!   ([`equiv_mode`]);
//! - chmod rewrites the access ACL's owner, mask (or group) and other
//!   entries ([`chmod`]);
//! - a new inode in a directory with a default ACL takes it (directories as
//!   their own default ACL too) and its mode is masked by it, without the
//!   umask ([`inherit`]); without one, the umask applies.
//!
//! Every change is one commit with the mode it goes with (`Fs::setxattr`,
//! `Fs::setattr`, `Fs::new_inode`), so a crash never separates an ACL from
//! its mode bits.

use crate::types::{errno, FsResult};

/// The access ACL's xattr name.
pub const ACL_ACCESS: &[u8] = b"system.posix_acl_access";
/// The default ACL's xattr name (directories only).
pub const ACL_DEFAULT: &[u8] = b"system.posix_acl_default";

/// Whether `name` is one of the two POSIX ACL xattr names.
pub fn is_acl_name(name: &[u8]) -> bool {
    name == ACL_ACCESS || name == ACL_DEFAULT
}

/// `POSIX_ACL_XATTR_VERSION`.
const VERSION: u32 = 2;
/// Entry tags (`ACL_USER_OBJ` …).
pub const USER_OBJ: u16 = 0x01;
/// A named user.
pub const USER: u16 = 0x02;
/// The owning group.
pub const GROUP_OBJ: u16 = 0x04;
/// A named group.
pub const GROUP: u16 = 0x08;
/// The mask of named entries and the group.
pub const MASK: u16 = 0x10;
/// Everyone else.
pub const OTHER: u16 = 0x20;
/// `ACL_UNDEFINED_ID`: the id field of entries without one.
const UNDEFINED_ID: u32 = u32::MAX;
/// Entries an ACL may hold (ext4 fits about as many in a block; the value
/// must also fit Terrace's 64 KiB xattr values).
pub const MAX_ENTRIES: usize = 8191;

/// One ACL entry: tag, permission bits (rwx = 4, 2, 1) and uid/gid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AclEntry {
    /// `USER_OBJ`, `USER`, `GROUP_OBJ`, `GROUP`, `MASK` or `OTHER`.
    pub tag: u16,
    /// `rwx` bits.
    pub perm: u16,
    /// uid (`USER`) or gid (`GROUP`); undefined for the others.
    pub id: u32,
}

/// A parsed, validated ACL (entries in the kernel's order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acl(pub Vec<AclEntry>);

impl Acl {
    /// Parses and checks an xattr value (`posix_acl_from_xattr` and
    /// `posix_acl_valid`): EINVAL for a bad version, size, tag, permission,
    /// order or a missing required entry.
    pub fn parse(value: &[u8]) -> FsResult<Acl> {
        if value.len() < 4 || (value.len() - 4) % 8 != 0 {
            return Err(errno(libc::EINVAL));
        }
        if u32::from_le_bytes(value[..4].try_into().expect("4 bytes")) != VERSION {
            return Err(errno(libc::EOPNOTSUPP));
        }
        let n = (value.len() - 4) / 8;
        if n > MAX_ENTRIES {
            return Err(errno(libc::E2BIG));
        }
        let mut entries = Vec::with_capacity(n);
        for k in 0..n {
            let e = &value[4 + 8 * k..12 + 8 * k];
            let tag = u16::from_le_bytes([e[0], e[1]]);
            let perm = u16::from_le_bytes([e[2], e[3]]);
            let id = u32::from_le_bytes([e[4], e[5], e[6], e[7]]);
            let id = if matches!(tag, USER | GROUP) {
                id
            } else {
                UNDEFINED_ID
            };
            entries.push(AclEntry { tag, perm, id });
        }
        let acl = Acl(entries);
        acl.check()?;
        Ok(acl)
    }

    /// `posix_acl_valid`: one owner, group and other entry; a mask when
    /// there is any named entry; named entries in ascending, distinct id
    /// order; tags in the order above; permissions within rwx.
    fn check(&self) -> FsResult<()> {
        let bad = || errno(libc::EINVAL);
        let (mut state, mut needs_mask, mut has_mask) = (USER_OBJ, false, false);
        let mut last_id: Option<u32> = None;
        for e in &self.0 {
            if e.perm & !7 != 0 {
                return Err(bad());
            }
            match e.tag {
                USER_OBJ if state == USER_OBJ => state = USER,
                USER if state == USER => {
                    if last_id.is_some_and(|l| e.id <= l) {
                        return Err(bad());
                    }
                    last_id = Some(e.id);
                    needs_mask = true;
                }
                GROUP_OBJ if state == USER => {
                    state = GROUP;
                    last_id = None;
                }
                GROUP if state == GROUP => {
                    if last_id.is_some_and(|l| e.id <= l) {
                        return Err(bad());
                    }
                    last_id = Some(e.id);
                    needs_mask = true;
                }
                MASK if state == GROUP => {
                    state = OTHER;
                    has_mask = true;
                }
                OTHER if state == OTHER || state == GROUP => state = 0,
                _ => return Err(bad()),
            }
        }
        if state != 0 || (needs_mask && !has_mask) {
            return Err(bad());
        }
        Ok(())
    }

    /// The xattr value (`posix_acl_to_xattr`).
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(4 + 8 * self.0.len());
        v.extend_from_slice(&VERSION.to_le_bytes());
        for e in &self.0 {
            v.extend_from_slice(&e.tag.to_le_bytes());
            v.extend_from_slice(&e.perm.to_le_bytes());
            v.extend_from_slice(&e.id.to_le_bytes());
        }
        v
    }

    fn perm_of(&self, tag: u16) -> Option<u16> {
        self.0.iter().find(|e| e.tag == tag).map(|e| e.perm)
    }

    fn set_perm(&mut self, tag: u16, perm: u16) {
        if let Some(e) = self.0.iter_mut().find(|e| e.tag == tag) {
            e.perm = perm;
        }
    }
}

/// `posix_acl_equiv_mode`: the permission bits the access ACL `acl` sets
/// (owner, mask or else group, other), and whether the ACL says no more
/// than they do (then it need not be stored).
pub fn equiv_mode(acl: &Acl) -> (u32, bool) {
    let p = |t| acl.perm_of(t).unwrap_or(0) as u32;
    let group = acl.perm_of(MASK).map_or(p(GROUP_OBJ), |m| m as u32);
    let bits = (p(USER_OBJ) << 6) | (group << 3) | p(OTHER);
    let equiv = acl
        .0
        .iter()
        .all(|e| matches!(e.tag, USER_OBJ | GROUP_OBJ | OTHER));
    (bits, equiv)
}

/// `posix_acl_chmod`: the access ACL after the permission bits became
/// `mode` (owner, mask or else group, other).
pub fn chmod(acl: &Acl, mode: u32) -> Acl {
    let mut a = acl.clone();
    a.set_perm(USER_OBJ, ((mode >> 6) & 7) as u16);
    if a.perm_of(MASK).is_some() {
        a.set_perm(MASK, ((mode >> 3) & 7) as u16);
    } else {
        a.set_perm(GROUP_OBJ, ((mode >> 3) & 7) as u16);
    }
    a.set_perm(OTHER, (mode & 7) as u16);
    a
}

/// What a new inode of `mode` (type bits included, no umask applied) takes
/// from its directory's default ACL `default` (`posix_acl_create`): its
/// mode, masked by the ACL; the access ACL to store (none when the mode
/// says it all); and, for a directory, the default ACL to store.
pub fn inherit(default: &Acl, mode: u32) -> (u32, Option<Acl>, Option<Acl>) {
    let is_dir = mode & libc::S_IFMT == libc::S_IFDIR;
    let mut access = default.clone();
    // posix_acl_create_masq: owner, other and the mask (or the group) are
    // cut to the mode's bits, and the mode to theirs.
    let mut m = mode;
    for e in access.0.iter_mut() {
        let (shift, applies) = match e.tag {
            USER_OBJ => (6, true),
            OTHER => (0, true),
            _ => (0, false),
        };
        if applies {
            e.perm &= ((mode >> shift) & 7) as u16;
            m &= !(0o7 << shift) | ((e.perm as u32) << shift);
        }
    }
    let group_tag = if access.perm_of(MASK).is_some() {
        MASK
    } else {
        GROUP_OBJ
    };
    if let Some(e) = access.0.iter_mut().find(|e| e.tag == group_tag) {
        e.perm &= ((mode >> 3) & 7) as u16;
        m &= !0o070 | ((e.perm as u32) << 3);
    }
    let (_, equiv) = equiv_mode(&access);
    let dir_default = is_dir.then(|| default.clone());
    (m, (!equiv).then_some(access), dir_default)
}

/// Checks a value for `name` before it is stored on an inode of type
/// `kind_mode` (`S_IFMT` bits): a default ACL only on a directory (EACCES
/// otherwise, as the VFS answers).
pub fn check_target(name: &[u8], kind_mode: u32) -> FsResult<()> {
    if name == ACL_DEFAULT && kind_mode & libc::S_IFMT != libc::S_IFDIR {
        return Err(errno(libc::EACCES));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(tag: u16, perm: u16, id: u32) -> AclEntry {
        AclEntry { tag, perm, id }
    }

    fn base(u: u16, g: u16, o: u16) -> Acl {
        Acl(vec![
            e(USER_OBJ, u, UNDEFINED_ID),
            e(GROUP_OBJ, g, UNDEFINED_ID),
            e(OTHER, o, UNDEFINED_ID),
        ])
    }

    fn named() -> Acl {
        Acl(vec![
            e(USER_OBJ, 7, UNDEFINED_ID),
            e(USER, 6, 1000),
            e(USER, 4, 1001),
            e(GROUP_OBJ, 5, UNDEFINED_ID),
            e(GROUP, 1, 50),
            e(MASK, 6, UNDEFINED_ID),
            e(OTHER, 4, UNDEFINED_ID),
        ])
    }

    #[test]
    fn values_round_trip_and_malformed_ones_are_refused() {
        for acl in [base(6, 4, 4), named()] {
            assert_eq!(Acl::parse(&acl.encode()).unwrap(), acl);
        }
        let mut v = named().encode();
        v[0] = 1;
        assert_eq!(
            Acl::parse(&v).unwrap_err().raw_os_error(),
            Some(libc::EOPNOTSUPP)
        );
        assert!(Acl::parse(&named().encode()[..11]).is_err(), "a cut entry");
        let bad = [
            // No mask although there are named entries.
            Acl(vec![
                e(USER_OBJ, 7, 0),
                e(USER, 6, 1),
                e(GROUP_OBJ, 5, 0),
                e(OTHER, 4, 0),
            ]),
            // Named users out of order, and twice the same.
            Acl(vec![
                e(USER_OBJ, 7, 0),
                e(USER, 6, 9),
                e(USER, 6, 3),
                e(GROUP_OBJ, 5, 0),
                e(MASK, 7, 0),
                e(OTHER, 4, 0),
            ]),
            // No owner entry; a permission beyond rwx; an unknown tag.
            Acl(vec![e(GROUP_OBJ, 5, 0), e(OTHER, 4, 0)]),
            base(8, 4, 4),
            Acl(vec![
                e(USER_OBJ, 7, 0),
                e(0x40, 1, 0),
                e(GROUP_OBJ, 5, 0),
                e(OTHER, 4, 0),
            ]),
        ];
        for acl in bad {
            assert_eq!(
                Acl::parse(&acl.encode()).unwrap_err().raw_os_error(),
                Some(libc::EINVAL),
                "{acl:?}"
            );
        }
    }

    #[test]
    fn the_mode_follows_the_mask_and_a_base_only_acl_is_equivalent() {
        assert_eq!(equiv_mode(&base(6, 4, 0)), (0o640, true));
        assert_eq!(
            equiv_mode(&named()),
            (0o764, false),
            "group bits are the mask"
        );
    }

    #[test]
    fn chmod_rewrites_owner_mask_and_other_but_not_the_group_entry() {
        let a = chmod(&named(), 0o750);
        assert_eq!(a.perm_of(USER_OBJ), Some(7));
        assert_eq!(a.perm_of(MASK), Some(5));
        assert_eq!(a.perm_of(GROUP_OBJ), Some(5), "kept");
        assert_eq!(a.perm_of(OTHER), Some(0));
        assert_eq!(chmod(&base(7, 7, 7), 0o640), base(6, 4, 0));
    }

    #[test]
    fn new_inodes_take_the_default_acl_masked_by_their_mode() {
        // A file created 0666 under the default ACL `named`: owner rw,
        // mask rw (from 6 & 6), other r.
        let (mode, access, dflt) = inherit(&named(), libc::S_IFREG | 0o666);
        assert_eq!(mode, libc::S_IFREG | 0o664);
        let a = access.expect("named entries: not equivalent");
        assert_eq!(a.perm_of(USER_OBJ), Some(6));
        assert_eq!(a.perm_of(MASK), Some(6));
        assert_eq!(
            a.perm_of(USER),
            Some(6),
            "named entries are kept as they are"
        );
        assert!(dflt.is_none(), "files get no default ACL");
        // A directory keeps the default ACL as its own default.
        let (mode, _, dflt) = inherit(&named(), libc::S_IFDIR | 0o777);
        assert_eq!(mode, libc::S_IFDIR | 0o764);
        assert_eq!(dflt, Some(named()));
        // A base-only default ACL leaves only mode bits.
        let (mode, access, _) = inherit(&base(7, 5, 0), libc::S_IFREG | 0o666);
        assert_eq!((mode, access), (libc::S_IFREG | 0o640, None));
    }
}
