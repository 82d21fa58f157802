//! `terrace where PATH`: which tier holds each part of a file, or, for a
//! directory, how much of the data of the files below it each tier holds.
//!
//! The extents come from the daemon serving the mount, over its control
//! channel (request [`GetExtents`], by inode number: a file's `st_ino` on the
//! mount is its inode number in the pool), so the listing is complete however
//! many extents a file has. When no daemon answers (an older daemon, a
//! control socket this user cannot reach), the read-only virtual xattr
//! `user.terrace.extents` is read instead; it stops at 64 KiB (about 2,700
//! extents), and a listing cut there is flagged and fails with exit code 1.
//!
//! A pinned file (`terrace rule`) whose data is not all on its rule's tier
//! is said not to meet its rule, and why: not moved yet (room); damaged
//! data — a move found blocks failing their checksums, and no move is tried
//! until the file's data changes; or data pinned to PM moved off it to keep
//! room for metadata (PM full of pinned data) — the daemon's read-only
//! xattr `user.terrace.moves` tells the last two apart from room (an older
//! daemon, or one remounted since, does not: room is said).
//!
//! By default adjacent extents on the same tier are shown as one run (with
//! how many extents it joins); `--all` lists every extent with its block
//! address and write-size counter; `--json` gives both.
//!
//! A directory's summary walks it at any depth ([`tree_walk`]) and counts
//! each file once however many names (hard links) it has, as du does; an
//! entry the walk cannot read is named, and the command then exits 1.

pub(crate) mod tree_walk;

use crate::control::protocol::{ExtentRow, GetExtents};
use crate::control::{self};
use crate::util::{self, CliError, CliResult};
use std::collections::{BTreeMap, HashMap};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The value of xattr `name` of `path` (of any length: see
/// [`tree_walk::reachable`]).
fn getxattr(path: &Path, name: &str) -> std::io::Result<Vec<u8>> {
    tree_walk::reachable(path, |reachable| getxattr_at(reachable, name))
}

fn getxattr_at(path: &Path, name: &str) -> std::io::Result<Vec<u8>> {
    let p = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    let n = CString::new(name).expect("no NUL in a constant name");
    let mut buf = vec![0u8; 65536];
    // Safety: both strings are NUL-terminated and live across the call; `buf` is
    // writable for `buf.len()` bytes and the kernel writes at most that many.
    let len = unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if len < 0 {
        return Err(std::io::Error::last_os_error());
    }
    buf.truncate(len as usize);
    Ok(buf)
}

fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Bytes of the file's current data on each tier. Cached data (`dram`)
/// shadows the committed extents it overlaps until it is written back, so
/// those bytes count once, as `dram`; clean copies (`<tier>-copy`) are second
/// locations of data already counted and are summed apart, under their own
/// names. The sum over the non-copy tiers is the file's allocated size.
pub(crate) fn bytes_per_tier(rows: &[ExtentRow]) -> BTreeMap<String, u64> {
    let mut cached: Vec<(u64, u64)> = rows
        .iter()
        .filter(|r| r.tier == "dram")
        .map(|r| (r.offset, r.offset + r.length))
        .collect();
    cached.sort_unstable();
    let mut per_tier: BTreeMap<String, u64> = BTreeMap::new();
    for r in rows {
        let (start, end) = (r.offset, r.offset + r.length);
        let mut bytes = r.length;
        if r.tier != "dram" {
            // Cached ranges that overlap [start, end) (they do not overlap
            // each other).
            let first = cached.partition_point(|&(_, e)| e <= start);
            for &(s, e) in cached[first..].iter().take_while(|&&(s, _)| s < end) {
                bytes -= e.min(end) - s.max(start);
            }
        }
        *per_tier.entry(r.tier.clone()).or_default() += bytes;
    }
    per_tier
}

/// Adjacent extents on one tier, shown as one line.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
struct Run {
    offset: u64,
    length: u64,
    tier: String,
    /// How many extents it joins.
    extents: u64,
}

/// Joins extents that follow each other in the file on the same tier
/// (wherever their blocks are), in file order. Copies and cached data are
/// tiers of their own here, so their runs sit beside the primary ones.
fn coalesce(rows: &[ExtentRow]) -> Vec<Run> {
    let mut out: Vec<Run> = Vec::new();
    let mut open: HashMap<&str, usize> = HashMap::new();
    for r in rows {
        match open.get(r.tier.as_str()) {
            Some(&k) if out[k].offset + out[k].length == r.offset => {
                out[k].length += r.length;
                out[k].extents += 1;
            }
            _ => {
                open.insert(&r.tier, out.len());
                out.push(Run {
                    offset: r.offset,
                    length: r.length,
                    tier: r.tier.clone(),
                    extents: 1,
                });
            }
        }
    }
    // Stable: a copy stays after its primary at the same offset.
    out.sort_by_key(|r| r.offset);
    out
}

/// Runs on the device of each block tier (ssd, hdd, or a tier id; not pm,
/// s3, copies or cached data) in file order: a row continues the run when
/// its blocks follow the run's on the device. Returns (tier, runs, bytes).
/// What `terrace migrate --defragment` counts (`core/src/migrate/defrag.rs`).
fn device_runs(rows: &[ExtentRow]) -> Vec<(String, u64, u64)> {
    let mut out: BTreeMap<String, (u64, u64, Option<u64>)> = BTreeMap::new();
    for r in rows {
        let Some(block) = r.block else { continue };
        if r.tier == "pm" || r.tier == "s3" || r.tier.ends_with("-copy") {
            continue;
        }
        let e = out.entry(r.tier.clone()).or_insert((0, 0, None));
        if e.2 != Some(block) {
            e.0 += 1;
        }
        e.1 += r.length;
        e.2 = Some(block + r.length.div_ceil(4096));
    }
    out.into_iter().map(|(t, (n, b, _))| (t, n, b)).collect()
}

/// Average run length below which `--defragment` rewrites a file (as the
/// core's `DEFRAG_RUN_BYTES`).
const FRAGMENTED_BELOW: u64 = 256 << 10;

/// What a file that is not a regular file is ("a directory"), for the
/// note under its (empty) extent list; `None` for a regular file.
fn not_a_file(ft: std::fs::FileType) -> Option<&'static str> {
    use std::fs::FileType;
    use std::os::unix::fs::FileTypeExt;
    type Is = fn(&FileType) -> bool;
    const KINDS: [(Is, &str); 6] = [
        (FileType::is_dir, "a directory"),
        (FileType::is_symlink, "a symbolic link"),
        (FileTypeExt::is_fifo, "a FIFO"),
        (FileTypeExt::is_socket, "a socket"),
        (FileTypeExt::is_char_device, "a character device"),
        (FileTypeExt::is_block_device, "a block device"),
    ];
    if ft.is_file() {
        return None;
    }
    let kind = KINDS.iter().find(|(is, _)| is(&ft));
    Some(kind.map_or("a special file", |&(_, name)| name))
}

/// The innermost FUSE mount holding `path`, if any.
fn fuse_mount_of(path: &Path) -> Option<PathBuf> {
    let abs = util::abs_path(path);
    util::mounts()
        .into_iter()
        .rev()
        .filter(|m| abs.starts_with(&m.mount_point))
        .max_by_key(|m| m.mount_point.as_os_str().len())
        .filter(|m| m.fstype.starts_with("fuse"))
        .map(|m| m.mount_point)
}

/// Files per `extents` request of a directory's summary.
const REQUEST_FILES: usize = 256;

/// Reads extents: from the daemon while it answers, else from the xattr.
struct Reader {
    /// The daemon's control socket, until it fails to answer.
    socket: Option<PathBuf>,
    /// Some xattr listing was cut at 64 KiB.
    cut: bool,
}

impl Reader {
    fn new(path: &Path) -> Reader {
        Reader {
            socket: fuse_mount_of(path).map(|m| util::control_socket(&m)),
            cut: false,
        }
    }

    /// The extents of each of `files` (path, inode number), or why not; a
    /// file listed under several names gets its answer under each.
    fn read(&mut self, files: &[(PathBuf, u64)]) -> Vec<Result<Vec<ExtentRow>, String>> {
        if let Some(socket) = &self.socket {
            let req = GetExtents {
                inos: files.iter().map(|f| f.1).collect(),
            };
            match control::call(socket, req, Duration::from_secs(120)) {
                Ok(reply) => {
                    let mut got: HashMap<u64, Result<Vec<ExtentRow>, String>> = HashMap::new();
                    for f in reply.files {
                        got.insert(f.ino, Ok(f.extents));
                    }
                    for f in reply.failed {
                        got.insert(f.ino, Err(f.error));
                    }
                    return files
                        .iter()
                        .map(|(_, ino)| {
                            got.get(ino)
                                .cloned()
                                .unwrap_or_else(|| Err("the daemon did not list it".into()))
                        })
                        .collect();
                }
                // No daemon (or one that does not know the request): the
                // xattr still answers, up to 64 KiB, and tells a mount that
                // is not Terrace's.
                Err(_) => self.socket = None,
            }
        }
        files.iter().map(|(p, _)| self.read_xattr(p)).collect()
    }

    fn read_xattr(&mut self, path: &Path) -> Result<Vec<ExtentRow>, String> {
        let raw = match getxattr(path, "user.terrace.extents") {
            Ok(v) => v,
            Err(e)
                if e.raw_os_error() == Some(libc::ENODATA)
                    || e.raw_os_error() == Some(libc::EOPNOTSUPP) =>
            {
                return Err("not on a Terrace mount".into());
            }
            Err(e) => return Err(util::os_reason(&e)),
        };
        let text = String::from_utf8_lossy(&raw);
        if text.ends_with(" ...") {
            self.cut = true;
        }
        Ok(text.lines().filter_map(parse_xattr_line).collect())
    }
}

/// One line of `user.terrace.extents`: `offset length tier block counter`.
fn parse_xattr_line(line: &str) -> Option<ExtentRow> {
    let f: Vec<&str> = line.split_whitespace().collect();
    if f.len() != 5 {
        return None;
    }
    Some(ExtentRow {
        offset: f[0].parse().ok()?,
        length: f[1].parse().ok()?,
        tier: f[2].to_string(),
        block: f[3].parse().ok(),
        counter: f[4].parse().unwrap_or(0),
    })
}

/// The error of a listing cut at the xattr's 64 KiB.
fn cut_error(path: &Path) -> CliError {
    CliError::at(
        path,
        "listing incomplete: the daemon's control channel did not answer and the xattr \
         user.terrace.extents stops at 64 KiB (the totals above count only the extents listed)",
    )
}

/// `terrace where PATH [--all] [--json]`.
pub fn run(path: &Path, all: bool, as_json: bool) -> CliResult {
    let md = std::fs::metadata(path).map_err(|e| CliError::at(path, util::os_reason(&e)))?;
    let mut reader = Reader::new(path);
    if md.is_dir() {
        return directory(path, &mut reader, as_json);
    }
    let rows = reader
        .read(&[(path.to_path_buf(), md.ino())])
        .pop()
        .expect("one answer per file")
        .map_err(|e| CliError::at(path, e))?;
    let per_tier = bytes_per_tier(&rows);
    let runs = coalesce(&rows);
    // The file's placement rule (stored xattr) and HetFS access class (virtual).
    let rule = getxattr(path, "user.terrace.rule")
        .ok()
        .map(|v| String::from_utf8_lossy(&v).into_owned());
    let access = getxattr(path, "user.terrace.access")
        .ok()
        .map(|v| String::from_utf8_lossy(&v).into_owned());
    // What stops its moves (an older daemon has no such xattr: not known,
    // so not said).
    let moves = getxattr(path, MOVES_XATTR).map_or(Moves::Free, |v| Moves::parse(&v));
    if as_json {
        let extents: Vec<serde_json::Value> = rows
            .iter()
            .map(|r| serde_json::json!({"offset": r.offset, "length": r.length, "tier": r.tier, "block": r.block, "size_counter": r.counter}))
            .collect();
        util::out(
            &serde_json::json!({"path": path, "size": md.len(), "extents": extents, "runs": runs,
                "bytes_per_tier": per_tier, "complete": !reader.cut, "rule": rule, "access": access,
                "damaged_data": moves == Moves::Damaged,
                "yielded_to_metadata": moves == Moves::Yielded})
            .to_string(),
        );
    } else {
        print_file(path, &md, &rows, &runs, all, &per_tier, rule, access, moves);
    }
    if reader.cut {
        return Err(cut_error(path));
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn print_file(
    path: &Path,
    md: &std::fs::Metadata,
    rows: &[ExtentRow],
    runs: &[Run],
    all: bool,
    per_tier: &BTreeMap<String, u64>,
    rule: Option<String>,
    access: Option<String>,
    moves: Moves,
) {
    let mut o = String::new();
    o.push_str(&format!("{}\n", path.display()));
    if all {
        o.push_str(&format!(
            "{:>14} {:>12}  {:<4} {:>12} {:>7}\n",
            "offset", "length", "tier", "block", "counter"
        ));
        for r in rows {
            let block = r.block.map_or_else(|| "-".to_string(), |b| b.to_string());
            o.push_str(&format!(
                "{:>14} {:>12}  {:<4} {:>12} {:>7}\n",
                r.offset, r.length, r.tier, block, r.counter
            ));
        }
    } else {
        o.push_str(&format!(
            "{:>14} {:>12}  {:<4} {:>8}\n",
            "offset", "length", "tier", "extents"
        ));
        for r in runs {
            o.push_str(&format!(
                "{:>14} {:>12}  {:<4} {:>8}\n",
                r.offset, r.length, r.tier, r.extents
            ));
        }
    }
    if rows.is_empty() {
        match not_a_file(md.file_type()) {
            Some(what) => o.push_str(&format!("  (no data blocks: {what}, not a regular file)\n")),
            None => o.push_str("  (no data blocks: empty or sparse file)\n"),
        }
    }
    let summary: Vec<String> = per_tier
        .iter()
        .map(|(t, b)| format!("{t} {}", human(*b)))
        .collect();
    o.push_str(&format!(
        "total: {}\n",
        if summary.is_empty() {
            "0 B".into()
        } else {
            summary.join(", ")
        }
    ));
    if !all && runs.len() != rows.len() {
        o.push_str(&format!(
            "extents: {} in {} run{} (--all lists each)\n",
            rows.len(),
            runs.len(),
            if runs.len() == 1 { "" } else { "s" }
        ));
    }
    for (tier, n, bytes) in device_runs(rows) {
        let avg = bytes / n.max(1);
        o.push_str(&format!(
            "on the {tier} device: {n} run{} of {} on average{}\n",
            if n == 1 { "" } else { "s" },
            human(avg),
            if n > 1 && avg < FRAGMENTED_BELOW {
                " (fragmented: sequential reads are random there; \
                 `terrace migrate --defragment` rewrites it in order)"
            } else {
                ""
            }
        ));
    }
    o.push_str(&format!(
        "rule: {}{}",
        rule.as_deref().unwrap_or("auto (no rule)"),
        rule.as_deref()
            .map(|r| rule_not_met(r, per_tier, moves))
            .unwrap_or_default()
    ));
    if let Some(a) = access {
        o.push_str(&format!("\naccess: {a}"));
    }
    util::out(&o);
}

/// The read-only xattr saying why migration does not move a file
/// (`terrace_core::placement_view::XATTR_MOVES`).
const MOVES_XATTR: &str = "user.terrace.moves";
/// Its first word when damaged data stops the file's moves.
const MOVES_DAMAGED: &str = "damaged";
/// Its first word when data pinned to PM was moved off PM to keep room
/// for metadata.
const MOVES_YIELDED: &str = "yielded";

/// What [`MOVES_XATTR`] says of a file's moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Moves {
    /// Nothing stops them (or the daemon does not say).
    Free,
    /// Damaged data: no move is tried until the file's data changes.
    Damaged,
    /// Its data pinned to PM was moved off PM to keep room for metadata.
    Yielded,
}

impl Moves {
    /// The value of [`MOVES_XATTR`], by its first word.
    fn parse(value: &[u8]) -> Moves {
        let v = String::from_utf8_lossy(value);
        if v.starts_with(MOVES_DAMAGED) {
            Moves::Damaged
        } else if v.starts_with(MOVES_YIELDED) {
            Moves::Yielded
        } else {
            Moves::Free
        }
    }
}

/// What the `rule:` line adds when part of a pinned file's data is on
/// another tier than the rule's (named by kind, as `per_tier` is): a pin
/// to PM spills to the first block tier while PM is full, and migration
/// moves such data to the rule's tier as room allows — unless the data is
/// damaged (a move found blocks failing their checksums: no move is tried
/// until the file's data changes) or was yielded (data pinned to PM moved
/// off it to keep room for metadata, and back when PM has room), which is
/// then the reason given, also for a rule naming a tier by id. Data still
/// in the DRAM cache is on its way and clean copies are second places:
/// neither counts. Empty when the rule holds, or names a tier by id and
/// nothing stops its moves.
fn rule_not_met(rule: &str, per_tier: &BTreeMap<String, u64>, moves: Moves) -> String {
    let by_kind = ["pm", "ssd", "hdd", "s3"].contains(&rule);
    let elsewhere: u64 = per_tier
        .iter()
        .filter(|(t, _)| t.as_str() != rule && t.as_str() != "dram" && !t.ends_with("-copy"))
        .map(|(_, b)| *b)
        .sum();
    if by_kind && elsewhere == 0 {
        return String::new();
    }
    let amount = if by_kind {
        format!(" for {}", human(elsewhere))
    } else {
        String::new()
    };
    match moves {
        Moves::Damaged => {
            return format!(
                " (not met{amount}: the file's data is damaged — a move found blocks failing \
                 their checksums, and no move is tried until the file's data changes \
                 (a write, a truncate, or a scrub repair); `terrace scrub` or \
                 `terrace fsck --data` name the damaged blocks)"
            );
        }
        Moves::Yielded => {
            return format!(
                " (not met{amount}: moved off pm to keep room for metadata (pm full of \
                 pinned data); it returns when pm has room — pin less to pm to keep it there)"
            );
        }
        Moves::Free => {}
    }
    if !by_kind {
        return String::new();
    }
    format!(
        " (not met yet for {}: written while {rule} had no room, or not moved yet; \
         migration moves it to {rule} as room allows)",
        human(elsewhere)
    )
}

/// A regular file below a directory: a path of it, its inode number, size.
type FileBelow = (PathBuf, u64, u64);

/// The regular files below `dir` (not following symlinks, staying on its
/// file system), each once however many names it has (the first in walk
/// order), and the entries that could not be read.
fn files_below(dir: &Path) -> (Vec<FileBelow>, Vec<tree_walk::WalkError>) {
    let mut seen = std::collections::HashSet::new();
    let mut files = Vec::new();
    let errors = tree_walk::walk_below(dir, &mut |entry| {
        if entry.kind == tree_walk::Kind::File && seen.insert(entry.ino) {
            files.push((entry.path.clone(), entry.ino, entry.size));
        }
        Ok(())
    });
    (files, errors)
}

/// `where DIR`: the data of the regular files below `dir`, summed by tier.
fn directory(dir: &Path, reader: &mut Reader, as_json: bool) -> CliResult {
    let (files, unreadable) = files_below(dir);
    for (path, e) in &unreadable {
        eprintln!("terrace: {}", CliError::at(path, util::os_reason(e)).msg);
    }
    // The size and extents of the files whose extents were read.
    let mut size = 0u64;
    let mut per_tier: BTreeMap<String, u64> = BTreeMap::new();
    let mut extents = 0usize;
    let mut read = 0usize;
    let mut failed = unreadable.len();
    for chunk in files.chunks(REQUEST_FILES) {
        let batch: Vec<(PathBuf, u64)> = chunk.iter().map(|f| (f.0.clone(), f.1)).collect();
        for (f, rows) in chunk.iter().zip(reader.read(&batch)) {
            match rows {
                Ok(rows) => {
                    read += 1;
                    size += f.2;
                    extents += rows.len();
                    for (t, b) in bytes_per_tier(&rows) {
                        *per_tier.entry(t).or_default() += b;
                    }
                }
                // Deleted since the walk: not there any more.
                Err(e)
                    if e == util::os_reason(&std::io::Error::from_raw_os_error(libc::ENOENT)) => {}
                Err(e) if e == "not on a Terrace mount" => return Err(CliError::at(dir, e)),
                Err(e) => {
                    failed += 1;
                    eprintln!("terrace: {}", CliError::at(&f.0, e).msg);
                }
            }
        }
    }
    let rule = getxattr(dir, "user.terrace.rule")
        .ok()
        .map(|v| String::from_utf8_lossy(&v).into_owned());
    if as_json {
        util::out(
            &serde_json::json!({"path": dir, "directory": true, "files": read, "size": size,
                "extents": extents, "bytes_per_tier": per_tier,
                "complete": !reader.cut && failed == 0, "unreadable": failed, "rule": rule})
            .to_string(),
        );
    } else {
        let summary: Vec<String> = per_tier
            .iter()
            .map(|(t, b)| format!("{t} {}", human(*b)))
            .collect();
        util::out(&format!(
            "{} (a directory): {} below it, {} ({} bytes) in {} extents\n\
             total: {}\nrule: {}{}",
            dir.display(),
            match read {
                1 => "1 file".to_string(),
                n => format!("{n} files"),
            },
            human(size),
            size,
            extents,
            if summary.is_empty() {
                "0 B".into()
            } else {
                summary.join(", ")
            },
            rule.as_deref().unwrap_or("auto (no rule)"),
            match failed {
                0 => String::new(),
                n => format!(
                    "\nincomplete: {n} entr{} could not be read (named above); \
                     the totals count the rest",
                    if n == 1 { "y" } else { "ies" }
                ),
            }
        ));
    }
    if reader.cut {
        return Err(cut_error(dir));
    }
    if failed > 0 {
        return Err(CliError::new(String::new()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{
        bytes_per_tier, coalesce, device_runs, not_a_file, parse_xattr_line, rule_not_met,
        ExtentRow, Moves, Run,
    };

    #[test]
    fn a_rule_is_said_not_met_only_for_primary_data_on_another_tier() {
        let tiers = |v: &[(&str, u64)]| v.iter().map(|(t, b)| (t.to_string(), *b)).collect();
        assert_eq!(
            rule_not_met("pm", &tiers(&[("pm", 1 << 20)]), Moves::Free),
            ""
        );
        assert_eq!(
            rule_not_met(
                "pm",
                &tiers(&[("pm", 4096), ("dram", 8192), ("ssd-copy", 4096)]),
                Moves::Free
            ),
            "",
            "cached data and clean copies do not count"
        );
        let said = rule_not_met("pm", &tiers(&[("pm", 4096), ("ssd", 1 << 20)]), Moves::Free);
        assert!(
            said.contains("not met yet for 1.0 MiB") && said.contains("pm had no room"),
            "{said}"
        );
        assert_eq!(
            rule_not_met("2", &tiers(&[("ssd", 4096)]), Moves::Free),
            "",
            "an id is not matched"
        );
    }

    /// A pinned file whose move found damaged data is not blamed on room:
    /// it stays where it is until its data changes, and the line says so.
    #[test]
    fn a_rule_unmet_for_damaged_data_names_the_damage_not_room() {
        let tiers = |v: &[(&str, u64)]| v.iter().map(|(t, b)| (t.to_string(), *b)).collect();
        let said = rule_not_met(
            "pm",
            &tiers(&[("pm", 4096), ("ssd", 1 << 20)]),
            Moves::Damaged,
        );
        assert!(
            said.contains("not met for 1.0 MiB")
                && said.contains("data is damaged")
                && said.contains("until the file's data changes")
                && said.contains("terrace fsck --data")
                && !said.contains("no room"),
            "{said}"
        );
        let by_id = rule_not_met("2", &tiers(&[("ssd", 4096)]), Moves::Damaged);
        assert!(by_id.contains("data is damaged"), "{by_id}");
        assert_eq!(
            rule_not_met("pm", &tiers(&[("pm", 1 << 20)]), Moves::Damaged),
            "",
            "a rule that holds is met, damaged or not"
        );
    }

    /// Data pinned to PM that a migration pass moved off PM to keep room
    /// for metadata is not said to have been written while PM had no room:
    /// the line says it gave way to metadata and comes back with room.
    #[test]
    fn a_pm_rule_unmet_because_its_data_gave_way_to_metadata_says_so_not_no_room() {
        let tiers = |v: &[(&str, u64)]| v.iter().map(|(t, b)| (t.to_string(), *b)).collect();
        let said = rule_not_met(
            "pm",
            &tiers(&[("pm", 4096), ("ssd", 1 << 20)]),
            Moves::Yielded,
        );
        assert!(
            said.contains("not met for 1.0 MiB")
                && said.contains("moved off pm to keep room for metadata")
                && said.contains("pm full of pinned data")
                && said.contains("returns when pm has room")
                && !said.contains("no room"),
            "{said}"
        );
        assert_eq!(
            rule_not_met("pm", &tiers(&[("pm", 1 << 20)]), Moves::Yielded),
            "",
            "a rule that holds again is met"
        );
    }

    #[test]
    fn the_moves_xattr_is_read_by_its_first_word() {
        assert_eq!(Moves::parse(b""), Moves::Free);
        assert_eq!(Moves::parse(b"damaged: a move found ..."), Moves::Damaged);
        assert_eq!(
            Moves::parse(b"yielded: data pinned to pm ..."),
            Moves::Yielded
        );
        assert_eq!(Moves::parse(b"something newer"), Moves::Free);
    }

    #[test]
    fn directories_and_devices_are_named_and_regular_files_are_not() {
        let kind = |p: &str| not_a_file(std::fs::metadata(p).unwrap().file_type());
        assert_eq!(kind("/"), Some("a directory"));
        assert_eq!(kind("/dev/null"), Some("a character device"));
        let f = std::env::temp_dir().join(format!("terrace-where-{}", std::process::id()));
        std::fs::write(&f, b"").unwrap();
        assert_eq!(kind(f.to_str().unwrap()), None);
        let _ = std::fs::remove_file(&f);
    }

    #[test]
    fn device_runs_join_rows_whose_blocks_follow_and_skip_pm_copies_and_holes() {
        let at = |off: u64, len: u64, tier: &str, block: u64| ExtentRow {
            offset: off,
            length: len,
            tier: tier.into(),
            block: Some(block),
            counter: 0,
        };
        let rows = [
            at(0, 8192, "ssd", 10),
            // A hole in the file, the blocks right after: one run.
            at(65536, 4096, "ssd", 12),
            at(69632, 4096, "pm", 7),
            at(73728, 4096, "ssd", 500),
            at(73728, 4096, "ssd-copy", 13),
            at(77824, 4096, "hdd", 1),
        ];
        assert_eq!(
            device_runs(&rows),
            [("hdd".to_string(), 1, 4096), ("ssd".to_string(), 2, 16384)]
        );
    }

    fn row(off: u64, len: u64, tier: &str) -> ExtentRow {
        ExtentRow {
            offset: off,
            length: len,
            tier: tier.into(),
            block: (tier != "dram").then_some(off / 4096 + 100),
            counter: 0,
        }
    }

    #[test]
    fn cached_data_counts_once_and_copies_apart() {
        let rows = vec![
            row(0, 8192, "pm"),
            row(8192, 16384, "ssd"),
            row(8192, 16384, "ssd-copy"),
            row(4096, 8192, "dram"),
            row(20480, 8192, "dram"),
        ];
        let t = bytes_per_tier(&rows);
        assert_eq!(t["pm"], 4096);
        assert_eq!(t["ssd"], 16384 - 4096 - 4096);
        assert_eq!(t["dram"], 16384);
        assert_eq!(t["ssd-copy"], 16384 - 4096 - 4096);
        let data: u64 = t
            .iter()
            .filter(|(k, _)| !k.ends_with("-copy"))
            .map(|(_, v)| v)
            .sum();
        assert_eq!(data, 28672);
    }

    #[test]
    fn adjacent_extents_on_one_tier_make_one_run() {
        let run = |offset, length, tier: &str, extents| Run {
            offset,
            length,
            tier: tier.into(),
            extents,
        };
        let rows = vec![
            row(0, 4096, "pm"),
            row(4096, 4096, "pm"),
            row(4096, 4096, "pm-copy"),
            row(8192, 8192, "ssd"),
            row(8192, 8192, "ssd-copy"),
            row(16384, 4096, "ssd"),
            row(16384, 4096, "ssd-copy"),
            row(40960, 4096, "ssd"), // after a hole
            row(0, 8192, "dram"),
        ];
        assert_eq!(
            coalesce(&rows),
            vec![
                run(0, 8192, "pm", 2),
                run(0, 8192, "dram", 1),
                run(4096, 4096, "pm-copy", 1),
                run(8192, 12288, "ssd", 2),
                run(8192, 12288, "ssd-copy", 2),
                run(40960, 4096, "ssd", 1),
            ]
        );
        // Runs hold the same bytes per tier as the extents.
        let as_rows: Vec<ExtentRow> = coalesce(&rows)
            .iter()
            .map(|r| row(r.offset, r.length, &r.tier))
            .collect();
        assert_eq!(bytes_per_tier(&as_rows), bytes_per_tier(&rows));
        assert!(coalesce(&[]).is_empty());
    }

    #[test]
    fn xattr_lines_parse_and_the_cut_marker_does_not() {
        assert_eq!(
            parse_xattr_line("8192 4096 ssd 17 2"),
            Some(ExtentRow {
                offset: 8192,
                length: 4096,
                tier: "ssd".into(),
                block: Some(17),
                counter: 2
            })
        );
        assert_eq!(parse_xattr_line("0 4096 dram - 1").unwrap().block, None);
        assert_eq!(parse_xattr_line(" ..."), None);
    }
}
