//! The `terrace` command: format, mount, inspect, unmount and check Terrace pools.

mod admin;
mod cli;
mod control;
mod daemon;
mod fsck_cmd;
mod iostat_cmd;
mod metrics;
mod migrate_cmd;
mod mkfs;
mod mount;
mod mount_helper;
mod object_tier;
mod remount_watch;
mod rule_cmd;
mod scrub_cmd;
mod sd_notify;
mod shell_docs;
mod status_text;
mod syslog;
mod tier_check;
mod tier_cmd;
mod tier_header_mend;
mod util;
mod where_cmd;

use clap::{CommandFactory, Parser};
use cli::{Cli, Cmd, TierAction};
use util::CliResult;

fn run(cli: Cli) -> CliResult {
    match cli.cmd {
        Cmd::Mkfs(a) => mkfs::run(&mkfs::MkfsConfig {
            tiers: a.tiers,
            inodes: a.inodes.unwrap_or(0),
            extent_size: a.extent_size,
            force: a.force,
        }),
        Cmd::Mount(a) => {
            let mut cfg = mount::MountConfig::new(a.pool, a.mountpoint);
            if let Some(path) = &a.config {
                cfg.add_config_file(path)?;
            }
            cfg.apply_options(&a.options)?;
            if let Some(size) = &a.dram_cache {
                cfg.apply_options(&[format!("dram_cache_bytes={size}")])?;
            }
            cfg.daemon = a.daemon;
            cfg.child = a.foreground_child;
            mount::run(&cfg)
        }
        Cmd::Umount(a) => admin::umount(&a.mountpoint, a.lazy),
        Cmd::Status(a) => admin::status(&a.mountpoint, a.json),
        Cmd::Fsck(a) => fsck_cmd::fsck(&a.pool, a.repair, a.data, a.json, a.quiet),
        Cmd::Where(a) => where_cmd::run(&a.path, a.all, a.json),
        Cmd::Set(a) => admin::set(&a.mountpoint, a.key.as_deref(), a.value.as_deref()),
        Cmd::Migrate(a) => migrate_cmd::run(
            &a.mountpoint,
            a.to.as_deref(),
            &a.paths,
            migrate_cmd::Options {
                quiet: a.quiet,
                defragment: a.defragment,
            },
        ),
        Cmd::Rule(a) => rule_cmd::run(
            std::slice::from_ref(&a.path),
            a.tier.as_deref(),
            a.recursive,
            a.all,
        ),
        Cmd::Tier(a) => match a.action {
            TierAction::Add { pool, tier, force } => tier_cmd::add(&pool, &tier, force),
            TierAction::Remove { pool, tier } => tier_cmd::remove(&pool, tier.as_deref()),
        },
        Cmd::Iostat(a) => iostat_cmd::run(&a.mountpoint, a.interval, a.count, a.json),
        Cmd::Scrub(a) => scrub_cmd::run(
            &a.mountpoint,
            a.rate.as_deref(),
            !a.no_repair,
            a.json,
            a.quiet,
        ),
        Cmd::Sync(a) => admin::sync(&a.mountpoint),
        Cmd::Completions(a) => shell_docs::completions(Cli::command(), a.shell),
        Cmd::Man(a) => shell_docs::man_pages(Cli::command(), &a.dir),
    }
}

fn main() {
    // Run by mount(8) or mount.fuse3 (`mount -t fuse.terrace`, fstab)?
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let cli = match mount_helper::parse(&argv) {
        mount_helper::HelperCall::Cli => Cli::parse_from(argv),
        mount_helper::HelperCall::Mount(args) => Cli::parse_from(args),
        mount_helper::HelperCall::Remount(args) => {
            // mount(8) without helpers (-i) changes the mount in place.
            let st = std::process::Command::new("mount").args(&args).status();
            std::process::exit(match st {
                Ok(s) => s.code().unwrap_or(1),
                Err(e) => {
                    eprintln!("terrace: cannot run mount(8) for the remount: {e}");
                    1
                }
            });
        }
        mount_helper::HelperCall::Fake => std::process::exit(0),
        mount_helper::HelperCall::Usage(msg) => {
            eprintln!("{msg}");
            std::process::exit(1);
        }
    };
    if !matches!(cli.cmd, Cmd::Mount(_)) {
        // Safety: called first, before any thread exists; restoring the
        // default action of SIGPIPE makes output into a closed pipe (`terrace
        // where FILE | head`) end the command quietly, as Unix tools do,
        // instead of a panic in println!. The daemon (mount) keeps ignoring
        // SIGPIPE: a client that hangs up must not kill it.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    let code = match run(cli) {
        Ok(()) => 0,
        Err(e) => {
            if !e.msg.is_empty() {
                eprintln!("terrace: {}", e.msg);
            }
            e.code
        }
    };
    std::process::exit(code);
}
