//! `mount -t fuse.terrace POOL DIR -o OPTS` and /etc/fstab: the two ways a
//! mount helper runs this binary, turned into `terrace mount --daemon`.
//!
//! - **mount.fuse3** (what mount(8) runs for any `fuse.*` type that has no
//!   helper of its own, through /sbin/mount.fuse): it drops the options
//!   only mount(8) understands and runs `terrace POOL DIR -o OPTS`, finding
//!   `terrace` in PATH. No subcommand: the first argument is the pool.
//! - **/sbin/mount.fuse.terrace** as a link to this binary or a copy of it
//!   (mount(8) runs it directly when it exists): `mount.fuse.terrace POOL
//!   DIR [-sfnvrw] [-N NS] [-o OPTS] [-t fuse.terrace]`. The helper is told
//!   by its name (`argv[0]`), so the daemon it starts by running its own
//!   executable again (`daemon.rs`) is given the name `terrace`
//!   ([`cli_argv0`]): a copy's executable has the helper's name, and would
//!   otherwise take its own `mount` command line for a helper call.
//!
//! `-o remount,…` (`mount -o remount,ro DIR`, which runs the helper too)
//! changes the mount in place: no new daemon, but `mount -i -o remount,ro`
//! (mount(8) without helpers, so no loop back here) on the mount point. The
//! daemon sees the change in the mount table and freezes or thaws the pool
//! (design.md §5l). Only `ro`/`rw` are passed on: the other options of a
//! mounted pool change at run time through `terrace set`.
//!
//! Either way the mount must be in place when the helper returns, so it
//! becomes `terrace mount --daemon -o OPTS POOL DIR`, after dropping the
//! options that mean something only to mount(8) or fstab (`defaults`,
//! `auto`, `noauto`, `user`, `users`, `nouser`, `owner`, `group`, `nofail`,
//! `_netdev`, `x-*`, `comment=*`, and `subtype=`/`fsname=`, which Terrace
//! sets itself) and turning `-r`/`-w` into `ro`/`rw`. Every other option
//! goes to `terrace mount` unchanged, which refuses the ones it does not
//! know: that refusal is the mount's error, with exit status 1 or 2 as
//! mount(8) expects of a helper that failed.

use std::ffi::{OsStr, OsString};

/// Names this binary answers to as a mount(8) helper.
const HELPER_NAMES: &[&str] = &["mount.fuse.terrace", "mount.terrace"];

/// The subcommands and flags of the CLI: a first argument that is none of
/// them is a pool given by mount.fuse3.
const CLI_WORDS: &[&str] = &[
    "mkfs", "mount", "umount", "status", "fsck", "where", "set", "migrate", "rule", "scrub",
    "iostat", "tier", "help",
];

/// Options that only mount(8) or fstab use (also accepted, and ignored, by
/// `terrace mount -o`, so an fstab line's options work everywhere).
pub fn mount8_only(opt: &str) -> bool {
    matches!(
        opt,
        "defaults"
            | "auto"
            | "noauto"
            | "user"
            | "users"
            | "nouser"
            | "owner"
            | "group"
            | "nofail"
            | "_netdev"
    ) || opt.starts_with("x-")
        || opt.starts_with("comment=")
        || opt.starts_with("subtype=")
        || opt.starts_with("fsname=")
}

/// The `argv[0]` to run this executable, found at `exe`, with a CLI
/// command line: `exe`, unless its name is a helper name (a copy of the
/// binary installed as /sbin/mount.fuse.terrace; a link resolves to the
/// binary's own name), then plain `terrace`.
pub fn cli_argv0(exe: &std::path::Path) -> OsString {
    let name = exe.file_name().and_then(OsStr::to_str).unwrap_or("");
    if HELPER_NAMES.contains(&name) {
        "terrace".into()
    } else {
        exe.as_os_str().to_owned()
    }
}

/// What a helper invocation asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum HelperCall {
    /// Not a helper invocation: parse the arguments as the CLI.
    Cli,
    /// Mount: the argument list of the equivalent `terrace mount` command.
    Mount(Vec<OsString>),
    /// `-o remount,…`: mount(8)'s arguments (`-i -o remount,ro|rw DIR`)
    /// that change the existing mount in place.
    Remount(Vec<OsString>),
    /// `-f` (fake): do everything but mount, i.e. nothing.
    Fake,
    /// A malformed helper command line, with the message to print.
    Usage(String),
}

/// Recognises a helper invocation from the whole argument vector
/// (`argv[0]` included).
pub fn parse(argv: &[OsString]) -> HelperCall {
    let Some(argv0) = argv.first() else {
        return HelperCall::Cli;
    };
    let name = std::path::Path::new(argv0)
        .file_name()
        .and_then(OsStr::to_str)
        .unwrap_or("");
    let as_helper = HELPER_NAMES.contains(&name);
    let first = argv.get(1).and_then(|a| a.to_str());
    // mount.fuse3 passes the source as written in fstab: a path. A first
    // argument that is no path is a mistyped subcommand, left to the CLI's
    // error.
    let from_mount_fuse = !as_helper
        && argv.len() >= 3
        && first.is_some_and(|a| a.contains('/') && !a.starts_with('-') && !CLI_WORDS.contains(&a));
    if !as_helper && !from_mount_fuse {
        return HelperCall::Cli;
    }
    if argv.len() < 3 {
        return HelperCall::Usage(format!(
            "usage: {name} POOL DIR [-sfnvrw] [-o OPTIONS] (a mount(8) helper: `mount -t fuse.terrace POOL DIR`)"
        ));
    }
    let (pool, dir) = (argv[1].clone(), argv[2].clone());
    let mut opts: Vec<String> = Vec::new();
    let mut fake = false;
    let mut rest = argv[3..].iter();
    while let Some(a) = rest.next() {
        let Some(a) = a.to_str() else {
            return HelperCall::Usage(format!("{name}: an argument is not valid UTF-8"));
        };
        match a {
            "-o" => match rest.next().and_then(|v| v.to_str()) {
                Some(v) => opts.push(v.to_string()),
                None => return HelperCall::Usage(format!("{name}: -o needs a value")),
            },
            "-t" | "-N" => {
                // The type (fuse.terrace) and a mount namespace: nothing to do.
                if rest.next().is_none() {
                    return HelperCall::Usage(format!("{name}: {a} needs a value"));
                }
            }
            "-r" => opts.push("ro".into()),
            "-w" => opts.push("rw".into()),
            "-f" => fake = true,
            "-s" | "-n" | "-v" | "-i" | "--" => {}
            _ if a.starts_with("-o") => opts.push(a[2..].to_string()),
            _ => return HelperCall::Usage(format!("{name}: unexpected argument {a:?}")),
        }
    }
    if fake {
        return HelperCall::Fake;
    }
    let all = || opts.iter().flat_map(|o| o.split(',')).map(str::trim);
    if all().any(|o| o == "remount") {
        let ro = all().rfind(|o| *o == "ro" || *o == "rw") == Some("ro");
        let how = if ro { "remount,ro" } else { "remount,rw" };
        return HelperCall::Remount(vec!["-i".into(), "-o".into(), how.into(), dir]);
    }
    let kept: Vec<&str> = all().filter(|o| !o.is_empty() && !mount8_only(o)).collect();
    let mut out: Vec<OsString> = vec!["terrace".into(), "mount".into(), "--daemon".into()];
    if !kept.is_empty() {
        out.push("-o".into());
        out.push(kept.join(",").into());
    }
    out.push(pool);
    out.push(dir);
    HelperCall::Mount(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    /// The helper's answer: `terrace mount --daemon` with `rest` after it.
    fn daemon(rest: &[&str]) -> HelperCall {
        HelperCall::Mount(args(&[&["terrace", "mount", "--daemon"], rest].concat()))
    }

    #[test]
    fn the_cli_is_left_alone() {
        for v in [
            &["terrace", "mount", "--daemon", "/p", "/m"][..],
            &["terrace", "status", "/m"],
            &["terrace", "--help"],
            &["terrace"],
            &["/usr/bin/terrace", "help", "mount"],
            // A mistyped subcommand is no pool.
            &["terrace", "statsu", "/mnt/t"],
        ] {
            assert_eq!(parse(&args(v)), HelperCall::Cli, "{v:?}");
        }
    }

    #[test]
    fn mount_fuse3_runs_it_with_the_pool_first_and_fstab_options_are_dropped() {
        let got = parse(&args(&[
            "terrace",
            "/dev/shm/pool.pm",
            "/mnt/t",
            "-o",
            "rw,defaults,_netdev,nofail,x-systemd.automount,allow_other,noatime,subtype=terrace",
        ]));
        assert_eq!(
            got,
            daemon(&["-o", "rw,allow_other,noatime", "/dev/shm/pool.pm", "/mnt/t"])
        );
    }

    #[test]
    fn an_fstab_line_can_ask_for_metrics() {
        let got = parse(&args(&[
            "terrace",
            "/dev/shm/pool.pm",
            "/mnt/t",
            "-o",
            "defaults,_netdev,metrics=127.0.0.1:9464",
        ]));
        assert_eq!(
            got,
            daemon(&["-o", "metrics=127.0.0.1:9464", "/dev/shm/pool.pm", "/mnt/t"])
        );
        // ... and `terrace mount` takes it.
        let mut cfg = crate::mount::MountConfig::new("/p".into(), "/m".into());
        cfg.apply_options(&["defaults,_netdev,metrics=127.0.0.1:9464".to_string()])
            .unwrap();
        assert_eq!(cfg.metrics, Some("127.0.0.1:9464".parse().unwrap()));
        assert_eq!(cfg.raw_options, ["defaults,_netdev,metrics=127.0.0.1:9464"]);
        let e = cfg
            .apply_options(&["metrics=9464".to_string()])
            .unwrap_err();
        assert_eq!(e.code, 2, "a bad address is a usage error: {}", e.msg);
    }

    #[test]
    fn the_mount_helper_name_takes_mount8_flags() {
        let got = parse(&args(&[
            "/sbin/mount.fuse.terrace",
            "/p",
            "/m",
            "-n",
            "-r",
            "-t",
            "fuse.terrace",
            "-odefaults",
        ]));
        assert_eq!(got, daemon(&["-o", "ro", "/p", "/m"]));
        assert_eq!(
            parse(&args(&["mount.fuse.terrace", "/p", "/m", "-f"])),
            HelperCall::Fake
        );
        assert_eq!(
            parse(&args(&["mount.fuse.terrace", "/p", "/m", "-o", "defaults"])),
            daemon(&["/p", "/m"])
        );
    }

    #[test]
    fn a_remount_changes_the_mount_in_place_without_a_new_daemon() {
        for (v, how) in [
            (
                &["terrace", "/p", "/m", "-o", "remount,ro"][..],
                "remount,ro",
            ),
            (
                &["mount.fuse.terrace", "/p", "/m", "-o", "rw,remount"],
                "remount,rw",
            ),
            (
                &["mount.fuse.terrace", "/p", "/m", "-r", "-o", "remount"],
                "remount,ro",
            ),
            (
                &["terrace", "/p", "/m", "-o", "ro,remount,rw"],
                "remount,rw",
            ),
        ] {
            assert_eq!(
                parse(&args(v)),
                HelperCall::Remount(args(&["-i", "-o", how, "/m"])),
                "{v:?}"
            );
        }
    }

    #[test]
    fn the_daemon_started_by_a_copy_named_as_the_helper_runs_as_the_cli() {
        for (exe, argv0) in [
            ("/sbin/mount.fuse.terrace", "terrace"),
            ("/sbin/mount.terrace", "terrace"),
            ("/usr/local/bin/terrace", "/usr/local/bin/terrace"),
        ] {
            let got = cli_argv0(std::path::Path::new(exe));
            assert_eq!(got, OsString::from(argv0), "{exe}");
            let daemon = [got, "mount".into(), "/p".into(), "/m".into()];
            assert_eq!(parse(&daemon), HelperCall::Cli, "{exe}");
        }
    }

    #[test]
    fn malformed_helper_calls_say_how_to_call_it() {
        for v in [
            &["mount.fuse.terrace", "/p"][..],
            &["mount.fuse.terrace", "/p", "/m", "-o"],
            &["mount.fuse.terrace", "/p", "/m", "--bogus"],
        ] {
            assert!(matches!(parse(&args(v)), HelperCall::Usage(_)), "{v:?}");
        }
    }
}
