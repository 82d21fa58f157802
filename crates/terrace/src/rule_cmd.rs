//! `terrace rule PATH… [TIER]`: show, set or clear per-file placement rules
//! (HetFS). A rule is the stored xattr `user.terrace.rule`; this command
//! reads and writes it through the mount, so it needs no daemon connection
//! and follows the file's permissions, like `setfattr` would.
//!
//! A directory's rules (`rule DIR`, `rule -r DIR TIER`) are walked at any
//! depth, paths longer than `PATH_MAX` included ([`tree_walk`]); an entry
//! that cannot be read or changed is named on a line of its own, and the
//! command then exits 1.
//!
//! A TIER the pool does not have (the mount refuses the rule with EINVAL)
//! is a usage error, as for `migrate --to` and `tier remove`: the path's
//! own rule is refused first, so nothing changes, and the command exits 2.

use crate::util::{self, CliError, CliResult};
use crate::where_cmd::tree_walk::{self, WalkError};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

const RULE: &str = "user.terrace.rule";

fn cpath(path: &Path) -> std::io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))
}

fn name() -> CString {
    CString::new(RULE).expect("no NUL in a constant name")
}

/// The rule of `path` (of any length, as the other calls here: see
/// [`tree_walk::reachable`]): `Ok(None)` when it has none.
fn get(path: &Path) -> std::io::Result<Option<String>> {
    tree_walk::reachable(path, get_at)
}

fn get_at(path: &Path) -> std::io::Result<Option<String>> {
    let p = cpath(path)?;
    let mut buf = vec![0u8; 256];
    // Safety: both strings are NUL-terminated and live across the call; `buf`
    // is writable for `buf.len()` bytes and the kernel writes at most that.
    let n = unsafe {
        libc::getxattr(
            p.as_ptr(),
            name().as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENODATA) => Ok(None),
            _ => Err(e),
        };
    }
    buf.truncate(n as usize);
    Ok(Some(String::from_utf8_lossy(&buf).into_owned()))
}

fn set(path: &Path, tier: &str) -> std::io::Result<()> {
    tree_walk::reachable(path, |reachable| set_at(reachable, tier))
}

fn set_at(path: &Path, tier: &str) -> std::io::Result<()> {
    let p = cpath(path)?;
    // Safety: the strings are NUL-terminated and `tier` is readable for its
    // length during the call.
    let r = unsafe {
        libc::setxattr(
            p.as_ptr(),
            name().as_ptr(),
            tier.as_ptr().cast(),
            tier.len(),
            0,
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn clear(path: &Path) -> std::io::Result<()> {
    tree_walk::reachable(path, clear_at)
}

fn clear_at(path: &Path) -> std::io::Result<()> {
    let p = cpath(path)?;
    // Safety: both strings are NUL-terminated and live across the call.
    let r = unsafe { libc::removexattr(p.as_ptr(), name().as_ptr()) };
    if r < 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ENODATA) {
            return Err(e);
        }
    }
    Ok(())
}

/// What an errno means for a rule.
fn reason(e: &std::io::Error, tier: Option<&str>) -> String {
    match (e.raw_os_error(), tier) {
        (Some(libc::EINVAL), Some(t)) => {
            format!(
                "this pool has no tier {t:?} (a tier is named pm, ssd, hdd, s3 or by its id, \
                 as `terrace status` lists them; `auto` clears)"
            )
        }
        (Some(libc::EOPNOTSUPP), _) => "not on a Terrace mount".into(),
        (Some(libc::EPERM), _) => {
            "rules apply to regular files and directories (or: permission denied)".into()
        }
        _ => util::os_reason(e),
    }
}

/// Whether `path` is on a Terrace mount: only Terrace answers its virtual
/// xattr `user.terrace.access` (so a rule is never stored as a plain xattr
/// on another file system).
fn on_terrace(path: &Path) -> std::io::Result<bool> {
    tree_walk::reachable(path, on_terrace_at)
}

fn on_terrace_at(path: &Path) -> std::io::Result<bool> {
    let p = cpath(path)?;
    let n = CString::new("user.terrace.access").expect("no NUL in a constant name");
    // Safety: both strings are NUL-terminated and live across the call; a
    // null buffer of size 0 only asks for the value's size.
    let r = unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), std::ptr::null_mut(), 0) };
    if r >= 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::ENODATA) | Some(libc::EOPNOTSUPP) => Ok(false),
        _ => Err(e),
    }
}

/// Why `path`, which has no rule xattr, cannot have a rule: a special file
/// (a FIFO, socket or device node) on a Terrace mount answers no rule
/// xattr either, and is named for what it is; anything else is not on a
/// Terrace mount.
fn not_ruled(path: &Path) -> String {
    use std::os::unix::fs::FileTypeExt;
    let kind = tree_walk::reachable(path, |p| std::fs::metadata(p)).map(|m| m.file_type());
    let what = match kind {
        Ok(t) if t.is_fifo() => "a FIFO",
        Ok(t) if t.is_socket() => "a socket",
        Ok(t) if t.is_block_device() || t.is_char_device() => "a device node",
        _ => return "not on a Terrace mount".into(),
    };
    let parent = match path.parent() {
        Some(p) if p.as_os_str().is_empty() => Path::new("."),
        Some(p) => p,
        None => return "not on a Terrace mount".into(),
    };
    if on_terrace(parent).unwrap_or(false) {
        format!("this is {what}: rules apply to regular files and directories")
    } else {
        "not on a Terrace mount".into()
    }
}

/// How `ruled_below` reads a path's rule.
type Rule<'a> = &'a dyn Fn(&Path) -> std::io::Result<Option<String>>;

/// Whether `path` (of any length) is a directory, following a symbolic link.
fn is_dir(path: &Path) -> bool {
    tree_walk::reachable(path, |p| std::fs::metadata(p)).is_ok_and(|m| m.is_dir())
}

/// Every file and directory below `dir` (in name order, depth first) whose
/// `rule` is set, with the rule; symbolic links are not followed and other
/// file systems mounted below are not entered. Entries that cannot be read
/// (or whose `rule` fails) are returned apart, with their error.
fn ruled_below(dir: &Path, rule: Rule) -> (Vec<(PathBuf, String)>, Vec<WalkError>) {
    let mut found = Vec::new();
    let errors = tree_walk::walk_below(dir, &mut |entry| {
        if entry.kind == tree_walk::Kind::Other {
            return Ok(()); // symbolic links, special files
        }
        if let Some(r) = rule(&entry.path)? {
            found.push((entry.path.clone(), r));
        }
        Ok(())
    });
    (found, errors)
}

/// The lines of a listing: each ruled entry whose rule differs from its
/// directory's (`top` has `top_rule`), with how many entries below it share
/// its rule through their directories; with `all`, every ruled entry and no
/// counts. `found` is in walk order (a directory before what is below it).
fn listing(
    top: &Path,
    top_rule: Option<&str>,
    found: &[(PathBuf, String)],
    all: bool,
) -> Vec<(PathBuf, String, usize)> {
    use std::collections::HashMap;
    let mut lines: Vec<(PathBuf, String, usize)> = Vec::new();
    // A ruled directory → the line its own entry counts under (its own, or
    // that of the directory it shares the rule with).
    let mut line_of: HashMap<&Path, usize> = HashMap::new();
    let mut rule_of: HashMap<&Path, &str> = HashMap::new();
    if let Some(r) = top_rule {
        lines.push((top.to_path_buf(), r.to_string(), 0));
        line_of.insert(top, 0);
        rule_of.insert(top, r);
    }
    for (p, r) in found {
        let parent = p.parent().unwrap_or(top);
        let shared = match (rule_of.get(parent), line_of.get(parent)) {
            (Some(pr), Some(&line)) if !all && *pr == r.as_str() => Some(line),
            _ => None,
        };
        let line = match shared {
            Some(line) => {
                lines[line].2 += 1;
                line
            }
            None => {
                lines.push((p.clone(), r.clone(), 0));
                lines.len() - 1
            }
        };
        line_of.insert(p, line);
        rule_of.insert(p, r);
    }
    lines
}

/// `terrace rule DIR`: the directory's own rule, then the rules below it
/// (with `all`, every one; otherwise those that differ from their
/// directory's, the others counted).
fn list(dir: &Path, all: bool) -> std::io::Result<usize> {
    let own = get(dir)?;
    let (found, errors) = ruled_below(dir, &get);
    let lines = listing(dir, own.as_deref(), &found, all);
    if own.is_none() {
        util::out(&format!("{}: auto (no rule)", dir.display()));
    }
    for (p, r, same) in &lines {
        util::out(&format!("{}: {r}", p.display()));
        if *same > 0 {
            util::out(&format!(
                "  and {} below it with the same rule (--all lists them)",
                files_and_directories(*same)
            ));
        }
    }
    if found.is_empty() && errors.is_empty() {
        util::out("  (no file or directory below it has a rule)");
    }
    if !errors.is_empty() {
        util::out(&format!(
            "  (incomplete: {} could not be read, named below)",
            entries_count(errors.len())
        ));
    }
    for (p, e) in &errors {
        eprintln!("terrace: {}", CliError::at(p, reason(e, None)).msg);
    }
    Ok(errors.len())
}

/// "1 entry", "N entries".
/// "1 file or directory", "N files and directories".
fn files_and_directories(n: usize) -> String {
    match n {
        1 => "1 file or directory".into(),
        n => format!("{n} files and directories"),
    }
}

fn entries_count(n: usize) -> String {
    match n {
        1 => "1 entry".into(),
        n => format!("{n} entries"),
    }
}

/// `change` (a set or a clear) on every file and directory below `dir`:
/// how many it changed, and the paths it could not read or change, with why.
fn change_below(
    dir: &Path,
    change: &dyn Fn(&Path) -> std::io::Result<()>,
) -> (usize, Vec<WalkError>) {
    let done = std::cell::Cell::new(0usize);
    let (_, errors) = ruled_below(dir, &|p| {
        change(p)?;
        done.set(done.get() + 1);
        Ok(None)
    });
    (done.get(), errors)
}

/// What a rule set on (or cleared from) a directory does to what is below
/// it: with `recursive`, `change` runs there too (the count is said, each
/// failure named and counted in `failed`); without, a directory that has
/// entries gets a note that they keep their placement.
fn below(
    path: &Path,
    recursive: bool,
    tier: &str,
    change: &dyn Fn(&Path) -> std::io::Result<()>,
    failed: &mut usize,
) {
    if !is_dir(path) {
        return;
    }
    if !recursive {
        let occupied = tree_walk::reachable(path, |p| std::fs::read_dir(p))
            .is_ok_and(|mut d| d.next().is_some());
        if occupied {
            util::out(&format!(
                "  (new files below it inherit the rule; those already there keep theirs: `terrace rule -r {} {tier}` changes them too)",
                path.display()
            ));
        }
        return;
    }
    let (done, errors) = change_below(path, change);
    util::out(&format!(
        "  and {} below it{}",
        files_and_directories(done),
        match errors.len() {
            0 => String::new(),
            n => format!(
                " ({} could not be read or changed, named below)",
                entries_count(n)
            ),
        }
    ));
    for (p, e) in &errors {
        eprintln!("terrace: {}", CliError::at(p, reason(e, Some(tier))).msg);
    }
    *failed += errors.len();
}

/// Whether setting `tier` on a path failed because the pool has no such
/// tier: a usage error (exit code 2), not a failure of the path.
fn unknown_tier(e: &std::io::Error, tier: Option<&str>) -> bool {
    e.raw_os_error() == Some(libc::EINVAL) && tier.is_some_and(|t| t != "auto")
}

/// `terrace rule`.
pub fn run(paths: &[PathBuf], tier: Option<&str>, recursive: bool, all: bool) -> CliResult {
    let mut failed = 0;
    let mut usage = false;
    for path in paths {
        match on_terrace(path) {
            Ok(true) => {}
            Ok(false) => {
                failed += 1;
                eprintln!("terrace: {}", CliError::at(path, not_ruled(path)).msg);
                continue;
            }
            Err(e) => {
                failed += 1;
                eprintln!("terrace: {}", CliError::at(path, util::os_reason(&e)).msg);
                continue;
            }
        }
        let r = match tier {
            None if is_dir(path) => list(path, all).map(|errors| failed += errors),
            None => get(path).map(|r| {
                util::out(&format!(
                    "{}: {}",
                    path.display(),
                    r.as_deref().unwrap_or("auto (no rule)")
                ))
            }),
            Some("auto") => clear(path).map(|()| {
                util::out(&format!("{}: auto (rule cleared)", path.display()));
                below(path, recursive, "auto", &clear, &mut failed);
            }),
            Some(t) => set(path, t).map(|()| {
                util::out(&format!("{}: pinned to {t}", path.display()));
                below(path, recursive, t, &|p| set(p, t), &mut failed);
            }),
        };
        if let Err(e) = r {
            failed += 1;
            usage |= unknown_tier(&e, tier);
            eprintln!("terrace: {}", CliError::at(path, reason(&e, tier)).msg);
        }
    }
    if usage {
        return Err(CliError::usage(String::new()));
    }
    if failed > 0 {
        return Err(CliError::new(String::new()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_listing_finds_every_rule_below_it_in_name_order() {
        let root = std::env::temp_dir().join(format!("terrace-rules-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for d in ["a/deep", "b"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        for f in ["a/deep/wal.log", "a/x", "b/y", "z"] {
            std::fs::write(root.join(f), b"").unwrap();
        }
        std::os::unix::fs::symlink(root.join("a"), root.join("link")).unwrap();
        // Ruled: a/deep (pm), a/deep/wal.log (pm), b/y (hdd), z (ssd).
        let rule = |p: &Path| -> std::io::Result<Option<String>> {
            let rel = p
                .strip_prefix(&root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            Ok(match rel.as_str() {
                "a/deep" | "a/deep/wal.log" => Some("pm".into()),
                "b/y" => Some("hdd".into()),
                "z" => Some("ssd".into()),
                _ => None,
            })
        };
        let (found, errors) = ruled_below(&root, &rule);
        let _ = std::fs::remove_dir_all(&root);
        assert!(errors.is_empty());
        let got: Vec<(String, String)> = found
            .into_iter()
            .map(|(p, r)| {
                (
                    p.strip_prefix(&root)
                        .unwrap()
                        .to_string_lossy()
                        .into_owned(),
                    r,
                )
            })
            .collect();
        let want = [
            ("a/deep", "pm"),
            ("a/deep/wal.log", "pm"),
            ("b/y", "hdd"),
            ("z", "ssd"),
        ];
        assert_eq!(
            got,
            want.map(|(p, r)| (p.to_string(), r.to_string())).to_vec()
        );
    }

    #[test]
    fn a_listing_counts_entries_that_share_their_directorys_rule_under_it() {
        let top = Path::new("/m");
        let found: Vec<(PathBuf, String)> = [
            ("/m/big", "ssd"),
            ("/m/big/a", "ssd"),
            ("/m/big/sub", "ssd"),
            ("/m/big/sub/b", "ssd"),
            ("/m/big/sub/wal", "pm"),
            ("/m/big/z", "hdd"),
            ("/m/loose", "ssd"),
        ]
        .iter()
        .map(|(p, r)| (PathBuf::from(p), r.to_string()))
        .collect();
        let got = listing(top, None, &found, false);
        let want = [
            ("/m/big", "ssd", 3),
            ("/m/big/sub/wal", "pm", 0),
            ("/m/big/z", "hdd", 0),
            ("/m/loose", "ssd", 0),
        ];
        assert_eq!(
            got,
            want.map(|(p, r, n)| (PathBuf::from(p), r.to_string(), n))
                .to_vec()
        );
        // The top's own rule collects what shares it; --all lists everything.
        let got = listing(Path::new("/m/big"), Some("ssd"), &found[1..5], false);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0], (PathBuf::from("/m/big"), "ssd".to_string(), 3));
        let all = listing(top, None, &found, true);
        assert_eq!(all.len(), found.len());
        assert!(all.iter().all(|l| l.2 == 0));
    }
}
