//! Control channel between the `terrace` command and a mount daemon.
//!
//! The daemon listens on a Unix socket named after the mount point
//! (`/run/terrace/<mount-point>.sock`, see [`crate::daemon`]). The client
//! sends one JSON line, the daemon answers one JSON line and closes. Every
//! request and every answer is a type of [`protocol`], used by both sides:
//! [`client::call`] sends a request and reads its answer as the reply type
//! the request names; [`server`] reads requests and can only answer each
//! with that same type.
//!
//! On the wire (field names are the types' field names):
//!
//! - `{"cmd":"status"}` → `{"ok":true,"status":{…Status…,"pid":N,"mountpoint":"…","pool":"…","read_only":B}}`
//! - `{"cmd":"umount","lazy":B}` → `{"ok":true,"pid":N,"clean":true,"read_only":B}`
//!   once the pool is persisted and marked clean and the FUSE mount is gone
//!   (the daemon exits right after), or with `lazy`
//!   `{"ok":true,"pid":N,"detached":true}` once the mount point is detached.
//! - `{"cmd":"settings"}` → `{"ok":true,"settings":[{"key":"…","value":"…","help":"…"},…]}`
//! - `{"cmd":"set","key":"…","value":"…"}` → `{"ok":true,"key":"…","value":"…"}`
//! - `{"cmd":"migrate","inos":[…],"to":T}` → `{"ok":true,"bytes":N,"failed":[{"ino":N,"error":"…"},…]}`
//! - `{"cmd":"scrub","rate":N,"repair":B}` → `{"ok":true}` (the scrub runs on;
//!   the status follows it)
//! - `{"cmd":"extents","inos":[…]}` → `{"ok":true,"files":[{"ino":N,"extents":[{"offset":N,"length":N,"tier":"…","block":N|null,"counter":N},…]},…],"failed":[{"ino":N,"error":"…"},…]}`
//!   (every extent, however many; what `terrace where` lists)
//! - any refusal: `{"ok":false,"error":"…"}` (with `"errno":N` for some);
//!   an unknown command is refused too.
//!
//! `umount`, `set`, `migrate` and `scrub` are for root and the mounting user
//! only; `status`, `settings` and `extents` for anyone.

pub mod client;
pub mod protocol;
pub mod server;

pub use client::{call, ControlError};
