//! The daemon side: reads requests from the control socket and answers them
//! from the mounted [`Fs`]. `umount` is handed to the daemon's event loop
//! (it ends the FUSE session), which answers it when done.

use super::protocol::{
    self, Answer, Call, DaemonStatus, ExtentsReply, FileExtents, FileFailure, GetExtents,
    GetStatus, ListSettings, MigrateFiles, MigrateReply, Refusal, Request, ScrubStarted, SetReply,
    SetSetting, SettingInfo, SettingsReply, StartScrub, StatusReply, Unmount,
};
use crate::util;
use std::io::{self, BufRead, BufReader, Write};
use std::marker::PhantomData;
use std::os::unix::io::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
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

/// Uid of the process at the other end of a Unix socket.
fn peer_uid(s: &UnixStream) -> Option<u32> {
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
        (r == 0).then_some(cred.uid)
    }
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
            if let Some(what) = req.privileged() {
                let uid = peer_uid(&stream);
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
            if let Some(what) = req.writes().filter(|_| self.fs.is_read_only()) {
                refuse(&stream, Refusal::read_only(what));
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
                    let r = Responder::<MigrateFiles>::new(stream);
                    // Long work: answer from its own thread so status stays
                    // responsive.
                    std::thread::spawn(move || {
                        let _ = r.stream.set_write_timeout(Some(Duration::from_secs(30)));
                        r.answer(&migrate(&fs, &m));
                    });
                }
                Request::Scrub(s) => {
                    let answer = self.scrub(&s);
                    Responder::<StartScrub>::new(stream).answer(&answer)
                }
                Request::Extents(x) => {
                    let fs = self.fs.clone();
                    let r = Responder::<GetExtents>::new(stream);
                    // A file can have millions of extents: build and send
                    // the answer from its own thread.
                    std::thread::spawn(move || {
                        let _ = r.stream.set_write_timeout(Some(Duration::from_secs(60)));
                        r.answer(&Ok(extents(&fs, &x)));
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
        self.fs.set_setting(key, &s.value).map_err(Refusal::new)?;
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

/// Every extent of the files asked for.
fn extents(fs: &Fs, x: &GetExtents) -> ExtentsReply {
    let mut reply = ExtentsReply {
        files: Vec::with_capacity(x.inos.len()),
        failed: Vec::new(),
    };
    for &ino in &x.inos {
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

/// Moves the files; a request for one file is refused when it fails, one
/// for several reports failures per file.
fn migrate(fs: &Fs, m: &MigrateFiles) -> Answer<MigrateReply> {
    match fs.migrate_files(&m.inos, m.to) {
        Ok((bytes, failed)) if failed.is_empty() || m.inos.len() > 1 => Ok(MigrateReply {
            bytes,
            failed: failed
                .iter()
                .map(|(ino, e)| FileFailure {
                    ino: *ino,
                    error: util::os_reason(e),
                })
                .collect(),
        }),
        Ok((_, failed)) => Err(Refusal::new(util::os_reason(&failed[0].1))),
        Err(e) => Err(Refusal::new(util::os_reason(&e))),
    }
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
    fn an_empty_block_tier_shows_no_fragmentation() {
        let fs = tiered_fs();
        let server = Server {
            fs: fs.clone(),
            pool: "/dev/shm/pool".into(),
            mnt: "/mnt/t".into(),
            metrics: None,
        };
        let text = crate::admin::render_status(&server.status().status);
        let io_row = text
            .lines()
            .skip_while(|l| !l.trim_start().starts_with("I/O"))
            .find(|l| l.trim_start().starts_with("ssd"))
            .expect("an I/O row for the ssd tier");
        assert!(io_row.trim_end().ends_with(" -"), "{io_row}");
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
        let ctx = terrace_core::Ctx { uid: 0, gid: 0 };
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
        let text = crate::admin::render_status(st);
        assert!(
            text.contains("  mounted on    /mnt/t  (daemon pid "),
            "{text}"
        );
        fs.unmount().unwrap();
    }
}
