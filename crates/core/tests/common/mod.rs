//! Shared test support: a reference model of a POSIX namespace, random
//! operations applied to both it and the file system, a canonical view of the
//! whole tree used to compare them, and small helpers; pools on test media
//! (`pools`), pools with an object tier (`object`), recovery from crash
//! images (`crash`) and media that change some calls of other media
//! (`hooked`).
#![allow(dead_code)]

mod crash;
mod hooked;
mod object;
mod pools;
#[allow(unused_imports)]
pub use crash::*;
#[allow(unused_imports)]
pub use hooked::*;
#[allow(unused_imports)]
pub use object::*;
#[allow(unused_imports)]
pub use pools::*;

use rand::rngs::StdRng;
use rand::Rng;
use std::collections::{BTreeMap, HashMap};
use terrace_core::{Ctx, FileType, Fs, RenameFlags, SetAttr};

pub const CTX: Ctx = Ctx {
    uid: 0,
    gid: 0,
    umask: 0,
};

/// Canonical summary of one name in the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub kind: &'static str,
    pub data: Vec<u8>,
    pub nlink: u32,
    /// Index of the first path with the same inode (hard links), in path order.
    pub link_group: usize,
    pub xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
}

pub type Tree = BTreeMap<String, Node>;

fn kind_name(k: FileType) -> &'static str {
    match k {
        FileType::Regular => "file",
        FileType::Directory => "dir",
        FileType::Symlink => "symlink",
        _ => "special",
    }
}

/// Walks the whole file system from the root.
pub fn fs_tree(fs: &Fs) -> Tree {
    let mut raw: BTreeMap<String, (u64, Node)> = BTreeMap::new();
    let mut stack = vec![(1u64, String::new())];
    while let Some((dir, path)) = stack.pop() {
        let mut off = 0;
        loop {
            let ents = fs.readdir(dir, off, 64).expect("readdir");
            if ents.is_empty() {
                break;
            }
            for e in &ents {
                off = e.next_offset;
                if e.name == b"." || e.name == b".." {
                    continue;
                }
                let p = format!("{path}/{}", String::from_utf8_lossy(&e.name));
                let a = fs.lookup(dir, &e.name).expect("lookup of listed name");
                fs.forget(a.ino, 1);
                assert_eq!(a.kind, e.kind, "{p}: readdir type differs from stat");
                let data = match a.kind {
                    FileType::Regular => fs.read(a.ino, 0, a.size as usize + 10).expect("read"),
                    FileType::Symlink => fs.readlink(a.ino).expect("readlink"),
                    _ => Vec::new(),
                };
                if a.kind == FileType::Regular {
                    assert_eq!(data.len() as u64, a.size, "{p}: size");
                }
                let mut xattrs = BTreeMap::new();
                for n in fs.listxattr(a.ino).expect("listxattr") {
                    let v = fs.getxattr(a.ino, &n).expect("getxattr");
                    xattrs.insert(n, v);
                }
                raw.insert(
                    p.clone(),
                    (
                        a.ino,
                        Node {
                            kind: kind_name(a.kind),
                            data,
                            nlink: a.nlink,
                            link_group: 0,
                            xattrs,
                        },
                    ),
                );
                if a.kind == FileType::Directory {
                    stack.push((a.ino, p));
                }
            }
        }
    }
    canonical(raw)
}

fn canonical(raw: BTreeMap<String, (u64, Node)>) -> Tree {
    let mut first: HashMap<u64, usize> = HashMap::new();
    raw.into_iter()
        .enumerate()
        .map(|(i, (p, (id, mut n)))| {
            n.link_group = *first.entry(id).or_insert(i);
            (p, n)
        })
        .collect()
}

/// Reference model of the namespace.
#[derive(Clone, Debug)]
pub struct Model {
    pub inodes: HashMap<u64, MInode>,
    next: u64,
}

#[derive(Clone, Debug)]
pub struct MInode {
    pub kind: FileType,
    pub data: Vec<u8>,
    pub children: BTreeMap<Vec<u8>, u64>,
    pub parent: u64,
    pub xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
}

impl Default for Model {
    fn default() -> Self {
        let mut inodes = HashMap::new();
        inodes.insert(
            1,
            MInode {
                kind: FileType::Directory,
                data: vec![],
                children: BTreeMap::new(),
                parent: 1,
                xattrs: BTreeMap::new(),
            },
        );
        Model { inodes, next: 2 }
    }
}

impl Model {
    pub fn nlink(&self, id: u64) -> u32 {
        let i = &self.inodes[&id];
        if i.kind == FileType::Directory {
            2 + i
                .children
                .values()
                .filter(|c| self.inodes[c].kind == FileType::Directory)
                .count() as u32
        } else {
            self.inodes
                .values()
                .flat_map(|d| d.children.values())
                .filter(|&&c| c == id)
                .count() as u32
        }
    }

    pub fn tree(&self) -> Tree {
        let mut raw = BTreeMap::new();
        let mut stack = vec![(1u64, String::new())];
        while let Some((dir, path)) = stack.pop() {
            for (name, &c) in &self.inodes[&dir].children {
                let p = format!("{path}/{}", String::from_utf8_lossy(name));
                let i = &self.inodes[&c];
                raw.insert(
                    p.clone(),
                    (
                        c,
                        Node {
                            kind: kind_name(i.kind),
                            data: i.data.clone(),
                            nlink: self.nlink(c),
                            link_group: 0,
                            xattrs: i.xattrs.clone(),
                        },
                    ),
                );
                if i.kind == FileType::Directory {
                    stack.push((c, p));
                }
            }
        }
        canonical(raw)
    }

    /// All directories as (model id, path components).
    pub fn dirs(&self) -> Vec<(u64, Vec<Vec<u8>>)> {
        let mut out = vec![(1, vec![])];
        let mut i = 0;
        while i < out.len() {
            let (d, p) = out[i].clone();
            for (n, &c) in &self.inodes[&d].children {
                if self.inodes[&c].kind == FileType::Directory {
                    let mut q = p.clone();
                    q.push(n.clone());
                    out.push((c, q));
                }
            }
            i += 1;
        }
        out
    }

    /// Names `id` `name` in directory `dir` (replacing what had the name)
    /// and makes `dir` its parent.
    fn place(&mut self, dir: u64, name: &[u8], id: u64) {
        let d = self.inodes.get_mut(&dir).unwrap();
        d.children.insert(name.to_vec(), id);
        self.inodes.get_mut(&id).unwrap().parent = dir;
    }

    fn is_ancestor(&self, a: u64, mut d: u64) -> bool {
        loop {
            if d == a {
                return true;
            }
            if d == 1 {
                return false;
            }
            d = self.inodes[&d].parent;
        }
    }
}

/// One random operation; directories are given as paths from the root.
#[derive(Clone, Debug)]
pub enum Op {
    Create(Vec<Vec<u8>>, Vec<u8>),
    Mkdir(Vec<Vec<u8>>, Vec<u8>),
    Symlink(Vec<Vec<u8>>, Vec<u8>, Vec<u8>),
    Write(Vec<Vec<u8>>, Vec<u8>, u64, usize, u8),
    Truncate(Vec<Vec<u8>>, Vec<u8>, u64),
    PunchHole(Vec<Vec<u8>>, Vec<u8>, u64, u64),
    Unlink(Vec<Vec<u8>>, Vec<u8>),
    Rmdir(Vec<Vec<u8>>, Vec<u8>),
    Link(Vec<Vec<u8>>, Vec<u8>, Vec<Vec<u8>>, Vec<u8>),
    Rename(Vec<Vec<u8>>, Vec<u8>, Vec<Vec<u8>>, Vec<u8>, u8),
    SetXattr(Vec<Vec<u8>>, Vec<u8>, Vec<u8>, Vec<u8>),
    RemoveXattr(Vec<Vec<u8>>, Vec<u8>, Vec<u8>),
}

const NAMES: [&[u8]; 5] = [b"a", b"b", b"c", b"dd", b"e"];

pub fn random_op(m: &Model, rng: &mut StdRng) -> Op {
    let dirs = m.dirs();
    let d = |rng: &mut StdRng| dirs[rng.gen_range(0..dirs.len())].1.clone();
    let n = |rng: &mut StdRng| NAMES[rng.gen_range(0..NAMES.len())].to_vec();
    match rng.gen_range(0..100) {
        0..=14 => Op::Create(d(rng), n(rng)),
        15..=22 => Op::Mkdir(d(rng), n(rng)),
        23..=25 => Op::Symlink(d(rng), n(rng), vec![b't'; rng.gen_range(1..300)]),
        26..=50 => {
            let off = if rng.gen_bool(0.3) {
                rng.gen_range(0..40000)
            } else {
                rng.gen_range(0..9000)
            };
            Op::Write(d(rng), n(rng), off, rng.gen_range(1..10000), rng.gen())
        }
        51..=57 => Op::Truncate(d(rng), n(rng), rng.gen_range(0..20000)),
        58..=60 => Op::PunchHole(
            d(rng),
            n(rng),
            rng.gen_range(0..12000),
            rng.gen_range(1..12000),
        ),
        61..=68 => Op::Unlink(d(rng), n(rng)),
        69..=73 => Op::Rmdir(d(rng), n(rng)),
        74..=78 => Op::Link(d(rng), n(rng), d(rng), n(rng)),
        79..=92 => Op::Rename(
            d(rng),
            n(rng),
            d(rng),
            n(rng),
            [0, 0, 0, 1, 2][rng.gen_range(0..5)],
        ),
        93..=97 => Op::SetXattr(
            d(rng),
            n(rng),
            format!("user.k{}", rng.gen_range(0..3)).into_bytes(),
            vec![rng.gen(); rng.gen_range(0..100)],
        ),
        _ => Op::RemoveXattr(
            d(rng),
            n(rng),
            format!("user.k{}", rng.gen_range(0..3)).into_bytes(),
        ),
    }
}

fn model_dir(m: &Model, path: &[Vec<u8>]) -> Option<u64> {
    let mut cur = 1;
    for c in path {
        cur = *m.inodes[&cur].children.get(c)?;
        if m.inodes[&cur].kind != FileType::Directory {
            return None;
        }
    }
    Some(cur)
}

/// The regular file `n` in directory `p` of the model, for an operation on
/// its data: else the errno it must fail with (ENOENT, EISDIR for a
/// directory, `other` for any other type).
fn model_file<'a>(
    m: &'a mut Model,
    p: &[Vec<u8>],
    n: &[u8],
    other: i32,
) -> Result<&'a mut MInode, i32> {
    let d = model_dir(m, p).ok_or(libc::ENOENT)?;
    let c = *m.inodes[&d].children.get(n).ok_or(libc::ENOENT)?;
    let i = m.inodes.get_mut(&c).unwrap();
    match i.kind {
        FileType::Regular => Ok(i),
        FileType::Directory => Err(libc::EISDIR),
        _ => Err(other),
    }
}

/// Applies an op to the model; `Err(errno)` as the file system must return.
pub fn apply_model(m: &mut Model, op: &Op) -> Result<(), i32> {
    use libc::*;
    let child = |m: &Model, d: u64, n: &[u8]| m.inodes[&d].children.get(n).copied();
    match op {
        Op::Create(p, n) | Op::Mkdir(p, n) | Op::Symlink(p, n, _) => {
            let d = model_dir(m, p).ok_or(ENOENT)?;
            if child(m, d, n).is_some() {
                return Err(EEXIST);
            }
            let id = m.next;
            m.next += 1;
            let (kind, data) = match op {
                Op::Create(..) => (FileType::Regular, vec![]),
                Op::Mkdir(..) => (FileType::Directory, vec![]),
                Op::Symlink(_, _, t) => (FileType::Symlink, t.clone()),
                _ => unreachable!(),
            };
            m.inodes.insert(
                id,
                MInode {
                    kind,
                    data,
                    children: BTreeMap::new(),
                    parent: d,
                    xattrs: BTreeMap::new(),
                },
            );
            m.inodes.get_mut(&d).unwrap().children.insert(n.clone(), id);
            Ok(())
        }
        Op::Write(p, n, off, len, byte) => {
            let i = model_file(m, p, n, EINVAL)?;
            let end = *off as usize + len;
            if i.data.len() < end {
                i.data.resize(end, 0);
            }
            for (k, b) in i.data[*off as usize..end].iter_mut().enumerate() {
                *b = byte.wrapping_add(k as u8);
            }
            Ok(())
        }
        Op::Truncate(p, n, size) => {
            let i = model_file(m, p, n, EINVAL)?;
            i.data.resize(*size as usize, 0);
            Ok(())
        }
        Op::PunchHole(p, n, off, len) => {
            let i = model_file(m, p, n, ENODEV)?;
            let s = (*off as usize).min(i.data.len());
            let e = ((off + len) as usize).min(i.data.len());
            i.data[s..e].fill(0);
            Ok(())
        }
        Op::Unlink(p, n) | Op::Rmdir(p, n) => {
            let d = model_dir(m, p).ok_or(ENOENT)?;
            let c = child(m, d, n).ok_or(ENOENT)?;
            let is_dir = m.inodes[&c].kind == FileType::Directory;
            match op {
                Op::Unlink(..) if is_dir => return Err(EISDIR),
                Op::Rmdir(..) if !is_dir => return Err(ENOTDIR),
                Op::Rmdir(..) if !m.inodes[&c].children.is_empty() => return Err(ENOTEMPTY),
                _ => {}
            }
            m.inodes.get_mut(&d).unwrap().children.remove(n);
            if m.nlink(c) == 0 || is_dir {
                m.inodes.remove(&c);
            }
            Ok(())
        }
        Op::Link(sp, sn, dp, dn) => {
            let sd = model_dir(m, sp).ok_or(ENOENT)?;
            let s = child(m, sd, sn).ok_or(ENOENT)?;
            let dd = model_dir(m, dp).ok_or(ENOENT)?;
            if m.inodes[&s].kind == FileType::Directory {
                return Err(EPERM);
            }
            if child(m, dd, dn).is_some() {
                return Err(EEXIST);
            }
            m.inodes
                .get_mut(&dd)
                .unwrap()
                .children
                .insert(dn.clone(), s);
            Ok(())
        }
        Op::Rename(sp, sn, dp, dn, flags) => {
            let sd = model_dir(m, sp).ok_or(ENOENT)?;
            let s = child(m, sd, sn).ok_or(ENOENT)?;
            let dd = model_dir(m, dp).ok_or(ENOENT)?;
            let t = child(m, dd, dn);
            let exchange = *flags == 2;
            if exchange && t.is_none() {
                return Err(ENOENT);
            }
            if *flags == 1 && t.is_some() {
                return Err(EEXIST);
            }
            if t == Some(s) {
                return Ok(());
            }
            let s_dir = m.inodes[&s].kind == FileType::Directory;
            let t_dir = t
                .map(|t| m.inodes[&t].kind == FileType::Directory)
                .unwrap_or(false);
            if sd != dd {
                if s_dir && m.is_ancestor(s, dd) {
                    return Err(EINVAL);
                }
                if exchange && t_dir && m.is_ancestor(t.unwrap(), sd) {
                    return Err(EINVAL);
                }
            }
            if exchange {
                m.place(sd, sn, t.unwrap());
                m.place(dd, dn, s);
                return Ok(());
            }
            if let Some(t) = t {
                if s_dir && !t_dir {
                    return Err(ENOTDIR);
                }
                if !s_dir && t_dir {
                    return Err(EISDIR);
                }
                if t_dir && !m.inodes[&t].children.is_empty() {
                    return Err(ENOTEMPTY);
                }
            }
            m.inodes.get_mut(&sd).unwrap().children.remove(sn);
            m.place(dd, dn, s);
            if let Some(t) = t {
                if t_dir || m.nlink(t) == 0 {
                    m.inodes.remove(&t);
                }
            }
            Ok(())
        }
        Op::SetXattr(p, n, k, _) | Op::RemoveXattr(p, n, k) => {
            let d = model_dir(m, p).ok_or(ENOENT)?;
            let c = child(m, d, n).ok_or(ENOENT)?;
            let i = m.inodes.get_mut(&c).unwrap();
            if !matches!(i.kind, FileType::Regular | FileType::Directory) {
                return Err(EPERM);
            }
            if let Op::SetXattr(_, _, _, v) = op {
                i.xattrs.insert(k.clone(), v.clone());
                Ok(())
            } else {
                i.xattrs.remove(k).map(|_| ()).ok_or(ENODATA)
            }
        }
    }
}

/// Resolves a directory path in the file system.
fn fs_dir(fs: &Fs, path: &[Vec<u8>]) -> Result<u64, i32> {
    let mut cur = 1;
    for c in path {
        let a = fs.lookup(cur, c).map_err(|e| e.raw_os_error().unwrap())?;
        fs.forget(a.ino, 1);
        if a.kind != FileType::Directory {
            return Err(libc::ENOTDIR);
        }
        cur = a.ino;
    }
    Ok(cur)
}

fn fs_child(fs: &Fs, path: &[Vec<u8>], n: &[u8]) -> Result<u64, i32> {
    let d = fs_dir(fs, path)?;
    let a = fs.lookup(d, n).map_err(|e| e.raw_os_error().unwrap())?;
    fs.forget(a.ino, 1);
    Ok(a.ino)
}

/// Applies an op to the file system through the core API.
pub fn apply_fs(fs: &Fs, op: &Op) -> Result<(), i32> {
    let e = |r: std::io::Error| r.raw_os_error().unwrap_or(-1);
    match op {
        Op::Create(p, n) => {
            let d = fs_dir(fs, p)?;
            let a = fs.mknod(d, n, libc::S_IFREG | 0o644, 0, CTX).map_err(e)?;
            fs.forget(a.ino, 1);
            Ok(())
        }
        Op::Mkdir(p, n) => {
            let d = fs_dir(fs, p)?;
            let a = fs.mkdir(d, n, 0o755, CTX).map_err(e)?;
            fs.forget(a.ino, 1);
            Ok(())
        }
        Op::Symlink(p, n, t) => {
            let d = fs_dir(fs, p)?;
            let a = fs.symlink(d, n, t, CTX).map_err(e)?;
            fs.forget(a.ino, 1);
            Ok(())
        }
        Op::Write(p, n, off, len, byte) => {
            let c = fs_child(fs, p, n)?;
            let data: Vec<u8> = (0..*len).map(|k| byte.wrapping_add(k as u8)).collect();
            fs.write(c, *off, &data).map(|_| ()).map_err(e)
        }
        Op::Truncate(p, n, size) => {
            let c = fs_child(fs, p, n)?;
            fs.setattr(
                c,
                SetAttr {
                    size: Some(*size),
                    ..Default::default()
                },
            )
            .map(|_| ())
            .map_err(e)
        }
        Op::PunchHole(p, n, off, len) => {
            let c = fs_child(fs, p, n)?;
            fs.fallocate(c, *off, *len, terrace_core::FallocateMode::PunchHole)
                .map_err(e)
        }
        Op::Unlink(p, n) => fs.unlink(fs_dir(fs, p)?, n).map_err(e),
        Op::Rmdir(p, n) => fs.rmdir(fs_dir(fs, p)?, n).map_err(e),
        Op::Link(sp, sn, dp, dn) => {
            let s = fs_child(fs, sp, sn)?;
            let d = fs_dir(fs, dp)?;
            let a = fs.link(s, d, dn).map_err(e)?;
            fs.forget(a.ino, 1);
            Ok(())
        }
        Op::Rename(sp, sn, dp, dn, flags) => {
            let s = fs_dir(fs, sp)?;
            let d = fs_dir(fs, dp)?;
            let f = RenameFlags {
                noreplace: *flags == 1,
                exchange: *flags == 2,
                whiteout: None,
            };
            fs.rename(s, sn, d, dn, f).map_err(e)
        }
        Op::SetXattr(p, n, k, v) => fs.setxattr(fs_child(fs, p, n)?, k, v, 0).map_err(e),
        Op::RemoveXattr(p, n, k) => fs.removexattr(fs_child(fs, p, n)?, k).map_err(e),
    }
}

/// Applies one random operation to `model` and to `fs`: both must give the
/// same result (errno) and then hold the same tree. `ctx` names the step in
/// messages.
pub fn random_step(fs: &Fs, model: &mut Model, rng: &mut StdRng, ctx: &str) {
    let op = random_op(model, rng);
    let want = apply_model(model, &op);
    let got = apply_fs(fs, &op);
    assert_eq!(got, want, "{ctx}: {op:?}");
    assert_same_tree(&fs_tree(fs), &model.tree(), &format!("{ctx} after {op:?}"));
}

/// A short description of how two trees differ (the full Debug output is huge).
pub fn diff_trees(got: &Tree, want: &Tree) -> String {
    let mut out = Vec::new();
    for (p, n) in got {
        match want.get(p) {
            None => out.push(format!("{p}: extra ({}, {} bytes)", n.kind, n.data.len())),
            Some(w) if w != n => {
                let first = n.data.iter().zip(&w.data).position(|(a, b)| a != b);
                out.push(format!(
                    "{p}: got {} {}B nlink {} group {} xattrs {}, want {} {}B nlink {} group {} xattrs {}; first differing byte {first:?}",
                    n.kind, n.data.len(), n.nlink, n.link_group, n.xattrs.len(), w.kind, w.data.len(), w.nlink, w.link_group, w.xattrs.len()
                ))
            }
            _ => {}
        }
    }
    for p in want.keys().filter(|p| !got.contains_key(*p)) {
        out.push(format!("{p}: missing"));
    }
    out.join("\n")
}

/// Panics with a readable message when the trees differ.
pub fn assert_same_tree(got: &Tree, want: &Tree, ctx: &str) {
    if got != want {
        panic!("{ctx}: tree differs:\n{}", diff_trees(got, want));
    }
}

/// A number from the environment variable `name`, or `default`.
pub fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// The base seed of a randomized test: `TERRACE_SEED`, else random; printed so a
/// failure can be repeated.
pub fn base_seed(test: &str) -> u64 {
    let seed = env_u64("TERRACE_SEED", rand::random());
    eprintln!("{test}: base seed {seed} (set TERRACE_SEED to repeat)");
    seed
}

/// `(file offset, length, tier name, block)` of each extent of `ino`, from
/// the virtual xattr `user.terrace.extents` (block `u64::MAX` where it shows
/// none: data in the DRAM cache). A value cut at the xattr size limit ends
/// in ` ...`: only the extents before it are listed.
pub fn extents(fs: &Fs, ino: u64) -> Vec<(u64, u64, String, u64)> {
    let v = fs.getxattr(ino, b"user.terrace.extents").unwrap();
    String::from_utf8(v)
        .unwrap()
        .lines()
        .filter(|l| l.trim() != "...")
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (
                f[0].parse().unwrap(),
                f[1].parse().unwrap(),
                f[2].to_string(),
                f[3].parse().unwrap_or(u64::MAX),
            )
        })
        .collect()
}

/// Bytes of file `ino` on tier `tier` (`pm`, `ssd`, `ssd-copy`, `dram`, …).
pub fn tier_bytes(fs: &Fs, ino: u64, tier: &str) -> u64 {
    extents(fs, ino)
        .into_iter()
        .filter(|e| e.2 == tier)
        .map(|e| e.1)
        .sum()
}

/// The whole file as the file system reads it (size from getattr).
pub fn content(fs: &Fs, ino: u64) -> Vec<u8> {
    let size = fs.getattr(ino).unwrap().size;
    let got = fs.read(ino, 0, size as usize).unwrap();
    assert_eq!(got.len() as u64, size, "short read");
    got
}

/// `len` pseudo-random bytes from `seed`.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    use rand::SeedableRng;
    let mut rng = StdRng::seed_from_u64(seed);
    (0..len).map(|_| rng.gen()).collect()
}
