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
//! while the caller also looks names up (stat). Whether that first batch
//! really carries them is [`ListingAttrs`]'s guess: a walk that never stats
//! (`find` with name tests, `ls`) gets names only (node id 0: the kernel
//! makes no inode), so it does not pay for attributes it never uses.

use crate::convert::{file_attr, kind_of, negative_attr};
use crate::listing_attrs::ListingAttrs;
use crate::reply::TTL;
use fuser::{Generation, INodeNo, ReplyDirectoryPlus};
use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use terrace_core::{DirEntry, FileType, Fs};

/// Entries fetched from the core per batch while filling a reply (a reply
/// holds about 30 entries of short names per 4 KiB page).
const BATCH: usize = 64;

/// Fills `reply` with the entries of directory `ino` after cookie `offset`,
/// with their attributes when `listing` says the caller wants them.
pub(crate) fn fill(
    fs: &Fs,
    listing: &ListingAttrs,
    ino: u64,
    offset: u64,
    reply: ReplyDirectoryPlus,
) {
    if listing.attrs_for(offset) {
        fill_with_attrs(fs, ino, offset, reply)
    } else {
        fill_names(fs, listing, ino, offset, reply)
    }
}

/// Entries without attributes: each with node id 0, which the kernel lists
/// (name, `d_ino`, type) without making an inode or counting a lookup.
fn fill_names(
    fs: &Fs,
    listing: &ListingAttrs,
    ino: u64,
    offset: u64,
    mut reply: ReplyDirectoryPlus,
) {
    let mut off = offset;
    let mut files = Vec::new();
    let mut added = false;
    'batches: loop {
        let batch = match next_batch(fs.readdir(ino, off, BATCH), added) {
            Ok(Some(b)) => b,
            Ok(None) => break,
            Err(e) => return reply.error(crate::reply::errno_of(&e)),
        };
        for e in batch {
            if e.next_offset <= off || add_name(&mut reply, &e) {
                break 'batches;
            }
            if e.kind != FileType::Directory {
                files.push(e.ino);
            }
            added = true;
            off = e.next_offset;
        }
    }
    listing.listed_names(files);
    reply.ok();
}

/// The next batch for a reply being filled: `Ok(None)` ends the reply (no
/// entries left, or an error after some entries were added: those are sent
/// and the next call repeats the error); `Err` fails the request.
fn next_batch<T>(fetched: io::Result<Vec<T>>, added: bool) -> io::Result<Option<Vec<T>>> {
    match fetched {
        Ok(b) if b.is_empty() => Ok(None),
        Ok(b) => Ok(Some(b)),
        Err(_) if added => Ok(None),
        Err(e) => Err(e),
    }
}

/// Adds `e` without attributes; true when the reply is full.
fn add_name(reply: &mut ReplyDirectoryPlus, e: &DirEntry) -> bool {
    let mut d = negative_attr();
    d.kind = kind_of(e.kind);
    // "." and "..": the kernel links neither, whatever the node id.
    if e.name == b"." || e.name == b".." {
        d.ino = INodeNo(e.ino);
    }
    reply.add(
        INodeNo(e.ino),
        e.next_offset,
        OsStr::from_bytes(&e.name),
        &TTL,
        &d,
        Generation(0),
    )
}

/// Entries with their attributes (a lookup counted for each).
fn fill_with_attrs(fs: &Fs, ino: u64, offset: u64, mut reply: ReplyDirectoryPlus) {
    let mut off = offset;
    let mut added = false;
    loop {
        let batch = match next_batch(fs.readdirplus(ino, off, BATCH), added) {
            Ok(Some(b)) => b,
            Ok(None) => break,
            Err(e) => return reply.error(crate::reply::errno_of(&e)),
        };
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
                    // "." and "..": only the name, number and type are used.
                    None if e.name == b"." || e.name == b".." => add_name(&mut reply, &e),
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
