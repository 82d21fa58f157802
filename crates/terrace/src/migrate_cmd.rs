//! `terrace migrate MOUNTPOINT [--to TIER] [PATH...]`: moves the data of files
//! to a tier by hand, with a progress bar over the bytes to move.
//!
//! The command walks the given paths (the whole mount by default) on this
//! side, and asks the daemon to migrate its regular files a few at a time
//! (control request [`MigrateFiles`]: inode numbers and the target tier id;
//! see [`requests`]), so the progress bar advances as they move and Ctrl-C
//! stops between requests.

use crate::control::protocol::{GetStatus, MigrateFiles};
use crate::control::{self, ControlError};
use crate::util::{self, CliError, CliResult};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;
use terrace_core::status::TierStatus;

/// Resolves a tier given by name (`pm`, `ssd`, `hdd`) or id against the
/// tiers listed by the daemon's status.
fn resolve_tier<'a>(tiers: &'a [TierStatus], want: &str) -> Result<&'a TierStatus, String> {
    let names: Vec<String> = tiers
        .iter()
        .map(|t| format!("{} ({})", t.kind, t.id))
        .collect();
    let hit = tiers
        .iter()
        .find(|t| t.kind == want || t.id.to_string() == want);
    match hit {
        Some(t) if t.active => Ok(t),
        Some(_) => Err(format!("tier {want} is not mounted")),
        None => Err(format!(
            "no tier {want:?} in this pool (tiers: {})",
            names.join(", ")
        )),
    }
}

/// Regular files under `paths` (not following symlinks, staying on the mount).
fn collect(paths: &[PathBuf], dev: u64, out: &mut Vec<(PathBuf, u64, u64)>) -> CliResult {
    for p in paths {
        let md = std::fs::symlink_metadata(p).map_err(|e| CliError::at(p, util::os_reason(&e)))?;
        if md.dev() != dev {
            continue;
        }
        if md.is_file() {
            out.push((p.clone(), md.ino(), md.size()));
        } else if md.is_dir() {
            let rd = std::fs::read_dir(p).map_err(|e| CliError::at(p, util::os_reason(&e)))?;
            let mut kids: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
            kids.sort();
            collect(&kids, dev, out)?;
        }
    }
    Ok(())
}

/// Bytes of file data per migrate request.
const REQUEST_BYTES: u64 = 64 << 20;
/// Files per migrate request.
const REQUEST_FILES: usize = 256;

/// Splits the files to move into requests of at most `REQUEST_BYTES` of
/// data (a larger file is a request of its own) and `REQUEST_FILES` files.
fn requests(todo: &[(PathBuf, u64, u64)]) -> Vec<&[(PathBuf, u64, u64)]> {
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0usize, 0u64);
    for (k, t) in todo.iter().enumerate() {
        if k > start && (bytes + t.2 > REQUEST_BYTES || k - start >= REQUEST_FILES) {
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

/// `terrace migrate`.
pub fn run(mnt: &Path, to: Option<&str>, paths: &[PathBuf]) -> CliResult {
    let abs = util::abs_path(mnt);
    let files = util::RunFiles {
        socket: util::control_socket(&abs),
        ..util::run_files(&abs)
    };
    let failed = |e: ControlError| match e {
        ControlError::NoDaemon => CliError::at(
            mnt,
            "no Terrace daemon serves this mount point (is it mounted?)",
        ),
        ControlError::Failed(m) => CliError::at(mnt, m),
        ControlError::Refused(r) => CliError::at(mnt, r.error),
    };
    let st = control::call(&files.socket, GetStatus {}, Duration::from_secs(10))
        .map_err(failed)?
        .status;
    if st.read_only {
        return Err(CliError::at(
            mnt,
            "read-only mount: data cannot migrate (remount it read-write)",
        ));
    }
    let tiers = &st.core.tiers;
    let target = match to {
        Some(t) => resolve_tier(tiers, t).map_err(CliError::new)?,
        None => tiers.iter().find(|t| t.id != 0).ok_or_else(|| {
            CliError::new("this pool has no block tier to migrate to; give --to pm to move data up")
        })?,
    };
    let to_id = target.id;
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
    let mut todo = Vec::new();
    collect(&roots, dev, &mut todo)?;
    let total: u64 = todo.iter().map(|t| t.2).sum();
    let bar = indicatif::ProgressBar::with_draw_target(
        Some(total),
        indicatif::ProgressDrawTarget::stderr(),
    );
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "migrating [{bar:40}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta}) {msg}",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    let mut moved = 0u64;
    let mut failures = 0usize;
    // Files go in requests of up to REQUEST_BYTES (or REQUEST_FILES files):
    // the daemon moves a request's files with shared device syncs, and the
    // progress bar advances per request.
    for chunk in requests(&todo) {
        let first = &chunk[0].0;
        bar.set_message(
            first
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
        );
        let inos: Vec<u64> = chunk.iter().map(|t| t.1).collect();
        let req = MigrateFiles { inos, to: to_id };
        match control::call(&files.socket, req, Duration::from_secs(3600)).map_err(failed) {
            Ok(r) => {
                moved += r.bytes;
                for f in &r.failed {
                    failures += 1;
                    let path = chunk
                        .iter()
                        .find(|t| t.1 == f.ino)
                        .map_or_else(|| format!("inode {}", f.ino), |t| t.0.display().to_string());
                    bar.suspend(|| eprintln!("terrace: {path}: {}", f.error));
                }
            }
            Err(e) => {
                failures += chunk.len();
                for (path, _, _) in chunk {
                    bar.suspend(|| eprintln!("terrace: {}: {}", path.display(), e.msg));
                }
            }
        }
        bar.inc(chunk.iter().map(|t| t.2).sum());
    }
    bar.finish_and_clear();
    util::out(&format!(
        "terrace: moved {} of {} files to {} (tier {to_id}){}",
        util::human_bytes(moved),
        todo.len(),
        target.kind,
        if failures > 0 {
            format!("; {failures} files failed")
        } else {
            String::new()
        }
    ));
    if failures > 0 {
        return Err(CliError::new(String::new()));
    }
    Ok(())
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
        let r = requests(&todo);
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
        let sizes: Vec<usize> = requests(&many).iter().map(|c| c.len()).collect();
        assert_eq!(sizes, vec![256, 256, 88]);
        assert!(requests(&[]).is_empty());
    }
}
