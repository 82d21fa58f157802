//! Shell completions and manual pages, generated from the command line's
//! own definition (clap), so they always match the binary:
//! `terrace completions SHELL` prints a completion script;
//! `terrace man DIR` (hidden; run by `make install` and `make deb`) writes
//! `terrace.1` and one `terrace-SUBCOMMAND.1` per subcommand into DIR.

use crate::util::{self, CliError, CliResult};
use std::io::Write;
use std::path::Path;

/// Prints the completion script of `shell` for `cmd` on stdout.
pub fn completions(mut cmd: clap::Command, shell: clap_complete::Shell) -> CliResult {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cmd, "terrace", &mut script);
    let mut o = std::io::stdout().lock();
    o.write_all(&script)
        .and_then(|()| o.flush())
        .map_err(|e| CliError::new(format!("writing the script: {}", util::os_reason(&e))))
}

/// Writes the manual pages of `cmd` and its (visible) subcommands into
/// `dir`, creating it; prints the files written.
pub fn man_pages(cmd: clap::Command, dir: &Path) -> CliResult {
    std::fs::create_dir_all(dir).map_err(|e| CliError::at(dir, util::os_reason(&e)))?;
    clap_mangen::generate_to(cmd, dir).map_err(|e| CliError::at(dir, util::os_reason(&e)))?;
    let mut pages: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| CliError::at(dir, util::os_reason(&e)))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("terrace") && n.ends_with(".1"))
        .collect();
    pages.sort();
    util::out(&format!(
        "terrace: wrote {} manual pages to {}: {}",
        pages.len(),
        dir.display(),
        pages.join(" ")
    ));
    Ok(())
}
