//! `FUSE_READDIRPLUS`: directory entries with their attributes, so that
//! `ls -l`, `find -ls` or `stat` of every file of a directory the kernel has
//! not seen yet cost one request per batch of entries instead of a LOOKUP per
//! entry (issue 16 point 2).
//!
//! The kernel makes a dentry and an inode of every entry that carries a node
//! id — except "." and ".." — and counts one lookup for it, which it gives
//! back with FORGET; the core counts one for each entry it hands out
//! ([`Fs::readdirplus`]), and entries that do not fit the reply are given
//! back here at once. Negotiated as `FUSE_READDIRPLUS_AUTO`: the kernel asks
//! for attributes for the first batch of a directory and afterwards only
//! while the caller also looks names up (stat), so a plain `readdir` loop
//! (`find` without tests, `ls`) does not pay for attributes it never uses.

use crate::convert::{file_attr, kind_of, negative_attr};
use crate::reply::TTL;
use fuser::{Generation, INodeNo, ReplyDirectoryPlus};
use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use terrace_core::Fs;

/// Entries fetched from the core per batch while filling a reply (a reply
/// holds about 30 entries of short names per 4 KiB page).
const BATCH: usize = 64;

/// Fills `reply` with the entries of directory `ino` after cookie `offset`.
pub(crate) fn fill(fs: &Fs, ino: u64, offset: u64, mut reply: ReplyDirectoryPlus) {
    let mut off = offset;
    let mut added = false;
    loop {
        let batch = match fs.readdirplus(ino, off, BATCH) {
            Ok(b) => b,
            Err(e) if added => {
                // Send what we have; the next call repeats the error.
                let _: io::Error = e;
                break;
            }
            Err(e) => {
                reply.error(crate::reply::errno_of(&e));
                return;
            }
        };
        if batch.is_empty() {
            break;
        }
        let mut rest = batch.into_iter();
        while let Some((e, attr)) = rest.next() {
            // A cookie that does not advance would loop for ever; a full
            // reply ends the batch. Either way the entries not sent give
            // their lookup back.
            let full = e.next_offset <= off || {
                let name = OsStr::from_bytes(&e.name);
                match &attr {
                    Some(a) => reply.add(
                        INodeNo(a.ino),
                        e.next_offset,
                        name,
                        &TTL,
                        &file_attr(a),
                        Generation(u64::from(a.generation)),
                    ),
                    // "." and "..": the kernel links neither, whatever the
                    // node id; only the name, number and type are used.
                    None if e.name == b"." || e.name == b".." => {
                        let mut d = negative_attr();
                        d.ino = INodeNo(e.ino);
                        d.kind = kind_of(e.kind);
                        reply.add(INodeNo(e.ino), e.next_offset, name, &TTL, &d, Generation(0))
                    }
                    // Unlinked since the directory was read: left out.
                    None => false,
                }
            };
            if full {
                give_back(fs, attr.map(|a| a.ino));
                for (_, a) in rest {
                    give_back(fs, a.map(|a| a.ino));
                }
                reply.ok();
                return;
            }
            added = true;
            off = e.next_offset;
        }
    }
    reply.ok();
}

/// Returns the lookup the core counted for an entry that was not sent.
fn give_back(fs: &Fs, ino: Option<u64>) {
    if let Some(ino) = ino {
        fs.forget(ino, 1);
    }
}
