//! The daemon side: reads requests from the control socket and answers them
//! from the mounted [`Fs`]. `umount` is handed to the daemon's event loop
//! (it ends the FUSE session), which answers it when done.

use super::protocol::{
    self, AddTier, Answer, Call, DaemonStatus, DefragmentFiles, DefragmentReply, ExtentsReply,
    FileDefragmented, FileExtents, FileFailure, GetExtents, GetStatus, ListSettings, MigrateFiles,
    MigrateReply, Refusal, RemoveTier, Request, ScrubStarted, SetReply, SetSetting, SettingInfo,
    SettingsReply, StartScrub, StatusReply, SyncPool, Synced, Unmount,
};
use crate::util;
use std::io::{self, BufRead, BufReader, Write};
use std::marker::PhantomData;
use std::os::unix::io::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use terrace_core::rules::PinnedElsewhere;
use terrace_core::Fs;

/// The connection of one request of type `C`: it can be answered only with
/// `C`'s reply (or a refusal).
pub struct Responder<C> {
    stream: UnixStream,
    call: PhantomData<fn() -> C>,
}

impl<C: Call> Responder<C> {
    fn new(stream: UnixStream) -> Responder<C> {
        Responder {
            stream,
            call: PhantomData,
        }
    }

    /// Sends the answer (a client that hung up is not an error).
    pub fn answer(&self, answer: &Answer<C::Reply>) {
        send(&self.stream, &protocol::encode_answer(answer));
    }

    /// Refuses the request.
    pub fn refuse(&self, why: impl Into<String>) {
        self.answer(&Err(Refusal::new(why)))
    }

    /// Does long work (`migrate`, `defragment`, `sync`, tier changes) on a
    /// thread of its own and answers from there, so that `status` stays
    /// responsive meanwhile.
    fn answer_from_thread(self, work: impl FnOnce() -> Answer<C::Reply> + Send + 'static)
    where
        C: 'static,
    {
        std::thread::spawn(move || {
            let _ = self.stream.set_write_timeout(Some(Duration::from_secs(30)));
            self.answer(&work());
        });
    }
}

fn send(mut s: &UnixStream, line: &str) {
    let mut line = line.to_string();
    line.push('\n');
    let _ = s.write_all(line.as_bytes());
}

/// Refuses on a connection whose request is not known (or not allowed).
fn refuse(s: &UnixStream, refusal: Refusal) {
    send(s, &protocol::encode_answer::<()>(&Err(refusal)));
}

/// Credentials of the process at the other end of a Unix socket.
fn peer_cred(s: &UnixStream) -> Option<libc::ucred> {
    // Safety: getsockopt fills a ucred of the given length for a socket we own.
    unsafe {
        let mut cred: libc::ucred = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
        let r = libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            &mut cred as *mut libc::ucred as *mut libc::c_void,
            &mut len,
        );
        (r == 0).then_some(cred)
    }
}

/// Who asks, for the per-file check of requests anyone may make.
pub(crate) struct Asker {
    uid: u32,
    /// Primary and supplementary groups.
    groups: Vec<u32>,
    /// Root or the mounting user: sees every file.
    trusted: bool,
}

impl Asker {
    fn of(cred: Option<libc::ucred>, me: u32) -> Asker {
        let Some(c) = cred else {
            return Asker {
                uid: u32::MAX,
                groups: Vec::new(),
                trusted: false,
            };
        };
        let mut groups = supplementary_groups(c.pid);
        groups.push(c.gid);
        Asker {
            uid: c.uid,
            groups,
            trusted: c.uid == 0 || c.uid == me,
        }
    }

    /// Whether the asker could read a file with these attributes (the
    /// owner, group and other read bits, as open(O_RDONLY) checks them).
    pub(crate) fn may_read(&self, attr: &terrace_core::Attr) -> bool {
        if self.trusted {
            return true;
        }
        let bits = if self.uid == attr.uid {
            attr.mode >> 6
        } else if self.groups.contains(&attr.gid) {
            attr.mode >> 3
        } else {
            attr.mode
        };
        bits & 0o4 != 0
    }
}

/// The supplementary groups of process `pid` (from /proc; empty when it is
/// gone, which only makes the check stricter).
fn supplementary_groups(pid: i32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix("Groups:")).map(|g| {
                g.split_whitespace()
                    .filter_map(|n| n.parse().ok())
                    .collect()
            })
        })
        .unwrap_or_default()
}

/// What the control server serves.
pub struct Server {
    /// The mounted pool.
    pub fs: Arc<Fs>,
    /// Its PM tier, as the status names it.
    pub pool: PathBuf,
    /// Its mount point.
    pub mnt: PathBuf,
    /// The URL of its metrics, when served.
    pub metrics: Option<String>,
}

impl Server {
    /// Serves `listener` in a thread of its own until the process exits, or
    /// until `umount` returns false (the event loop is gone). `umount` gets
    /// every permitted `umount` request with its connection, to answer.
    pub fn spawn(
        self,
        listener: UnixListener,
        umount: impl FnMut(Unmount, Responder<Unmount>) -> bool + Send + 'static,
    ) -> io::Result<()> {
        std::thread::Builder::new()
            .name("control".into())
            .spawn(move || self.run(listener, umount))
            .map(drop)
    }

    fn run(
        self,
        listener: UnixListener,
        mut umount: impl FnMut(Unmount, Responder<Unmount>) -> bool,
    ) {
        // Safety: geteuid cannot fail.
        let me = unsafe { libc::geteuid() };
        for conn in listener.incoming() {
            let Ok(stream) = conn else { continue };
            let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
            let _ = stream.set_write_timeout(Some(Duration::from_secs(5)));
            let mut line = String::new();
            if BufReader::new(&stream).read_line(&mut line).is_err() {
                continue;
            }
            let req = match protocol::decode_request(line.trim()) {
                Ok(r) => r,
                Err(refusal) => {
                    refuse(&stream, refusal);
                    continue;
                }
            };
            // Anyone may read; changing anything is for root and the
            // mounting user.
            let cred = peer_cred(&stream);
            if let Some(what) = req.privileged() {
                let uid = cred.map(|c| c.uid);
                if uid != Some(0) && uid != Some(me) {
                    refuse(
                        &stream,
                        Refusal::new(format!(
                            "permission denied: only root or the mounting user may {what}"
                        )),
                    );
                    continue;
                }
            }
            // A read-only mount, or one remounted read-only since (frozen).
            let read_only = self.fs.is_read_only() || self.fs.is_frozen();
            if let Some(what) = req.writes().filter(|_| read_only) {
                refuse(&stream, Refusal::read_only(what, self.fs.is_read_only()));
                continue;
            }
            match req {
                Request::Status(GetStatus {}) => {
                    Responder::<GetStatus>::new(stream).answer(&Ok(self.status()))
                }
                Request::Umount(u) => {
                    let _ = stream.set_write_timeout(Some(Duration::from_secs(30)));
                    if !umount(u, Responder::new(stream)) {
                        return;
                    }
                }
                Request::Settings(ListSettings {}) => {
                    Responder::<ListSettings>::new(stream).answer(&Ok(self.settings()))
                }
                Request::Set(s) => {
                    let answer = self.set(&s);
                    Responder::<SetSetting>::new(stream).answer(&answer)
                }
                Request::Migrate(m) => {
                    let fs = self.fs.clone();
                    Responder::<MigrateFiles>::new(stream)
                        .answer_from_thread(move || migrate(&fs, &m));
                }
                Request::Defragment(d) => {
                    let fs = self.fs.clone();
                    Responder::<DefragmentFiles>::new(stream)
                        .answer_from_thread(move || defragment(&fs, &d));
                }
                Request::Scrub(s) => {
                    let answer = self.scrub(&s);
                    Responder::<StartScrub>::new(stream).answer(&answer)
                }
                Request::TierAdd(a) => {
                    let fs = self.fs.clone();
                    // Creating an object tier talks to the store.
                    Responder::<AddTier>::new(stream)
                        .answer_from_thread(move || crate::tier_cmd::attach(&fs, &a));
                }
                Request::TierRemove(x) => {
                    let fs = self.fs.clone();
                    // A removal moves the tier's data off (minutes for a
                    // large tier), waits for moves in flight and may write
                    // back the cache: answered from its own thread, with no
                    // limit on how long (the client polls the status).
                    Responder::<RemoveTier>::new(stream).answer_from_thread(move || {
                        crate::tier_cmd::detach(&fs, x.tier.as_deref())
                    });
                }
                Request::Sync(SyncPool {}) => {
                    let fs = self.fs.clone();
                    // A write-back of the whole cache takes a while.
                    Responder::<SyncPool>::new(stream).answer_from_thread(move || {
                        fs.sync_cached()
                            .map(|dirty_bytes| Synced { dirty_bytes })
                            .map_err(|e| Refusal::new(util::os_reason(&e)))
                    });
                }
                Request::Extents(x) => {
                    let fs = self.fs.clone();
                    let asker = Asker::of(cred, me);
                    let r = Responder::<GetExtents>::new(stream);
                    // A file can have millions of extents: build and send
                    // the answer from its own thread.
                    std::thread::spawn(move || {
                        let _ = r.stream.set_write_timeout(Some(Duration::from_secs(60)));
                        r.answer(&Ok(extents(&fs, &x, &asker)));
                    });
                }
            }
        }
    }

    fn status(&self) -> StatusReply {
        StatusReply {
            status: DaemonStatus {
                core: self.fs.status(),
                pid: std::process::id(),
                mountpoint: self.mnt.to_string_lossy().into_owned(),
                pool: self.pool.to_string_lossy().into_owned(),
                read_only: self.fs.is_read_only(),
                metrics: self.metrics.clone(),
            },
        }
    }

    fn settings(&self) -> SettingsReply {
        let now = self.fs.settings();
        SettingsReply {
            settings: terrace_policy::Settings::keys()
                .into_iter()
                .map(|(key, help)| SettingInfo {
                    key: key.into(),
                    value: now.get(key).unwrap_or_default(),
                    help: help.into(),
                })
                .collect(),
        }
    }

    fn set(&self, s: &SetSetting) -> Answer<SetReply> {
        let key = protocol::setting_name(&s.key);
        self.fs
            .set_setting(key, &s.value)
            .map_err(Refusal::invalid)?;
        Ok(SetReply {
            key: key.into(),
            value: self.fs.settings().get(key).unwrap_or_default(),
        })
    }

    /// Starts a scrub in its own thread; the client follows it through the
    /// status. A read-only mount scrubs without repairing.
    fn scrub(&self, s: &StartScrub) -> Answer<ScrubStarted> {
        match self.fs.start_scrub(s.rate, s.repair) {
            Ok(()) => Ok(ScrubStarted {}),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                Err(Refusal::new(protocol::SCRUB_ALREADY_RUNNING))
            }
            Err(e) => Err(Refusal::new(util::os_reason(&e))),
        }
    }
}

/// Every extent of the files asked for that the asker may read (a file's
/// layout is refused, like its data, to those without read permission).
fn extents(fs: &Fs, x: &GetExtents, asker: &Asker) -> ExtentsReply {
    let mut reply = ExtentsReply {
        files: Vec::with_capacity(x.inos.len()),
        failed: Vec::new(),
    };
    for &ino in &x.inos {
        let allowed = fs.getattr(ino).map(|a| asker.may_read(&a));
        if let Ok(false) = allowed {
            reply.failed.push(FileFailure {
                ino,
                error: util::os_reason(&io::Error::from_raw_os_error(libc::EACCES)),
            });
            continue;
        }
        match fs.extent_rows(ino) {
            Ok(extents) => reply.files.push(FileExtents { ino, extents }),
            Err(e) => reply.failed.push(FileFailure {
                ino,
                error: util::os_reason(&e),
            }),
        }
    }
    reply
}

/// Moves the files; a request for one file is refused when it fails with
/// nothing moved, one for several reports failures per file. Files a rule pins elsewhere are
/// listed apart: they are left where the user wants them, not failures.
fn migrate(fs: &Fs, m: &MigrateFiles) -> Answer<MigrateReply> {
    let (bytes, errors) = fs
        .migrate_files(&m.inos, m.to)
        .map_err(|e| Refusal::new(util::os_reason(&e)))?;
    let mut reply = MigrateReply {
        bytes,
        failed: Vec::new(),
        pinned: Vec::new(),
    };
    for (ino, e) in errors {
        let pinned = e.get_ref().is_some_and(|r| r.is::<PinnedElsewhere>());
        let f = FileFailure {
            ino,
            error: util::os_reason(&e),
        };
        if pinned {
            reply.pinned.push(f);
        } else {
            reply.failed.push(f);
        }
    }
    // A one-file request that moved nothing is refused with the reason;
    // one that moved part before failing answers with the bytes it moved.
    match reply.failed.first() {
        Some(f) if m.inos.len() == 1 && reply.bytes == 0 => Err(Refusal::new(f.error.clone())),
        _ => Ok(reply),
    }
}

/// Rewrites the files' fragmented data on the tier.
fn defragment(fs: &Fs, d: &DefragmentFiles) -> Answer<DefragmentReply> {
    let (done, errors) = fs
        .defragment_files(&d.inos, d.tier)
        .map_err(|e| Refusal::new(util::os_reason(&e)))?;
    Ok(DefragmentReply {
        files: done
            .into_iter()
            .map(|(ino, r)| FileDefragmented {
                ino,
                runs_before: r.runs_before,
                runs_after: r.runs_after,
                bytes: r.bytes,
            })
            .collect(),
        failed: errors
            .into_iter()
            .map(|(ino, e)| FileFailure {
                ino,
                error: util::os_reason(&e),
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::protocol::StatusReply;
    use serde_json::Value;
    use terrace_format::{TierKind, TierRecord};
    use terrace_media::{MemBlock, MemMedia, PmMedia};

    /// A mounted pool in memory: 4 MiB of PM and a 32 MiB SSD tier.
    fn tiered_fs() -> Arc<Fs> {
        let pm = Arc::new(MemMedia::new(4 << 20));
        let ssd = Arc::new(MemBlock::new(32 << 20));
        let tier = |id, kind, size, extent_size, path: &str| TierRecord {
            id,
            kind,
            size,
            extent_size,
            path: path.into(),
            epoch: 0,
        };
        let params = terrace_core::FormatParams {
            uuid: [7; 16],
            inode_count: 64,
            tiers: vec![
                tier(0, TierKind::Pm, pm.len(), 0, "/dev/shm/pool"),
                tier(
                    1,
                    TierKind::Ssd,
                    32 << 20,
                    terrace_format::DEFAULT_EXTENT_SIZE,
                    "/var/ssd.img",
                ),
            ],
            root_uid: 0,
            root_gid: 0,
        };
        terrace_core::format(&*pm, &params).expect("format");
        Arc::new(Fs::mount_with_tiers(pm, vec![(1, ssd)]).expect("mount"))
    }

    #[test]
    fn only_those_who_may_read_a_file_see_its_extents() {
        let fs = tiered_fs();
        let ctx = terrace_core::Ctx {
            uid: 1000,
            gid: 1000,
            umask: 0,
        };
        let private = fs
            .mknod(1, b"private", libc::S_IFREG | 0o600, 0, ctx)
            .unwrap();
        let shared = fs
            .mknod(1, b"group", libc::S_IFREG | 0o640, 0, ctx)
            .unwrap();
        let open = fs.mknod(1, b"open", libc::S_IFREG | 0o644, 0, ctx).unwrap();
        for f in [&private, &shared, &open] {
            fs.write(f.ino, 0, &[1u8; 4096]).unwrap();
        }
        let ask = |uid, groups: Vec<u32>, trusted| Asker {
            uid,
            groups,
            trusted,
        };
        let inos = vec![private.ino, shared.ino, open.ino];
        let seen = |asker: &Asker| -> Vec<u64> {
            let reply = extents(&fs, &GetExtents { inos: inos.clone() }, asker);
            for f in &reply.failed {
                assert!(f.error.contains("ermission"), "{}", f.error);
            }
            reply.files.iter().map(|f| f.ino).collect()
        };
        assert_eq!(seen(&ask(1000, vec![1000], false)), inos, "the owner");
        assert_eq!(seen(&ask(0, vec![0], true)), inos, "root");
        assert_eq!(
            seen(&ask(2000, vec![1000], false)),
            [shared.ino, open.ino],
            "the group"
        );
        assert_eq!(seen(&ask(2000, vec![2000], false)), [open.ino], "others");
        // An owner without the read bit is refused, as open(O_RDONLY) is.
        let wo = fs.mknod(1, b"wo", libc::S_IFREG | 0o244, 0, ctx).unwrap();
        assert!(!ask(1000, vec![1000], false).may_read(&fs.getattr(wo.ino).unwrap()));
        fs.unmount().unwrap();
    }

    /// A tiered pool and a control server over it.
    fn tiered_server() -> (Arc<Fs>, Server) {
        let fs = tiered_fs();
        let server = Server {
            fs: fs.clone(),
            pool: "/dev/shm/pool".into(),
            mnt: "/mnt/t".into(),
            metrics: None,
        };
        (fs, server)
    }

    #[test]
    fn an_empty_block_tier_shows_no_fragmentation() {
        let (fs, server) = tiered_server();
        let text = crate::status_text::render_status(&server.status().status);
        let io_row = text
            .lines()
            .skip_while(|l| !l.trim_start().starts_with("I/O"))
            .find(|l| l.trim_start().starts_with("ssd"))
            .expect("an I/O row for the ssd tier");
        assert!(io_row.trim_end().ends_with(" -"), "{io_row}");
        fs.unmount().unwrap();
    }

    #[test]
    fn write_amplification_is_shown_once_applications_wrote_a_mebibyte() {
        let (fs, server) = tiered_server();
        let wa_line = |text: &str| {
            text.lines()
                .find(|l| l.contains("write amplification"))
                .expect("a write amplification line for the ssd")
                .to_string()
        };
        let ctx = terrace_core::Ctx {
            uid: 0,
            gid: 0,
            umask: 0,
        };
        let a = fs.mknod(1, b"a", libc::S_IFREG | 0o644, 0, ctx).unwrap();
        fs.write(a.ino, 0, b"tiny").unwrap();
        let text = crate::status_text::render_status(&server.status().status);
        assert!(
            wa_line(&text)
                .ends_with("write amplification - (applications wrote under 1 MiB since mount)"),
            "{text}"
        );
        fs.write(a.ino, 0, &vec![5u8; 2 << 20]).unwrap();
        fs.fsync(a.ino, false).unwrap();
        let (moved, failed) = fs.migrate_files(&[a.ino], 1).unwrap();
        assert!(moved > 0 && failed.is_empty(), "{moved} {failed:?}");
        fs.fsync(a.ino, false).unwrap();
        let text = crate::status_text::render_status(&server.status().status);
        let line = wa_line(&text);
        let ratio: f64 = line
            .split("write amplification ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|r| r.parse().ok())
            .unwrap_or_else(|| panic!("a ratio in {line}"));
        assert!((0.5..2.0).contains(&ratio), "{line}");
        fs.unmount().unwrap();
    }

    #[test]
    fn the_status_reads_back_as_the_daemon_sent_it() {
        let fs = tiered_fs();
        // Settings away from their defaults (each kind of value), data on
        // both tiers, a migration and a scrub: every part of the status set.
        for (k, v) in [
            ("placement_policy", "block-first"),
            ("migration_threshold", "75"),
            ("writeback_age_ns", "10s"),
            ("log_migration", "off"),
            ("dram_cache_bytes", "8M"),
        ] {
            fs.set_setting(k, v).unwrap();
        }
        let ctx = terrace_core::Ctx {
            uid: 0,
            gid: 0,
            umask: 0,
        };
        let a = fs.mknod(1, b"a", libc::S_IFREG | 0o644, 0, ctx).unwrap();
        fs.write(a.ino, 0, &vec![5u8; 3 << 20]).unwrap();
        fs.fsync(a.ino, false).unwrap();
        fs.migrate_files(&[a.ino], 0).unwrap();
        fs.start_scrub(0, true).unwrap();
        while fs.scrub_status().is_some_and(|s| s.running) {
            std::thread::sleep(Duration::from_millis(5));
        }
        let server = Server {
            fs: fs.clone(),
            pool: "/dev/shm/pool".into(),
            mnt: "/mnt/t".into(),
            metrics: None,
        };
        let line = protocol::encode_answer(&Ok(server.status()));
        let sent: Value = serde_json::from_str(&line).unwrap();
        let got = protocol::decode_answer::<StatusReply>(&line)
            .unwrap()
            .unwrap();
        let mut again = serde_json::to_value(&got).unwrap();
        again["ok"] = Value::Bool(true);
        assert_eq!(again, sent);
        let st = &got.status;
        assert_eq!(st.core.tiers[1].kind, "ssd");
        assert!(st.core.scrub.is_some());
        assert_eq!(st.core.settings, fs.settings());
        assert_eq!(st.mountpoint, "/mnt/t");
        assert!(!st.read_only);
        let text = crate::status_text::render_status(st);
        assert!(
            text.contains("  mounted on    /mnt/t  (daemon pid "),
            "{text}"
        );
        fs.unmount().unwrap();
    }
}
