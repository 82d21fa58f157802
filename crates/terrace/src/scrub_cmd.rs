//! `terrace scrub MOUNTPOINT [--rate SIZE] [--no-repair] [--json] [--quiet]`: reads
//! and verifies every block of file data on the block tiers of a mounted
//! pool, repairing from clean copies where it can (`core/src/scrub.rs`).
//!
//! The daemon runs the scrub in its own thread (control request
//! [`StartScrub`]); this command then follows it through the status
//! (`status.scrub`, a [`ScrubReport`]) with a progress bar, and prints the result. Ctrl-C stops
//! following, not the scrub: `terrace status` shows it running.

use crate::control::protocol::{GetStatus, StartScrub, SCRUB_ALREADY_RUNNING};
use crate::control::{self, ControlError};
use crate::util::{self, CliError, CliResult};
use std::io::IsTerminal;
use std::path::Path;
use std::time::Duration;
use terrace_core::service_state::ScrubReport;

/// The scrub part of the daemon's status.
fn current(socket: &Path, mnt: &Path) -> CliResult<Option<ScrubReport>> {
    match control::call(socket, GetStatus {}, Duration::from_secs(10)) {
        Ok(r) => Ok(r.status.core.scrub),
        Err(ControlError::NoDaemon) => Err(CliError::at(
            mnt,
            "the terrace daemon stopped answering during the scrub (it may have died; the next mount recovers the pool)",
        )),
        Err(ControlError::Failed(m)) => Err(CliError::at(mnt, m)),
        Err(ControlError::Refused(r)) => Err(CliError::at(mnt, r.error)),
    }
}

/// Runs `terrace scrub`. Exit status: 0 nothing damaged is left, 1 damage
/// that could not be repaired, 2 the scrub could not run.
pub fn run(mnt: &Path, rate: Option<&str>, repair: bool, as_json: bool, quiet: bool) -> CliResult {
    let rate = match rate {
        Some(r) => util::parse_size(r).map_err(|e| {
            CliError::new(format!(
                "bad --rate {r:?}: {e} (bytes per second, e.g. 200M)"
            ))
            .code(2)
        })?,
        None => 0,
    };
    let abs = util::abs_path(mnt);
    let files = util::RunFiles {
        socket: util::control_socket(&abs),
        ..util::run_files(&abs)
    };
    let req = StartScrub { rate, repair };
    match control::call(&files.socket, req, Duration::from_secs(10)) {
        Ok(_started) => {}
        Err(ControlError::NoDaemon) => return Err(crate::admin::no_daemon(&abs, mnt).code(2)),
        Err(ControlError::Failed(m)) => return Err(CliError::at(mnt, m).code(2)),
        Err(ControlError::Refused(r)) if r.error == SCRUB_ALREADY_RUNNING => {
            util::warn(format!(
                "{}: a scrub is already running: following it",
                mnt.display()
            ));
        }
        Err(ControlError::Refused(r)) => return Err(CliError::at(mnt, r.error).code(2)),
    }
    let bar = (!as_json && !quiet && std::io::stderr().is_terminal()).then(|| {
        let b =
            indicatif::ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::stderr());
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "scrubbing [{bar:40}] {pos}/{len} blocks ({eta}) {msg}",
        ) {
            b.set_style(style.progress_chars("=> "));
        }
        b
    });
    let report = loop {
        let r = current(&files.socket, mnt)?;
        if let (Some(b), Some(r)) = (&bar, &r) {
            b.set_length(r.total_blocks);
            b.set_position(r.read_blocks);
            if r.bad_blocks > 0 {
                b.set_message(format!("{} damaged", r.bad_blocks));
            }
        }
        match r {
            Some(r) if !r.running => break r,
            _ => std::thread::sleep(Duration::from_millis(200)),
        }
    };
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    if as_json {
        util::out(&serde_json::to_string_pretty(&report).unwrap_or_default());
    } else {
        util::out(&format!(
            "{}: scrub {}: {} blocks ({}) read, {} verified, {} damaged, {} repaired{}",
            mnt.display(),
            if report.stopped {
                "stopped by unmount"
            } else {
                "done"
            },
            report.read_blocks,
            util::human_bytes(report.read_blocks * 4096),
            report.checked_blocks,
            report.bad_blocks,
            report.repaired_blocks,
            util::unverified_note(report.unverified_blocks)
        ));
        for u in &report.unrepairable {
            util::out(&format!("  unrepaired: {u}"));
        }
        if !report.repair && report.bad_blocks > 0 {
            util::out("  (no repairs: read-only mount or --no-repair)");
        }
    }
    if report.unrepairable.is_empty() && !report.stopped {
        Ok(())
    } else {
        Err(CliError::new(format!(
            "{} damaged blocks were not repaired",
            report.unrepairable.len()
        ))
        .code(1))
    }
}
