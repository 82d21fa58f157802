//! `terrace migrate MOUNTPOINT [--to TIER] [PATH...]`: moves the data of files
//! to a tier by hand, with a progress bar over the bytes to move (on stderr,
//! only on a terminal, not with `--quiet`).
//!
//! The command walks the given paths (the whole mount by default) on this
//! side, and asks the daemon to migrate its regular files a few at a time
//! (control request [`MigrateFiles`]: inode numbers and the target tier id;
//! see [`requests`]), so the progress bar advances as they move and Ctrl-C
//! stops between requests. What is to move comes first from the daemon's
//! extent lists ([`GetExtents`]): the data of each file not yet on the
//! target tier; files already there are not sent. The bar advances by the
//! bytes each request really moved. If the daemon dies or stops answering,
//! the command stops with one error.
//!
//! The walk reaches files at any depth ([`tree_walk`]) and takes each file
//! once however many names (hard links) it has: the counts are of files,
//! as du counts them. An entry it cannot read is named; the rest still
//! moves, and the command exits 1.

use crate::control::protocol::{
    DefragmentFiles, ExtentRow, GetExtents, GetStatus, MigrateFiles, Refusal,
};
use crate::control::{self, ControlError};
use crate::util::{self, CliError, CliResult};
use crate::where_cmd::{self, tree_walk};
use std::collections::HashSet;
use std::io::IsTerminal;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use terrace_core::status::TierStatus;

/// Resolves a tier given by name (`pm`, `ssd`, `hdd`) or id against the
/// tiers listed by the daemon's status.
/// A tier the pool does not have is a usage error (exit code 2); one it
/// has but that is not mounted, a failure (1).
fn resolve_tier<'a>(tiers: &'a [TierStatus], want: &str) -> Result<&'a TierStatus, CliError> {
    let names: Vec<String> = tiers
        .iter()
        .map(|t| format!("{} ({})", t.kind, t.id))
        .collect();
    let hit = tiers
        .iter()
        .find(|t| t.kind == want || t.id.to_string() == want);
    match hit {
        Some(t) if t.active => Ok(t),
        Some(_) => Err(CliError::new(format!("tier {want} is not mounted"))),
        None => Err(CliError::usage(format!(
            "no tier {want:?} in this pool (tiers: {})",
            names.join(", ")
        ))),
    }
}

/// The regular files under `paths` (not following symlinks below them,
/// staying on the mount `dev`), each once however many names it has (the
/// first met), as (path, inode number, size); the entries that could not be
/// read are named on stderr and counted in the second value.
fn collect(paths: &[PathBuf], dev: u64) -> CliResult<(Vec<Todo>, usize)> {
    let mut seen = HashSet::new();
    let mut files = Vec::new();
    let mut unreadable = 0usize;
    for p in paths {
        let md = std::fs::symlink_metadata(p).map_err(|e| CliError::at(p, util::os_reason(&e)))?;
        if md.dev() != dev {
            continue;
        }
        if md.is_file() {
            if seen.insert(md.ino()) {
                files.push((p.clone(), md.ino(), md.size()));
            }
        } else if md.is_dir() {
            let errors = tree_walk::walk_below(p, &mut |entry| {
                if entry.kind == tree_walk::Kind::File && seen.insert(entry.ino) {
                    files.push((entry.path.clone(), entry.ino, entry.size));
                }
                Ok(())
            });
            for (path, e) in &errors {
                eprintln!("terrace: {}", CliError::at(path, util::os_reason(e)).msg);
            }
            unreadable += errors.len();
        }
    }
    Ok((files, unreadable))
}

/// Bytes to move per migrate request.
const REQUEST_BYTES: u64 = 64 << 20;
/// Bytes to move per migrate request into an object tier. The daemon
/// commits a request's last window before it answers, so each request ends
/// with the object store idle; inside a request the next window's upload
/// starts while the one before finishes (design §5n). 512 MiB is about two
/// seconds of uploads here: the bar still moves, and Ctrl-C still stops
/// soon.
const OBJECT_REQUEST_BYTES: u64 = 512 << 20;
/// Files per migrate request.
const REQUEST_FILES: usize = 256;
/// Failed files named one by one; the rest are counted.
const FAILURES_NAMED: usize = 10;

/// A file to move: path, inode number, bytes to move (an estimate).
type Todo = (PathBuf, u64, u64);

/// Splits the files to move into requests of at most `request_bytes` to
/// move (a larger file is a request of its own) and `REQUEST_FILES` files.
fn requests(todo: &[Todo], request_bytes: u64) -> Vec<&[Todo]> {
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0usize, 0u64);
    for (k, t) in todo.iter().enumerate() {
        if k > start && (bytes + t.2 > request_bytes || k - start >= REQUEST_FILES) {
            out.push(&todo[start..k]);
            start = k;
            bytes = 0;
        }
        bytes += t.2;
    }
    if start < todo.len() {
        out.push(&todo[start..]);
    }
    out
}

/// Bytes of a file that are not on tier `to` (named as `where` names
/// tiers): its data elsewhere, cached data included, clean copies not.
fn bytes_to_move(rows: &[ExtentRow], to: &str) -> u64 {
    where_cmd::bytes_per_tier(rows)
        .iter()
        .filter(|(t, _)| !t.ends_with("-copy") && t.as_str() != to)
        .map(|(_, b)| b)
        .sum()
}

/// Sets what each file has to move to tier `to`, from the daemon's extent
/// lists (refused by an older daemon, which does not list extents).
fn estimate(socket: &Path, files: &mut [Todo], to: &str) -> Result<(), ControlError> {
    for chunk in files.chunks_mut(REQUEST_FILES) {
        let inos = chunk.iter().map(|t| t.1).collect();
        let reply = control::call(socket, GetExtents { inos }, Duration::from_secs(120))?;
        let rows: std::collections::HashMap<u64, Vec<ExtentRow>> = reply
            .files
            .into_iter()
            .map(|f| (f.ino, f.extents))
            .collect();
        for t in chunk.iter_mut() {
            // A file the daemon could not list (deleted meanwhile) keeps its
            // size: the migration reports it.
            if let Some(r) = rows.get(&t.1) {
                t.2 = bytes_to_move(r, to);
            }
        }
    }
    Ok(())
}

/// The progress bar: on stderr, only when it is a terminal, not `--quiet`,
/// and there is something to move (the summary says when there is not).
fn progress_bar(total: u64, quiet: bool) -> indicatif::ProgressBar {
    if quiet || total == 0 || !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::with_draw_target(
        Some(total),
        indicatif::ProgressDrawTarget::stderr(),
    );
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "migrating [{bar:40}] {binary_bytes}/{binary_total_bytes} ({binary_bytes_per_sec}, {eta}) {msg}",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

/// After data moved to tier `to`: a note when that tier is now past its
/// migration threshold and has a tier below it, since background migration
/// then moves the coldest data — maybe what just came, whose writes are
/// old — down again. Nothing when the status cannot be read (what moved
/// has been reported already).
fn threshold_note(socket: &Path, to: u8) {
    let Ok(r) = control::call(socket, GetStatus {}, Duration::from_secs(10)) else {
        return;
    };
    let st = r.status.core;
    let Some(tier) = st.tiers.iter().find(|t| t.id == to) else {
        return;
    };
    // A block tier drains only into a block or object tier after it.
    if !st.tiers.iter().any(|t| t.id > to) {
        return;
    }
    let (threshold, setting) = if to == 0 {
        (st.migration.pm_threshold_percent, "migration_threshold")
    } else {
        (
            st.migration.block_threshold_percent,
            "migration_block_threshold",
        )
    };
    let used = (tier.used as f64 * 100.0 / tier.capacity.max(1) as f64).round() as u64;
    if used > u64::from(threshold) {
        eprintln!(
            "terrace: note: {} is {used} % full, past its migration threshold ({threshold} %, \
             {setting}): background migration moves the coldest data down again, this data \
             too if it is the coldest; `terrace rule PATH {}` keeps a file there",
            tier.kind, tier.kind
        );
    }
}

/// The text of a file's failed move into `target`. The daemon's own check
/// names the room of any tier a file does not fit in ("no room on ssd: …
/// to move, room for …"); but a block tier whose device — or the file
/// system holding its image — fills up during the move gives a bare "no
/// space left on device". That one gets the room named too: the tier's
/// unused bytes, and for an image file its file system's free space
/// (`image_free`). Other errors, and other tiers, are left as they are.
fn failure_text(error: &str, needed: u64, target: &TierStatus, image_free: Option<u64>) -> String {
    let no_space = util::os_reason(&std::io::Error::from_raw_os_error(libc::ENOSPC));
    if error != no_space || target.id == 0 || target.kind == "s3" {
        return error.to_string();
    }
    let unused = target.capacity.saturating_sub(target.used);
    let room = match image_free {
        Some(free) if free < unused => format!(
            "room for {} (its image {} is on a file system with {} free; {} of the tier unused)",
            util::human_bytes(free),
            target.path,
            util::human_bytes(free),
            util::human_bytes(unused)
        ),
        _ if target.device_full.is_some() => format!(
            "room for 0 B (its device {} is full; {} of the tier unused)",
            target.path,
            util::human_bytes(unused)
        ),
        _ => format!("room for {}", util::human_bytes(unused)),
    };
    format!(
        "no room on {}: {} to move, {room}; {error}",
        target.kind,
        util::human_bytes(needed)
    )
}

/// [`failure_text`] with the target tier's room as the daemon saw it after
/// one migrate request: its status is asked once, at the request's first
/// bare "no space left on device" (the error is left as it is when the
/// status cannot be read).
struct RoomAfter<'a> {
    socket: &'a Path,
    to: u8,
    /// The target's status and its image's free space, once asked.
    seen: Option<Option<(TierStatus, Option<u64>)>>,
}

impl<'a> RoomAfter<'a> {
    fn new(socket: &'a Path, to: u8) -> RoomAfter<'a> {
        RoomAfter {
            socket,
            to,
            seen: None,
        }
    }

    fn explain(&mut self, error: &str, needed: u64) -> String {
        let no_space = util::os_reason(&std::io::Error::from_raw_os_error(libc::ENOSPC));
        if error != no_space {
            return error.to_string();
        }
        let (socket, to) = (self.socket, self.to);
        let seen = self.seen.get_or_insert_with(|| {
            let r = control::call(socket, GetStatus {}, Duration::from_secs(10)).ok()?;
            let tier = r.status.core.tiers.into_iter().find(|t| t.id == to)?;
            let path = Path::new(&tier.path);
            let image_free = std::fs::metadata(path)
                .ok()
                .filter(|m| m.is_file())
                .and_then(|_| util::free_space(path).ok());
            Some((tier, image_free))
        });
        match seen {
            Some((tier, image_free)) => failure_text(error, needed, tier, *image_free),
            None => error.to_string(),
        }
    }
}

/// "1 file", "N files".
fn files_count(n: usize) -> String {
    match n {
        1 => "1 file".into(),
        n => format!("{n} files"),
    }
}

/// How `terrace migrate` runs besides what and where.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// No progress bar and no summary line.
    pub quiet: bool,
    /// Then rewrite the files' fragmented data on the target tier.
    pub defragment: bool,
}

pub fn run(mnt: &Path, to: Option<&str>, paths: &[PathBuf], opts: Options) -> CliResult {
    let abs = util::abs_path(mnt);
    // `terrace migrate FILE...`: a first path inside a mount (not its mount
    // point) names what to move, on the mount that holds it.
    if util::mount_at(&abs).is_none() {
        if let Some(m) = util::fuse_mount_containing(&abs) {
            let all: Vec<PathBuf> = std::iter::once(mnt.to_path_buf())
                .chain(paths.iter().cloned())
                .collect();
            return run(&m.mount_point, to, &all, opts);
        }
    }
    let quiet = opts.quiet;
    let files = util::RunFiles {
        socket: util::control_socket(&abs),
        ..util::run_files(&abs)
    };
    let failed = crate::admin::control_failed(&abs, mnt);
    let st = control::call(&files.socket, GetStatus {}, Duration::from_secs(10))
        .map_err(&failed)?
        .status;
    if st.read_only {
        return Err(CliError::at(
            mnt,
            "read-only mount: data cannot migrate (mounted with -o ro: unmount it and mount it without -o ro; remounted read-only: `mount -o remount,rw`)",
        ));
    }
    let tiers = &st.core.tiers;
    let target = match to {
        Some(t) => resolve_tier(tiers, t)?,
        None => tiers.iter().find(|t| t.id != 0).ok_or_else(|| {
            CliError::new("this pool has no block tier to migrate to; give --to pm to move data up")
        })?,
    };
    let to_id = target.id;
    if opts.defragment && (to_id == 0 || target.kind == "s3") {
        return Err(CliError::new(format!(
            "--defragment is for ssd and hdd tiers: {} data is not read in device-sized runs",
            target.kind
        )));
    }
    let dev = std::fs::metadata(&abs)
        .map_err(|e| CliError::at(mnt, util::os_reason(&e)))?
        .dev();
    let roots: Vec<PathBuf> = if paths.is_empty() {
        vec![abs.clone()]
    } else {
        paths.to_vec()
    };
    for p in &roots {
        let md = std::fs::metadata(p).map_err(|e| CliError::at(p, util::os_reason(&e)))?;
        if md.dev() != dev {
            return Err(CliError::at(
                p,
                format!("not on the Terrace mount {}", mnt.display()),
            ));
        }
    }
    let (all, unreadable) = collect(&roots, dev)?;
    let nfiles = all.len();
    let every_file: Vec<(PathBuf, u64)> = if opts.defragment {
        all.iter().map(|t| (t.0.clone(), t.1)).collect()
    } else {
        Vec::new()
    };
    // The bar counts what moves: each file's data not on the target tier
    // (files already there are left out); an older daemon that cannot list
    // extents leaves the file sizes as the estimate.
    let mut todo = all;
    // Extent lists name tiers by kind: with two tiers of the target's kind
    // (an hdd being replaced by another), data on the other one looked
    // "already there" and nothing moved. Then every file is sent, and the
    // daemon, which knows tier ids, moves what is not on the target.
    let kind_is_ambiguous = tiers.iter().filter(|t| t.kind == target.kind).count() > 1;
    if !kind_is_ambiguous {
        match estimate(&files.socket, &mut todo, target.kind) {
            Ok(()) => todo.retain(|t| t.2 > 0),
            Err(ControlError::Refused(_)) => {}
            Err(e) => return Err(failed(e)),
        }
    }
    let mut total: u64 = todo.iter().map(|t| t.2).sum();
    let bar = progress_bar(total, quiet);
    let started = Instant::now();
    let mut moved = 0u64;
    let mut failures = 0usize;
    let mut report = |bar: &indicatif::ProgressBar, what: String| {
        failures += 1;
        if failures <= FAILURES_NAMED {
            bar.suspend(|| eprintln!("terrace: {what}"));
        }
    };
    // Files a rule pins to another tier stay there: said, not failed.
    let mut pinned = 0usize;
    let mut left = |bar: &indicatif::ProgressBar, what: String| {
        pinned += 1;
        if pinned <= FAILURES_NAMED {
            bar.suspend(|| eprintln!("terrace: {what}"));
        }
    };
    // Files go in requests of up to REQUEST_BYTES to move (or REQUEST_FILES
    // files): the daemon moves a request's files with shared device syncs,
    // and the bar advances by the bytes each request moved.
    let request_bytes = if target.kind == "s3" {
        OBJECT_REQUEST_BYTES
    } else {
        REQUEST_BYTES
    };
    for chunk in requests(&todo, request_bytes) {
        let first = &chunk[0].0;
        bar.set_message(
            first
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
        );
        let inos: Vec<u64> = chunk.iter().map(|t| t.1).collect();
        let req = MigrateFiles { inos, to: to_id };
        match control::call(&files.socket, req, Duration::from_secs(3600)) {
            Ok(r) => {
                moved += r.bytes;
                let path_of = |ino: u64| {
                    chunk
                        .iter()
                        .find(|t| t.1 == ino)
                        .map_or_else(|| format!("inode {ino}"), |t| t.0.display().to_string())
                };
                let needed = |ino: u64| chunk.iter().find(|t| t.1 == ino).map_or(0, |t| t.2);
                let mut room = RoomAfter::new(&files.socket, to_id);
                for f in &r.failed {
                    let why = room.explain(&f.error, needed(f.ino));
                    report(&bar, format!("{}: {why}", path_of(f.ino)));
                }
                for f in &r.pinned {
                    left(&bar, format!("{}: {}", path_of(f.ino), f.error));
                }
                // What the request moved replaces its estimate: the bar
                // ends at 100 % of what moved.
                let guess: u64 = chunk.iter().map(|t| t.2).sum();
                total = total - guess + r.bytes;
                bar.set_length(total);
                bar.inc(r.bytes);
            }
            Err(ControlError::Refused(r)) if chunk.len() == 1 => {
                let why = RoomAfter::new(&files.socket, to_id).explain(&r.error, chunk[0].2);
                report(&bar, format!("{}: {why}", first.display()));
                total -= chunk[0].2;
                bar.set_length(total);
            }
            // The daemon died, stopped answering or refuses every file: one
            // error, not one per file left.
            Err(e) => {
                bar.finish_and_clear();
                let why = match e {
                    ControlError::NoDaemon => "the daemon is gone".to_string(),
                    ControlError::Failed(m) | ControlError::Refused(Refusal { error: m, .. }) => m,
                };
                return Err(CliError::at(
                    mnt,
                    format!(
                        "migration stopped: {why} ({} moved before; files left where they were)",
                        util::human_bytes(moved)
                    ),
                ));
            }
        }
    }
    // Left on the terminal at 100 % of what moved, above the summary.
    bar.finish_with_message(match failures {
        0 => "done".to_string(),
        n => format!("{n} failed"),
    });
    let secs = started.elapsed().as_secs_f64();
    if !quiet {
        util::out(&format!(
            "terrace: moved {} of {} to {} (tier {to_id}) in {secs:.1} s{}{}{}{}{}",
            util::human_bytes(moved),
            files_count(todo.len()),
            target.kind,
            if secs > 0.0 && moved > 0 {
                format!(" ({}/s)", util::human_bytes((moved as f64 / secs) as u64))
            } else {
                String::new()
            },
            match nfiles - todo.len() {
                0 => String::new(),
                n => format!("; {} already there", files_count(n)),
            },
            match pinned {
                0 => String::new(),
                1 => "; 1 file left where a rule pins it".into(),
                n => format!("; {n} files left where rules pin them"),
            },
            if failures > 0 {
                format!("; {} failed", files_count(failures))
            } else {
                String::new()
            },
            match unreadable {
                0 => String::new(),
                1 => "; 1 entry could not be read".into(),
                n => format!("; {n} entries could not be read"),
            }
        ));
    }
    if moved > 0 && !quiet {
        threshold_note(&files.socket, to_id);
    }
    let mut defrag_failures = 0usize;
    if opts.defragment {
        let mut report = |bar: &indicatif::ProgressBar, what: String| {
            defrag_failures += 1;
            if defrag_failures <= FAILURES_NAMED {
                bar.suspend(|| eprintln!("terrace: {what}"));
            }
        };
        let d = defragment(&files.socket, &every_file, to_id, quiet, &mut report).map_err(|e| {
            let why = match e {
                ControlError::NoDaemon => "the daemon is gone".to_string(),
                ControlError::Failed(m) | ControlError::Refused(Refusal { error: m, .. }) => m,
            };
            CliError::at(mnt, format!("defragmenting stopped: {why}"))
        })?;
        if !quiet {
            util::out(&format!(
                "terrace: defragmented {} of {} on {} (tier {to_id}): {} rewritten, \
                 their data in {} runs before, {} after",
                d.files,
                files_count(every_file.len()),
                target.kind,
                util::human_bytes(d.bytes),
                d.runs_before,
                d.runs_after
            ));
        }
    }
    if pinned > FAILURES_NAMED {
        eprintln!(
            "terrace: ... and {} more files left where rules pin them",
            pinned - FAILURES_NAMED
        );
    }
    if failures > FAILURES_NAMED {
        eprintln!(
            "terrace: ... and {} more files failed",
            failures - FAILURES_NAMED
        );
    }
    if defrag_failures > FAILURES_NAMED {
        eprintln!(
            "terrace: ... and {} more files could not be defragmented",
            defrag_failures - FAILURES_NAMED
        );
    }
    if failures > 0 || defrag_failures > 0 || unreadable > 0 {
        return Err(CliError::new(String::new()));
    }
    Ok(())
}

/// What a `--defragment` phase did, summed over the files it rewrote.
#[derive(Debug, Default)]
struct DefragSum {
    files: usize,
    bytes: u64,
    runs_before: u64,
    runs_after: u64,
}

/// Asks the daemon to defragment `files` on tier `tier`, in requests of at
/// most [`REQUEST_FILES`] files, with a bar over the files on a terminal;
/// failures go to `report`.
fn defragment(
    socket: &Path,
    files: &[(PathBuf, u64)],
    tier: u8,
    quiet: bool,
    report: &mut impl FnMut(&indicatif::ProgressBar, String),
) -> Result<DefragSum, ControlError> {
    let bar = if quiet || !std::io::stderr().is_terminal() {
        indicatif::ProgressBar::hidden()
    } else {
        let b = indicatif::ProgressBar::new(files.len() as u64);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "defragmenting [{bar:40}] {pos}/{len} files ({eta}) {msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        b
    };
    let mut sum = DefragSum::default();
    for chunk in files.chunks(REQUEST_FILES) {
        let inos: Vec<u64> = chunk.iter().map(|f| f.1).collect();
        let path_of = |ino: u64| {
            chunk
                .iter()
                .find(|f| f.1 == ino)
                .map_or_else(|| format!("inode {ino}"), |f| f.0.display().to_string())
        };
        let r = control::call(
            socket,
            DefragmentFiles { inos, tier },
            Duration::from_secs(3600),
        )?;
        for f in r.files.iter().filter(|f| f.bytes > 0) {
            sum.files += 1;
            sum.bytes += f.bytes;
            sum.runs_before += f.runs_before;
            sum.runs_after += f.runs_after;
        }
        for f in &r.failed {
            report(&bar, format!("{}: {}", path_of(f.ino), f.error));
        }
        bar.inc(chunk.len() as u64);
    }
    bar.finish_and_clear();
    Ok(sum)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_hold_at_most_64_mib_or_256_files_and_keep_order() {
        let f = |n: u64, size: u64| (PathBuf::from(format!("f{n}")), n, size);
        let todo: Vec<_> = (0..10)
            .map(|n| f(n, 20 << 20))
            .chain([f(10, 100 << 20)])
            .collect();
        let r = requests(&todo, REQUEST_BYTES);
        let inos: Vec<Vec<u64>> = r.iter().map(|c| c.iter().map(|t| t.1).collect()).collect();
        assert_eq!(
            inos,
            vec![
                vec![0, 1, 2],
                vec![3, 4, 5],
                vec![6, 7, 8],
                vec![9],
                vec![10]
            ]
        );
        let many: Vec<_> = (0..600).map(|n| f(n, 0)).collect();
        let sizes: Vec<usize> = requests(&many, REQUEST_BYTES)
            .iter()
            .map(|c| c.len())
            .collect();
        assert_eq!(sizes, vec![256, 256, 88]);
        assert!(requests(&[], REQUEST_BYTES).is_empty());
        // Into an object tier: 512 MiB per request.
        let r = requests(&todo, OBJECT_REQUEST_BYTES);
        assert_eq!(r.iter().map(|c| c.len()).collect::<Vec<_>>(), vec![11]);
    }

    /// A full block tier (its device, or its image's file system, filled
    /// during the move) gave a bare "no space left on device" per file,
    /// where a move to pm names the room: the block tier's room is named too.
    #[test]
    fn a_bare_no_space_into_a_block_tier_names_the_room() {
        const MIB: u64 = 1 << 20;
        let tier = |id: u8, kind: &'static str, path: &str| TierStatus {
            id,
            kind,
            path: path.into(),
            capacity: 64 * MIB,
            used: 12 * MIB,
            active: true,
            extents: None,
            write_entries: 0,
            shared_bytes: 0,
            shared_saved_bytes: 0,
            write_amplification: None,
            io: None,
            object: None,
            device_full: None,
        };
        let enospc = util::os_reason(&std::io::Error::from_raw_os_error(libc::ENOSPC));
        assert_eq!(enospc, "no space left on device");
        let hdd = tier(1, "hdd", "/small/hdd.img");
        // Its image's file system is fuller than the tier.
        assert_eq!(
            failure_text(&enospc, 3 * MIB / 2, &hdd, Some(0)),
            "no room on hdd: 1.50 MiB to move, room for 0 B (its image /small/hdd.img is on \
             a file system with 0 B free; 52.0 MiB of the tier unused); no space left on device"
        );
        // The tier itself is what is full.
        let full = TierStatus {
            used: 64 * MIB,
            ..tier(2, "ssd", "/ssd.img")
        };
        assert_eq!(
            failure_text(&enospc, 4 * MIB, &full, Some(1 << 30)),
            "no room on ssd: 4.00 MiB to move, room for 0 B; no space left on device"
        );
        // A device that said it was full.
        let dev = TierStatus {
            device_full: Some(Default::default()),
            ..tier(1, "hdd", "/dev/sdb1")
        };
        let t = failure_text(&enospc, MIB, &dev, None);
        assert!(
            t.starts_with(
                "no room on hdd: 1.00 MiB to move, room for 0 B (its device /dev/sdb1 is full"
            ),
            "{t}"
        );
        // Other errors, pm (whose room the daemon names) and s3: as sent.
        assert_eq!(
            failure_text("input/output error", MIB, &hdd, Some(0)),
            "input/output error"
        );
        assert_eq!(
            failure_text(&enospc, MIB, &tier(0, "pm", "/p"), None),
            enospc
        );
        assert_eq!(
            failure_text(&enospc, MIB, &tier(3, "s3", "s3://b"), None),
            enospc
        );
    }

    #[test]
    fn only_data_off_the_target_tier_is_to_move() {
        let row = |offset, length, tier: &str| ExtentRow {
            offset,
            length,
            tier: tier.into(),
            block: None,
            counter: 0,
        };
        let rows = vec![
            row(0, 8192, "pm"),
            row(8192, 8192, "ssd"),
            row(8192, 8192, "pm-copy"),
            row(4096, 4096, "dram"),
        ];
        // The cached block shadows a PM block: 4 KiB of PM and 4 KiB cached.
        assert_eq!(bytes_to_move(&rows, "ssd"), 8192);
        assert_eq!(bytes_to_move(&rows, "pm"), 8192 + 4096);
        assert_eq!(bytes_to_move(&[], "ssd"), 0);
    }
}
