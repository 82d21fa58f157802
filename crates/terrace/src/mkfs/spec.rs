//! The `--tier KIND:PATH[:SIZE]` arguments of `mkfs` and `tier add`:
//! [`TierSpec`] and its parsers (a path may hold ':'; an `s3:` URL has
//! colons and options of its own).

use crate::object_tier;
use crate::util;
use std::path::{Path, PathBuf};
use terrace_format::TierKind;

/// One `--tier KIND:PATH[:SIZE]` argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TierSpec {
    /// Media kind.
    pub kind: TierKind,
    /// File or block device.
    pub path: PathBuf,
    /// Size; `None` = the size of the existing file or device.
    pub size: Option<u64>,
}

/// Parses `KIND:PATH:SIZE` (SIZE may be omitted for an existing file or device).
pub fn parse_tier(s: &str) -> Result<TierSpec, String> {
    parse_tier_with(s, &|p| p.exists())
}

/// [`parse_tier`], with `exists` telling whether a path exists. A path may
/// contain ':': the part after the last ':' is the size unless it contains a
/// '/' or the whole rest names an existing file (used at its own size).
fn parse_tier_with(s: &str, exists: &dyn Fn(&Path) -> bool) -> Result<TierSpec, String> {
    let (kind, rest) = s
        .split_once(':')
        .ok_or_else(|| format!("{s:?}: expected KIND:PATH:SIZE, e.g. pm:/dev/shm/pool:1G"))?;
    let kind = TierKind::parse(&kind.to_ascii_lowercase())
        .ok_or_else(|| format!("{s:?}: unknown tier kind {kind:?} (use pm, ssd, hdd or s3)"))?;
    if kind == TierKind::S3 {
        return parse_s3_tier(s, rest);
    }
    let empty_path = || format!("{s:?}: the path is empty (expected KIND:PATH:SIZE)");
    let (path, size) = match rest.rsplit_once(':') {
        None => (rest, None),
        Some((p, sz)) => match util::parse_size(sz) {
            Ok(_) | Err(_) if p.is_empty() && !exists(Path::new(rest)) => return Err(empty_path()),
            Ok(n) => (p, Some(n)),
            Err(_) if sz.contains('/') || exists(Path::new(rest)) => (rest, None),
            Err(e) => {
                let why = if sz.trim().is_empty() {
                    "nothing after the last ':' (leave out \":SIZE\" to use an existing file at its size)".to_string()
                } else if sz.trim_start().starts_with('-') {
                    "a size cannot be negative".to_string()
                } else {
                    let prefix = format!("size {sz:?} ");
                    e.strip_prefix(&prefix).unwrap_or(&e).to_string()
                };
                return Err(format!("{s:?}: bad size {sz:?}: {why}"));
            }
        },
    };
    if path.is_empty() {
        return Err(empty_path());
    }
    Ok(TierSpec {
        kind,
        path: PathBuf::from(path),
        size,
    })
}

/// `s3:URL[:SIZE]`: the URL has colons of its own (scheme, port), so a
/// trailing `:SIZE` counts only after the path started (the first '/' past
/// `://`); without it the tier is [`object_tier::DEFAULT_SIZE`]. The URL may
/// end in options, `?region=…&path_style=…&credentials_file=…&profile=…
/// &ca_file=…` (terrace_media::UrlOptions), stored with it; `:SIZE` then goes at the
/// very end or before the `?`.
fn parse_s3_tier(s: &str, url: &str) -> Result<TierSpec, String> {
    let path_start = url
        .find("://")
        .and_then(|i| url[i + 3..].find('/').map(|j| i + 3 + j))
        .ok_or_else(|| {
            format!("{s:?}: expected s3:http(s)://HOST[:PORT]/BUCKET[/PREFIX][:SIZE][?OPTIONS]")
        })?;
    let (addr, opts) = match url[path_start..].find('?') {
        Some(i) => url.split_at(path_start + i),
        None => (url, ""),
    };
    let size_of =
        |sz: &str| util::parse_size(sz).map_err(|e| format!("{s:?}: bad size {sz:?}: {e}"));
    let (addr, size_before) = match addr.rfind(':') {
        Some(i) if i > path_start => (&addr[..i], Some(size_of(&addr[i + 1..])?)),
        _ => (addr, None),
    };
    // After the options, a ':' whose tail could be no option value.
    let (opts, size_after) = match opts.rfind(':') {
        Some(i) if !opts[i + 1..].contains(['=', '&', '/']) => {
            (&opts[..i], Some(size_of(&opts[i + 1..])?))
        }
        _ => (opts, None),
    };
    let size = match (size_before, size_after) {
        (Some(_), Some(_)) => return Err(format!("{s:?}: the size is given twice")),
        (a, b) => a.or(b).unwrap_or(object_tier::DEFAULT_SIZE),
    };
    let url = format!("{addr}{opts}");
    terrace_media::ObjectConfig::from_url(&url).map_err(|e| format!("{s:?}: {e}"))?;
    Ok(TierSpec {
        kind: TierKind::S3,
        path: PathBuf::from(url),
        size: Some(size),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tier_specs_parse() {
        let t = parse_tier("pm:/dev/shm/pool:1G").unwrap();
        assert_eq!(
            t,
            TierSpec {
                kind: TierKind::Pm,
                path: "/dev/shm/pool".into(),
                size: Some(1 << 30)
            }
        );
        let t = parse_tier("ssd:/dev/sdb").unwrap();
        assert_eq!(t.size, None);
        let t = parse_tier("hdd:/data/a:b.img:64M").unwrap();
        assert_eq!(t.path, PathBuf::from("/data/a:b.img"));
        assert!(parse_tier("tape:/x:1G").is_err());
        assert!(parse_tier("pm").is_err());
        assert!(parse_tier("pm:").is_err());
        assert!(parse_tier("pm:/x:1Q").is_err());
    }

    #[test]
    fn an_s3_size_counts_only_after_the_path_started() {
        let t = parse_tier("s3:http://127.0.0.1:9000/bkt").unwrap();
        assert_eq!(t.kind, TierKind::S3);
        assert_eq!(t.path, PathBuf::from("http://127.0.0.1:9000/bkt"));
        assert_eq!(t.size, Some(object_tier::DEFAULT_SIZE));
        let t = parse_tier("s3:http://127.0.0.1:9000/bkt/p:2T").unwrap();
        assert_eq!(t.path, PathBuf::from("http://127.0.0.1:9000/bkt/p"));
        assert_eq!(t.size, Some(2 << 40));
        assert_eq!(
            parse_tier("S3:https://s3.example.com/bucket/a/b")
                .unwrap()
                .path,
            PathBuf::from("https://s3.example.com/bucket/a/b")
        );
        // Options: stored with the URL; the size before them or at the end.
        for spec in [
            "s3:http://127.0.0.1:9000/bkt/p?region=eu-west-1&credentials_file=/etc/t/s3.cred:2T",
            "s3:http://127.0.0.1:9000/bkt/p:2T?region=eu-west-1&credentials_file=/etc/t/s3.cred",
        ] {
            let t = parse_tier(spec).unwrap();
            assert_eq!(
                t.path,
                PathBuf::from(
                    "http://127.0.0.1:9000/bkt/p?region=eu-west-1&credentials_file=/etc/t/s3.cred"
                ),
                "{spec}"
            );
            assert_eq!(t.size, Some(2 << 40), "{spec}");
        }
        let t = parse_tier("s3:http://h:9000/bkt?path_style=true&profile=p").unwrap();
        assert_eq!(
            t.path,
            PathBuf::from("http://h:9000/bkt?path_style=true&profile=p")
        );
        assert_eq!(t.size, Some(object_tier::DEFAULT_SIZE));
        let e = parse_tier("s3:http://h/bkt:1T?region=x:2T").unwrap_err();
        assert!(e.contains("given twice"), "{e}");
        let e = parse_tier("s3:http://h/bkt?secret_key=x").unwrap_err();
        assert!(e.contains("never stored in the pool"), "{e}");
        let e = parse_tier("s3:http://h/bkt?region=x:lots").unwrap_err();
        assert!(e.contains("bad size \"lots\""), "{e}");
        for bad in [
            "s3:127.0.0.1:9000/bkt",
            "s3:http://127.0.0.1:9000",
            "s3:ftp://h/bkt",
            "s3:http://h/bkt:lots",
            "s3:http://h/B_ad",
        ] {
            assert!(parse_tier(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn bad_tier_specs_name_the_bad_part() {
        let none = |_: &Path| false;
        let err = |s: &str| parse_tier_with(s, &none).unwrap_err();
        let e = err("pm:/path:abc");
        assert!(e.contains("bad size \"abc\""), "{e}");
        let e = err("pm:/path:-5M");
        assert!(
            e.contains("bad size \"-5M\"") && e.contains("negative"),
            "{e}"
        );
        let e = err("pm::1M");
        assert!(e.contains("the path is empty"), "{e}");
        let e = err("pm:/path:");
        assert!(e.contains("bad size \"\""), "{e}");
        let e = err("pm:/path:1Q");
        assert!(
            e.contains("bad size \"1Q\"") && e.contains("unknown size unit"),
            "{e}"
        );
        for e in [err("pm:/path:abc"), err("pm:/path:-5M"), err("pm::1M")] {
            assert!(!e.contains("needs a size"), "{e}");
        }
    }

    #[test]
    fn a_path_with_a_colon_is_taken_whole_when_it_exists_or_ends_in_a_directory() {
        let exists = |p: &Path| p == Path::new("/data/a:b.img");
        let t = parse_tier_with("hdd:/data/a:b.img", &exists).unwrap();
        assert_eq!((t.path, t.size), (PathBuf::from("/data/a:b.img"), None));
        let t = parse_tier_with("ssd:/mnt/x:y/img", &|_| false).unwrap();
        assert_eq!((t.path, t.size), (PathBuf::from("/mnt/x:y/img"), None));
        let t = parse_tier_with("hdd:/data/a:b.img:64M", &exists).unwrap();
        assert_eq!(t.size, Some(64 << 20));
    }
}
