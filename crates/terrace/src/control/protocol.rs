//! The control protocol's messages: every request the `terrace` command
//! sends ([`Request`]) and the reply each one gets ([`Call::Reply`]), or a
//! [`Refusal`]. Both the client and the daemon use these types, so a field
//! renamed on one side is renamed on the other — and one renamed in the
//! core's status types breaks the build of whatever reads it.
//!
//! A reply goes on the wire as its JSON object with `"ok": true` added; a
//! refusal as `{"ok": false, "error": …}` ([`encode_answer`],
//! [`decode_answer`]).

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
pub use terrace_core::placement_view::ExtentRow;

/// One request, as sent: a JSON object whose `cmd` names the variant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "lowercase")]
pub enum Request {
    /// The pool's status.
    Status(GetStatus),
    /// Unmount and exit.
    Umount(Unmount),
    /// Every setting with its value and help.
    Settings(ListSettings),
    /// Change one setting.
    Set(SetSetting),
    /// Move files' data to a tier.
    Migrate(MigrateFiles),
    /// Start a scrub.
    Scrub(StartScrub),
    /// Where files' data lies: every extent.
    Extents(GetExtents),
    /// Append a tier to the mounted pool.
    #[serde(rename = "tier_add")]
    TierAdd(AddTier),
    /// Remove the mounted pool's last tier.
    #[serde(rename = "tier_remove")]
    TierRemove(RemoveTier),
    /// Write back every cached write now.
    Sync(SyncPool),
    /// Rewrite files' fragmented data on a block tier in file order.
    Defragment(DefragmentFiles),
}

impl Request {
    /// The `cmd` of every request, in the order the daemon lists them
    /// (a test checks that it names every variant).
    pub const NAMES: [&'static str; 11] = [
        "status",
        "umount",
        "settings",
        "set",
        "migrate",
        "scrub",
        "extents",
        "tier_add",
        "tier_remove",
        "sync",
        "defragment",
    ];

    /// What the request does, in words, when only root and the mounting user
    /// may make it; `None` when anyone may.
    pub fn privileged(&self) -> Option<&'static str> {
        match self {
            // Anyone may sync, as anyone may run sync(1).
            Request::Status(_) | Request::Settings(_) | Request::Extents(_) | Request::Sync(_) => {
                None
            }
            Request::Umount(_) => Some("unmount"),
            Request::Set(_) => Some("change settings"),
            Request::Migrate(_) => Some("migrate"),
            Request::Defragment(_) => Some("defragment"),
            Request::Scrub(_) => Some("scrub"),
            Request::TierAdd(_) => Some("add tiers"),
            Request::TierRemove(_) => Some("remove tiers"),
        }
    }

    /// Why a read-only mount refuses the request (it would write), or `None`.
    pub fn writes(&self) -> Option<&'static str> {
        match self {
            Request::Set(_) => Some("settings cannot change"),
            Request::Migrate(_) => Some("data cannot migrate"),
            Request::Defragment(_) => Some("data cannot be rewritten"),
            Request::TierAdd(_) => Some("tiers cannot be added"),
            Request::TierRemove(_) => Some("tiers cannot be removed"),
            _ => None,
        }
    }
}

/// A request type and the reply it gets.
pub trait Call: Into<Request> {
    /// What the daemon answers when it does not refuse.
    type Reply: Serialize + DeserializeOwned;
}

/// `status`: the pool's status.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GetStatus {}

/// `umount`: persist, mark clean, unmount and exit.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unmount {
    /// Detach the mount point now even if busy; the daemon finishes when
    /// the last open file closes.
    #[serde(default)]
    pub lazy: bool,
}

/// `settings`: list every setting.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListSettings {}

/// `set`: change one setting at run time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetSetting {
    /// The setting's name (`policy` is short for `migration_policy`).
    pub key: String,
    /// Its new value, as text.
    pub value: String,
}

/// `migrate`: move the data of some regular files to one tier; their moves
/// share device syncs, and failures are reported per file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigrateFiles {
    /// Inode numbers of the files.
    pub inos: Vec<u64>,
    /// Target tier id.
    pub to: u8,
}

/// `defragment`: rewrite the data some regular files have on block tier
/// `tier` in file order where it is fragmented (`terrace migrate
/// --defragment`); failures are reported per file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DefragmentFiles {
    /// Inode numbers of the files.
    pub inos: Vec<u64>,
    /// The block tier's id.
    pub tier: u8,
}

/// What a defragmentation did to one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileDefragmented {
    /// Its inode number.
    pub ino: u64,
    /// Runs of its data on the tier before and after.
    pub runs_before: u64,
    /// See `runs_before`.
    pub runs_after: u64,
    /// Bytes rewritten (0: it was not fragmented).
    pub bytes: u64,
}

/// The reply to [`DefragmentFiles`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DefragmentReply {
    /// The files done (rewritten or left as they were).
    pub files: Vec<FileDefragmented>,
    /// Files that failed, and why.
    pub failed: Vec<FileFailure>,
}

/// `sync`: write back every write the DRAM cache holds, as `sync(1)` would
/// on a kernel file system (the kernel sends no sync to a FUSE daemon:
/// it forwards `syncfs` to virtiofs only).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncPool {}

/// The reply to [`SyncPool`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Synced {
    /// Bytes of cached data that were dirty when the sync began.
    pub dirty_bytes: u64,
}

/// `scrub`: start a scrub in the daemon (the client follows it through the
/// status).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartScrub {
    /// Read at most this many bytes per second (0: no limit).
    #[serde(default)]
    pub rate: u64,
    /// Repair what can be repaired (a read-only mount never does).
    #[serde(default = "yes")]
    pub repair: bool,
}

/// `tier_add`: format a new slowest tier and attach it to the mounted pool
/// (`terrace tier add MOUNTPOINT KIND:PATH[:SIZE]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AddTier {
    /// The tier as `KIND:PATH[:SIZE]` with an absolute PATH, or `s3:URL`.
    pub spec: String,
    /// Format a file that holds something else (mkfs's `--force`).
    #[serde(default)]
    pub force: bool,
}

/// The reply to [`AddTier`]: the tier as the superblock now records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TierAdded {
    /// Its tier id.
    pub id: u8,
    /// `ssd`, `hdd` or `s3`.
    pub kind: String,
    /// Its size in bytes.
    pub size: u64,
    /// Its file, device or URL.
    pub path: String,
}

/// `tier_remove`: remove a tier of the mounted pool — the one named, else
/// the last — which must hold no data, log or open deleted file (`terrace
/// tier remove MOUNTPOINT [TIER]`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoveTier {
    /// The tier: an id or a kind name (`ssd`, `hdd`, `s3`); none for the
    /// last tier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
}

/// The reply to [`RemoveTier`]: the tier removed, as the superblock had it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TierRemoved {
    /// Its tier id.
    pub id: u8,
    /// `ssd`, `hdd` or `s3`.
    pub kind: String,
    /// Its size in bytes.
    pub size: u64,
    /// Its file, device or URL.
    pub path: String,
    /// What is left of it, in words, after `; `: a file that may be
    /// deleted, an object prefix that keeps its marker, or why its header
    /// could not be wiped.
    pub leftover: String,
}

fn yes() -> bool {
    true
}

/// The reply to [`GetStatus`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StatusReply {
    /// The status.
    pub status: DaemonStatus,
}

/// The status of a mount: the core's [`Status`](terrace_core::status::Status)
/// and what the daemon knows (its fields sit beside the core's in one JSON
/// object, which `terrace status --json` prints).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DaemonStatus {
    /// The pool's status as the core gives it.
    #[serde(flatten)]
    pub core: terrace_core::status::Status,
    /// The daemon's pid.
    pub pid: u32,
    /// Where the pool is mounted.
    pub mountpoint: String,
    /// The pool (path of its PM tier).
    pub pool: String,
    /// Mounted read-only.
    pub read_only: bool,
    /// Where the daemon serves Prometheus metrics (`-o metrics=`), as a URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<String>,
}

/// The reply to [`Unmount`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum UnmountReply {
    /// Lazy unmount: the mount point is detached; the daemon closes the pool
    /// when the last open file closes.
    Detached {
        /// The daemon's pid.
        pid: u32,
        /// Always true (names the reply on the wire).
        detached: bool,
    },
    /// The pool is persisted and marked clean (or was read-only), the FUSE
    /// mount is gone, and the daemon exits.
    Done {
        /// The daemon's pid (the client waits for it to exit).
        pid: u32,
        /// Always true (names the reply on the wire).
        clean: bool,
        /// The mount was read-only: nothing was written.
        read_only: bool,
    },
}

/// The reply to [`ListSettings`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SettingsReply {
    /// Every setting, in a stable order.
    pub settings: Vec<SettingInfo>,
}

/// One setting of a mount.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SettingInfo {
    /// Its name.
    pub key: String,
    /// Its value, as text (accepted back by `set`).
    pub value: String,
    /// One line on what it does.
    pub help: String,
}

/// The reply to [`SetSetting`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetReply {
    /// The setting changed (its full name).
    pub key: String,
    /// Its value now, as text.
    pub value: String,
}

/// The reply to [`MigrateFiles`] (a request for one file is refused when
/// that file fails and nothing of it moved).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigrateReply {
    /// Bytes moved.
    pub bytes: u64,
    /// Files that did not move, and why.
    pub failed: Vec<FileFailure>,
    /// Files left where a placement rule pins them (another tier), and
    /// where that is.
    #[serde(default)]
    pub pinned: Vec<FileFailure>,
}

/// A file a migration could not move.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileFailure {
    /// Its inode number.
    pub ino: u64,
    /// Why, in words.
    pub error: String,
}

/// `extents`: every extent of some files, by inode number (what `terrace
/// where` lists; complete however many there are).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GetExtents {
    /// Inode numbers of the files (their `st_ino` on the mount).
    pub inos: Vec<u64>,
}

/// The reply to [`GetExtents`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExtentsReply {
    /// The files that could be read, in the order asked.
    pub files: Vec<FileExtents>,
    /// The files that could not (no such inode), and why.
    pub failed: Vec<FileFailure>,
}

/// The extents of one file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileExtents {
    /// Its inode number.
    pub ino: u64,
    /// Every extent, as [`terrace_core::Fs::extent_rows`] lists them.
    pub extents: Vec<ExtentRow>,
}

/// The reply to [`StartScrub`]: it started.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScrubStarted {}

/// Why the daemon refused (`"ok": false`) — the clients put the mount
/// point in front of the message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    /// The reason, in words.
    #[serde(default = "refused")]
    pub error: String,
    /// The errno that goes with it, for some (EROFS on a read-only mount).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errno: Option<i32>,
}

fn refused() -> String {
    "the daemon refused".into()
}

impl Refusal {
    /// A refusal with a reason and no errno.
    pub fn new(error: impl Into<String>) -> Refusal {
        Refusal {
            error: error.into(),
            errno: None,
        }
    }

    /// The refusal of a bad argument (an unknown setting, a bad value):
    /// EINVAL, which the CLI reports as a usage error (exit status 2).
    pub fn invalid(error: impl Into<String>) -> Refusal {
        Refusal {
            error: error.into(),
            errno: Some(libc::EINVAL),
        }
    }

    /// The refusal of a request that would write on a read-only mount
    /// ([`Request::writes`] says what it would do): mounted with `-o ro`
    /// (`mounted_ro`: a `mount -o remount,rw` does not make it writable,
    /// the daemon opened the pool read-only), or remounted read-only since.
    pub fn read_only(what: &str, mounted_ro: bool) -> Refusal {
        let how = if mounted_ro {
            "nothing is written to a pool mounted with -o ro; unmount it and mount it without -o ro"
        } else {
            "the pool was remounted read-only; `mount -o remount,rw MOUNTPOINT` makes it writable again"
        };
        Refusal {
            error: format!("read-only mount: {what} ({how})"),
            errno: Some(libc::EROFS),
        }
    }

    /// The refusal of a request whose `cmd` names no [`Request`].
    pub fn unknown_command() -> Refusal {
        Refusal::new(format!(
            "unknown command (known: {})",
            Request::NAMES.join(", ")
        ))
    }
}

/// The refusal of a scrub while one runs (the client then follows that one).
pub const SCRUB_ALREADY_RUNNING: &str = "a scrub is already running";

/// What the daemon answers: the request's reply, or why not.
pub type Answer<T> = Result<T, Refusal>;

/// The request as one JSON line (without the newline).
pub fn encode_request(req: &Request) -> String {
    serde_json::to_string(req).expect("requests serialize")
}

/// Reads a request line; an unknown `cmd` and a malformed request are
/// refusals to send back.
pub fn decode_request(line: &str) -> Result<Request, Refusal> {
    let bad = |e: serde_json::Error| Refusal::new(format!("bad request: {e}"));
    let v: Value = serde_json::from_str(line).map_err(bad)?;
    let cmd = v.get("cmd").and_then(Value::as_str);
    if !cmd.is_some_and(|c| Request::NAMES.contains(&c)) {
        return Err(Refusal::unknown_command());
    }
    serde_json::from_value(v).map_err(bad)
}

/// An answer as one JSON line (without the newline): the reply's object
/// with `"ok": true`, or the refusal's with `"ok": false`.
pub fn encode_answer<T: Serialize>(answer: &Answer<T>) -> String {
    let encoded = match answer {
        Ok(reply) => serde_json::to_value(reply).map(|v| (true, v)),
        Err(refusal) => serde_json::to_value(refusal).map(|v| (false, v)),
    };
    let (ok, mut v) = match encoded {
        Ok((ok, v @ Value::Object(_))) => (ok, v),
        Ok(_) => (
            false,
            serde_json::json!({"error": "the answer is not a JSON object"}),
        ),
        Err(e) => (
            false,
            serde_json::json!({"error": format!("cannot encode the answer: {e}")}),
        ),
    };
    if let Some(o) = v.as_object_mut() {
        o.insert("ok".into(), Value::Bool(ok));
    }
    v.to_string()
}

/// Reads an answer line as the reply type `T` or a refusal.
pub fn decode_answer<T: DeserializeOwned>(line: &str) -> Result<Answer<T>, serde_json::Error> {
    let v: Value = serde_json::from_str(line)?;
    if v.get("ok") == Some(&Value::Bool(true)) {
        serde_json::from_value(v).map(Ok)
    } else {
        serde_json::from_value(v).map(Err)
    }
}

macro_rules! calls {
    ($($req:ident => $variant:ident, $reply:ty;)*) => {$(
        impl From<$req> for Request {
            fn from(r: $req) -> Request {
                Request::$variant(r)
            }
        }
        impl Call for $req {
            type Reply = $reply;
        }
    )*};
}

calls! {
    GetStatus => Status, StatusReply;
    Unmount => Umount, UnmountReply;
    ListSettings => Settings, SettingsReply;
    SetSetting => Set, SetReply;
    MigrateFiles => Migrate, MigrateReply;
    SyncPool => Sync, Synced;
    StartScrub => Scrub, ScrubStarted;
    GetExtents => Extents, ExtentsReply;
    AddTier => TierAdd, TierAdded;
    RemoveTier => TierRemove, TierRemoved;
    DefragmentFiles => Defragment, DefragmentReply;
}

/// The setting a name given to `terrace set` names: `policy` is short for
/// `migration_policy`; every other name is the setting's own.
pub fn setting_name(key: &str) -> &str {
    match key {
        "policy" => "migration_policy",
        k => k,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The `cmd` of a request (a new variant fails to compile here until
    /// it is listed).
    fn name(r: &Request) -> &'static str {
        match r {
            Request::Status(_) => "status",
            Request::Umount(_) => "umount",
            Request::Settings(_) => "settings",
            Request::Set(_) => "set",
            Request::Migrate(_) => "migrate",
            Request::Scrub(_) => "scrub",
            Request::Extents(_) => "extents",
            Request::TierAdd(_) => "tier_add",
            Request::TierRemove(_) => "tier_remove",
            Request::Sync(_) => "sync",
            Request::Defragment(_) => "defragment",
        }
    }

    fn every_request() -> Vec<Request> {
        vec![
            GetStatus {}.into(),
            Unmount { lazy: true }.into(),
            ListSettings {}.into(),
            SetSetting {
                key: "policy".into(),
                value: "nvmfs".into(),
            }
            .into(),
            MigrateFiles {
                inos: vec![5, 7],
                to: 1,
            }
            .into(),
            StartScrub {
                rate: 100,
                repair: false,
            }
            .into(),
            GetExtents { inos: vec![9] }.into(),
            AddTier {
                spec: "hdd:/d/h.img:1G".into(),
                force: false,
            }
            .into(),
            RemoveTier { tier: None }.into(),
            SyncPool {}.into(),
            DefragmentFiles {
                inos: vec![3],
                tier: 1,
            }
            .into(),
        ]
    }

    #[test]
    fn requests_keep_their_wire_form() {
        let lines: Vec<String> = every_request().iter().map(encode_request).collect();
        assert_eq!(
            lines,
            [
                r#"{"cmd":"status"}"#,
                r#"{"cmd":"umount","lazy":true}"#,
                r#"{"cmd":"settings"}"#,
                r#"{"cmd":"set","key":"policy","value":"nvmfs"}"#,
                r#"{"cmd":"migrate","inos":[5,7],"to":1}"#,
                r#"{"cmd":"scrub","rate":100,"repair":false}"#,
                r#"{"cmd":"extents","inos":[9]}"#,
                r#"{"cmd":"tier_add","spec":"hdd:/d/h.img:1G","force":false}"#,
                r#"{"cmd":"tier_remove"}"#,
                r#"{"cmd":"sync"}"#,
                r#"{"cmd":"defragment","inos":[3],"tier":1}"#,
            ]
        );
        for (r, line) in every_request().iter().zip(&lines) {
            assert_eq!(decode_request(line).as_ref(), Ok(r));
        }
    }

    #[test]
    fn names_list_every_request() {
        let names: Vec<&str> = every_request().iter().map(name).collect();
        assert_eq!(names, Request::NAMES);
        for r in every_request() {
            let v: Value = serde_json::from_str(&encode_request(&r)).unwrap();
            assert_eq!(v["cmd"], name(&r));
        }
    }

    #[test]
    fn old_defaults_and_bad_requests() {
        assert_eq!(
            decode_request(r#"{"cmd":"umount"}"#),
            Ok(Unmount { lazy: false }.into())
        );
        assert_eq!(
            decode_request(r#"{"cmd":"scrub"}"#),
            Ok(StartScrub {
                rate: 0,
                repair: true
            }
            .into())
        );
        let unknown = Refusal::new(
            "unknown command (known: status, umount, settings, set, migrate, scrub, extents, tier_add, tier_remove, sync, defragment)",
        );
        assert_eq!(decode_request(r#"{"cmd":"fly"}"#), Err(unknown.clone()));
        assert_eq!(decode_request(r#"{}"#), Err(unknown.clone()));
        assert_eq!(decode_request("5"), Err(unknown));
        let e = decode_request("{").unwrap_err();
        assert!(e.error.starts_with("bad request: "), "{e:?}");
        let e = decode_request(r#"{"cmd":"migrate","inos":[1]}"#).unwrap_err();
        assert!(e.error.contains("missing field `to`"), "{e:?}");
    }

    #[test]
    fn answers_carry_ok() {
        let done: Answer<UnmountReply> = Ok(UnmountReply::Done {
            pid: 7,
            clean: true,
            read_only: false,
        });
        let line = encode_answer(&done);
        assert_eq!(
            serde_json::from_str::<Value>(&line).unwrap(),
            json!({"ok": true, "pid": 7, "clean": true, "read_only": false})
        );
        assert_eq!(decode_answer::<UnmountReply>(&line).unwrap(), done);
        let detached = r#"{"ok":true,"pid":7,"detached":true}"#;
        assert_eq!(
            decode_answer::<UnmountReply>(detached).unwrap(),
            Ok(UnmountReply::Detached {
                pid: 7,
                detached: true
            })
        );
        let started = encode_answer(&Ok::<_, Refusal>(ScrubStarted {}));
        assert_eq!(started, r#"{"ok":true}"#);
        let ro =
            encode_answer::<SetReply>(&Err(Refusal::read_only("settings cannot change", true)));
        let v: Value = serde_json::from_str(&ro).unwrap();
        assert_eq!(v["ok"], false);
        assert_eq!(v["errno"], libc::EROFS);
        assert_eq!(
            decode_answer::<SetReply>(&ro).unwrap().unwrap_err().errno,
            Some(libc::EROFS)
        );
        assert_eq!(
            decode_answer::<SetReply>(r#"{"ok":false}"#).unwrap(),
            Err(Refusal::new("the daemon refused"))
        );
        // A reply missing a field is an error, not a zero.
        assert!(decode_answer::<MigrateReply>(r#"{"ok":true,"failed":[]}"#).is_err());
    }

    #[test]
    fn policy_names_the_migration_policy_and_other_names_themselves() {
        assert_eq!(setting_name("policy"), "migration_policy");
        assert_eq!(setting_name("placement_policy"), "placement_policy");
        assert_eq!(setting_name("no_such_key"), "no_such_key");
    }
}
