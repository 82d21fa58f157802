//! `terrace where PATH`: which tier holds each part of a file.
//!
//! Reads the read-only virtual xattr `user.terrace.extents` of the file through
//! the mount, so it needs no daemon connection and works for any user who may
//! read the file's xattrs.

use crate::util::{CliError, CliResult};
use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn getxattr(path: &Path, name: &str) -> std::io::Result<Vec<u8>> {
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
fn bytes_per_tier(rows: &[(u64, u64, String, String, String)]) -> BTreeMap<String, u64> {
    let mut cached: Vec<(u64, u64)> = rows
        .iter()
        .filter(|r| r.2 == "dram")
        .map(|r| (r.0, r.0 + r.1))
        .collect();
    cached.sort_unstable();
    let mut per_tier: BTreeMap<String, u64> = BTreeMap::new();
    for (off, len, tier, _, _) in rows {
        let (start, end) = (*off, off + len);
        let mut bytes = *len;
        if tier != "dram" {
            // Cached ranges that overlap [start, end) (they do not overlap
            // each other).
            let first = cached.partition_point(|&(_, e)| e <= start);
            for &(s, e) in cached[first..].iter().take_while(|&&(s, _)| s < end) {
                bytes -= e.min(end) - s.max(start);
            }
        }
        *per_tier.entry(tier.clone()).or_default() += bytes;
    }
    per_tier
}

/// What a file that is not a regular file is ("a directory"), for the
/// note under its (empty) extent list; `None` for a regular file.
fn not_a_file(ft: std::fs::FileType) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    Some(if ft.is_file() {
        return None;
    } else if ft.is_dir() {
        "a directory"
    } else if ft.is_symlink() {
        "a symbolic link"
    } else if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else {
        "a special file"
    })
}

/// Prints the extents of `path` with their tier and address.
pub fn run(path: &Path, as_json: bool) -> CliResult {
    let raw = match getxattr(path, "user.terrace.extents") {
        Ok(v) => v,
        Err(e)
            if e.raw_os_error() == Some(libc::ENODATA)
                || e.raw_os_error() == Some(libc::EOPNOTSUPP) =>
        {
            return Err(CliError::at(path, "not on a Terrace mount"));
        }
        Err(e) => return Err(CliError::at(path, crate::util::os_reason(&e))),
    };
    let text = String::from_utf8_lossy(&raw);
    let mut rows = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() != 5 {
            continue;
        }
        let (off, len) = (
            f[0].parse::<u64>().unwrap_or(0),
            f[1].parse::<u64>().unwrap_or(0),
        );
        rows.push((
            off,
            len,
            f[2].to_string(),
            f[3].to_string(),
            f[4].to_string(),
        ));
    }
    let per_tier = bytes_per_tier(&rows);
    // The file's placement rule (stored xattr) and HetFS access class (virtual).
    let rule = getxattr(path, "user.terrace.rule")
        .ok()
        .map(|v| String::from_utf8_lossy(&v).into_owned());
    let access = getxattr(path, "user.terrace.access")
        .ok()
        .map(|v| String::from_utf8_lossy(&v).into_owned());
    if as_json {
        let extents: Vec<serde_json::Value> = rows
            .iter()
            .map(|(o, l, t, b, c)| serde_json::json!({"offset": o, "length": l, "tier": t, "block": b.parse::<u64>().unwrap_or(0), "size_counter": c.parse::<u64>().unwrap_or(0)}))
            .collect();
        println!(
            "{}",
            serde_json::json!({"path": path, "extents": extents, "bytes_per_tier": per_tier,
                "rule": rule, "access": access})
        );
        return Ok(());
    }
    println!("{}", path.display());
    println!(
        "{:>14} {:>12}  {:<4} {:>12} {:>7}",
        "offset", "length", "tier", "block", "counter"
    );
    for (o, l, t, b, c) in &rows {
        println!("{o:>14} {l:>12}  {t:<4} {b:>12} {c:>7}");
    }
    if rows.is_empty() {
        match std::fs::metadata(path)
            .ok()
            .and_then(|m| not_a_file(m.file_type()))
        {
            Some(what) => println!("  (no data blocks: {what}, not a regular file)"),
            None => println!("  (no data blocks: empty or sparse file)"),
        }
    }
    let summary: Vec<String> = per_tier
        .iter()
        .map(|(t, b)| format!("{t} {}", human(*b)))
        .collect();
    println!(
        "total: {}",
        if summary.is_empty() {
            "0 B".into()
        } else {
            summary.join(", ")
        }
    );
    println!("rule: {}", rule.as_deref().unwrap_or("auto (no rule)"));
    if let Some(a) = access {
        println!("access: {a}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{bytes_per_tier, not_a_file};

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

    fn row(off: u64, len: u64, tier: &str) -> (u64, u64, String, String, String) {
        (off, len, tier.into(), "0".into(), "0".into())
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
}
