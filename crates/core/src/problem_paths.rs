//! The paths of the inodes a scan's problems concern, for mount refusals
//! and fsck reports ("inode 43 (/big): ..."): one child → name map per
//! report ([`Scan::names`]), walked up to the root. A mounted pool's scrub
//! walks a map of the same shape, built from the live inodes (`scrub.rs`).

use crate::recovery::{Problem, Scan};
use crate::types::Ino;
use std::collections::HashMap;
use terrace_format::ROOT_INO;

impl Scan {
    /// Where each inode the scan reached is named: child → (directory,
    /// name), the first name the scan read. Built once for a report of many
    /// problems.
    pub fn names(&self) -> HashMap<Ino, (Ino, Vec<u8>)> {
        let mut names: HashMap<Ino, (Ino, Vec<u8>)> = HashMap::new();
        for (&d, i) in &self.inodes {
            if let Some(dir) = i.dir.as_ref() {
                for (_, name, child, _) in dir.iter() {
                    if child != d {
                        names.entry(child).or_insert_with(|| (d, name.to_vec()));
                    }
                }
            }
        }
        names
    }

    /// `p` as a report gives it: with the path of the inode it concerns
    /// (by `names`, [`Scan::names`]) right after the inode's number
    /// ("inode 43 (/big): ...").
    pub fn describe(&self, p: &Problem, names: &HashMap<Ino, (Ino, Vec<u8>)>) -> String {
        let text = p.to_string();
        let Some(ino) = p.ino() else { return text };
        let note = path_note_of(ino, names);
        for who in [format!("inode {ino}"), format!("directory {ino}")] {
            if let Some(rest) = text.strip_prefix(&who) {
                return format!("{who}{note}{rest}");
            }
        }
        format!("{text}{note}")
    }
}

/// " (PATH)" for a report naming `ino`, by `names` ([`Scan::names`]), or
/// nothing when no path to it is known.
pub fn path_note_of(ino: Ino, names: &HashMap<Ino, (Ino, Vec<u8>)>) -> String {
    path_of(ino, names)
        .map(|p| format!(" ({p})"))
        .unwrap_or_default()
}

/// A path of `ino` from the root by `names` ([`Scan::names`]); `None` when
/// no directory the scan read names it, or the walk up does not reach the
/// root (a cycle, or deeper than any report needs).
pub fn path_of(ino: Ino, names: &HashMap<Ino, (Ino, Vec<u8>)>) -> Option<String> {
    let mut parts: Vec<String> = Vec::new();
    let mut at = ino;
    while at != ROOT_INO {
        if parts.len() >= 256 {
            return None;
        }
        let (dir, name) = names.get(&at)?;
        parts.push(String::from_utf8_lossy(name).into_owned());
        at = *dir;
    }
    parts.reverse();
    Some(format!("/{}", parts.join("/")))
}
