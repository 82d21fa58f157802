//! Extended attributes: the size-probe protocol of getxattr/listxattr and
//! the NUL-separated name list. Setting and removing are plain core calls
//! (`filesystem.rs`).
//!
//! Invariant: a value or list larger than the caller's buffer is ERANGE,
//! never truncated; `size == 0` asks for the length only.

use crate::reply::errno_of;
use fuser::{Errno, ReplyXattr};
use std::io;

/// Replies to getxattr/listxattr with `r` (the value, or the name list):
/// `size == 0` asks for the length only.
pub(crate) fn send(reply: ReplyXattr, size: u32, r: io::Result<Vec<u8>>) {
    let data = match r {
        Ok(d) => d,
        Err(e) => return reply.error(errno_of(&e)),
    };
    if size == 0 {
        match u32::try_from(data.len()) {
            Ok(n) => reply.size(n),
            Err(_) => reply.error(Errno::from_i32(libc::E2BIG)),
        }
    } else if data.len() > size as usize {
        reply.error(Errno::from_i32(libc::ERANGE));
    } else {
        reply.data(&data);
    }
}

/// listxattr's answer: every name followed by a NUL.
pub(crate) fn name_list(names: Vec<Vec<u8>>) -> Vec<u8> {
    let mut buf = Vec::new();
    for n in names {
        buf.extend_from_slice(&n);
        buf.push(0);
    }
    buf
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_listed_nul_terminated() {
        assert_eq!(name_list(vec![]), b"");
        assert_eq!(
            name_list(vec![b"user.a".to_vec(), b"trusted.b".to_vec()]),
            b"user.a\0trusted.b\0"
        );
    }
}
