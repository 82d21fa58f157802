#!/usr/bin/env python3
"""Crash workload: writes, fsyncs and renames on a Terrace mount until it fails.

Run by test_crash_kill.py as a child process; the test kills the Terrace daemon
with SIGKILL at a random moment, after which every operation here fails
(ENOTCONN) and the script exits. Everything the file system has *promised* to
keep is recorded in a side log that lives outside the mount (on /tmp), one JSON
object per line, written only after the promise was made:

  {"ev": "append", "file": F, "size": N, "records": K}
        F (opened with O_APPEND) was fsync'd holding K records, N bytes.
  {"ev": "dsync", "file": F, "size": N, "records": K}
        a write to F (opened with O_DSYNC) returned; the file holds K records.
  {"ev": "version", "file": F, "version": V}
        a fully fsync'd temporary file holding version V was renamed over F and the
        directory was fsync'd.
  {"ev": "created", "name": N, "crc": C}          small file N written, fsync'd, dir fsync'd
  {"ev": "renaming", "from": A, "to": B}          logged BEFORE rename(A, B)
  {"ev": "renamed", "from": A, "to": B}           after rename(A, B) and fsync of the dir
  {"ev": "unlinking", "name": N} / {"ev": "unlinked", "name": N}   around unlink + dir fsync
  {"ev": "linking", "from": A, "to": B} / {"ev": "linked", ...}    around link + dir fsync
  {"ev": "ready"}   the work directory exists and is durable
  {"ev": "stopped", "errno": E, "op": OP}   the first failure (normally ENOTCONN)

Record format (appended files): 24-byte header  b"TRCR" | file id u32 | seq u32 |
payload length u32 | crc32(payload) u32 | crc32(header[0:20]) u32, then the payload.
The checker (verify() below, used by the test) parses these back.

Usage: crash_workload.py WORKDIR LOGFILE SEED [DATA_BUDGET_BYTES]
"""

from __future__ import annotations

import errno
import json
import os
import random
import struct
import sys
import zlib

RECORD_MAGIC = b"TRCR"
VERSION_MAGIC = b"TRCV"
HEADER = struct.Struct("<4sIIIII")  # magic, file id, seq, length, payload crc, header crc
APPEND_FILES = 3
DSYNC_FILES = 1
VERSION_FILES = 2
MAX_LIVE_META = 300


def payload_for(file_id: int, seq: int, length: int) -> bytes:
    """Deterministic payload of a record, so the checker can recompute it."""
    return random.Random(file_id * 1_000_003 + seq).randbytes(length)


def encode_record(file_id: int, seq: int, length: int, magic: bytes = RECORD_MAGIC) -> bytes:
    """Header + payload of one record."""
    payload = payload_for(file_id, seq, length)
    head = HEADER.pack(magic, file_id, seq, length, zlib.crc32(payload), 0)[:20]
    return head + struct.pack("<I", zlib.crc32(head)) + payload


def parse_records(data: bytes, file_id: int, magic: bytes = RECORD_MAGIC):
    """Parse consecutive records from the start of `data`.

    Returns (records, good_bytes, problem): the number of valid consecutive
    records (seq 0, 1, 2, ...), how many bytes they span, and a description of
    what stopped the parse (None if the data ended exactly after a record).
    """
    off = 0
    seq = 0
    while off < len(data):
        if len(data) - off < HEADER.size:
            return seq, off, f"{len(data) - off} trailing bytes (torn header) at offset {off}"
        m, fid, s, length, pcrc, hcrc = HEADER.unpack_from(data, off)
        if m != magic or zlib.crc32(data[off:off + 20]) != hcrc:
            zero = data[off:off + HEADER.size] == bytes(HEADER.size)
            return seq, off, f"{'zeros' if zero else 'garbage'} instead of record {seq} at offset {off}"
        if fid != file_id or s != seq:
            return seq, off, f"record for file {fid} seq {s} where file {file_id} seq {seq} belongs, offset {off}"
        body = data[off + HEADER.size:off + HEADER.size + length]
        if len(body) != length:
            return seq, off, f"record {seq} at offset {off} is torn ({len(body)} of {length} payload bytes)"
        if zlib.crc32(body) != pcrc or body != payload_for(file_id, seq, length):
            return seq, off, f"record {seq} at offset {off} has corrupted payload"
        off += HEADER.size + length
        seq += 1
    return seq, off, None


class Stop(Exception):
    """The file system failed under us (the daemon was killed): stop cleanly."""


class Workload:
    """The random mix of operations; every durable promise goes to the side log."""

    def __init__(self, workdir: str, logfile: str, seed: int, budget: int):
        self.dir = workdir
        self.rng = random.Random(seed)
        self.budget = budget
        self.written = 0
        self.log_fd = os.open(logfile, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.append_fds: list[int] = []
        self.append_state: list[list[int]] = []  # [size, records, unsynced records]
        self.dsync_fds: list[int] = []
        self.dsync_state: list[list[int]] = []
        self.versions = [0] * VERSION_FILES
        self.meta_live: list[str] = []
        self.meta_counter = 0
        self.dir_fd = -1

    # -- plumbing ---------------------------------------------------------
    def log(self, **event) -> None:
        os.write(self.log_fd, (json.dumps(event, separators=(",", ":")) + "\n").encode())

    def call(self, op: str, fn, *args):
        try:
            return fn(*args)
        except OSError as e:
            raise Stop(op, e.errno) from e

    def fsync_dir(self) -> None:
        self.call("fsync(dir)", os.fsync, self.dir_fd)

    def path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    # -- setup ----------------------------------------------------------------
    def setup(self) -> None:
        self.call("mkdir", os.mkdir, self.dir)
        self.dir_fd = self.call("open(dir)", os.open, self.dir, os.O_RDONLY | os.O_DIRECTORY)
        for i in range(APPEND_FILES):
            fd = self.call("create", os.open, self.path(f"append{i}"),
                           os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o644)
            self.append_fds.append(fd)
            self.append_state.append([0, 0, 0])
        for i in range(DSYNC_FILES):
            fd = self.call("create", os.open, self.path(f"dsync{i}"),
                           os.O_CREAT | os.O_WRONLY | os.O_APPEND | os.O_DSYNC, 0o644)
            self.dsync_fds.append(fd)
            self.dsync_state.append([0, 0])
        for fd in self.append_fds + self.dsync_fds:
            self.call("fsync", os.fsync, fd)
        self.fsync_dir()
        parent = os.open(os.path.dirname(self.dir), os.O_RDONLY | os.O_DIRECTORY)
        try:
            self.call("fsync(parent)", os.fsync, parent)
        finally:
            os.close(parent)
        self.log(ev="ready")

    # -- operations -----------------------------------------------------------
    def record_length(self) -> int:
        return self.rng.choice([10, 100, 1000, 4000, 4072, 4096, 5000, 20_000, 65_000])

    def op_append(self) -> None:
        i = self.rng.randrange(APPEND_FILES)
        st = self.append_state[i]
        rec = encode_record(i, st[1], self.record_length())
        n = self.call("write", os.write, self.append_fds[i], rec)
        assert n == len(rec), f"short write {n} of {len(rec)}"
        st[0] += n
        st[1] += 1
        st[2] += 1
        self.written += n
        if st[2] >= self.rng.randint(1, 4):
            self.call("fsync", os.fsync if self.rng.random() < 0.5 else os.fdatasync, self.append_fds[i])
            st[2] = 0
            self.log(ev="append", file=f"append{i}", size=st[0], records=st[1])

    def op_dsync(self) -> None:
        i = self.rng.randrange(DSYNC_FILES)
        st = self.dsync_state[i]
        file_id = 100 + i
        rec = encode_record(file_id, st[1], self.record_length())
        n = self.call("write(O_DSYNC)", os.write, self.dsync_fds[i], rec)
        assert n == len(rec)
        st[0] += n
        st[1] += 1
        self.written += n
        self.log(ev="dsync", file=f"dsync{i}", size=st[0], records=st[1])

    def op_version(self) -> None:
        i = self.rng.randrange(VERSION_FILES)
        version = self.versions[i] + 1
        tmp = self.path(f"version{i}.tmp{version}")
        data = encode_record(200 + i, version, self.rng.choice([0, 100, 4096, 12_000]), VERSION_MAGIC)
        fd = self.call("create(tmp)", os.open, tmp, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        try:
            self.call("write(tmp)", os.write, fd, data)
            self.call("fsync(tmp)", os.fsync, fd)
        finally:
            os.close(fd)
        self.call("rename(tmp)", os.rename, tmp, self.path(f"version{i}"))
        self.fsync_dir()
        self.versions[i] = version
        self.log(ev="version", file=f"version{i}", version=version)

    def op_create(self) -> None:
        name = f"m{self.meta_counter}"
        self.meta_counter += 1
        data = os.urandom(self.rng.choice([0, 17, 600, 4096, 9000]))
        fd = self.call("create", os.open, self.path(name), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        try:
            self.call("write", os.write, fd, data)
            self.call("fsync", os.fsync, fd)
        finally:
            os.close(fd)
        self.fsync_dir()
        self.meta_live.append(name)
        self.log(ev="created", name=name, crc=zlib.crc32(data))

    def op_rename(self) -> None:
        src = self.rng.choice(self.meta_live)
        dst = f"r{self.meta_counter}"
        self.meta_counter += 1
        self.log(ev="renaming", **{"from": src, "to": dst})
        self.call("rename", os.rename, self.path(src), self.path(dst))
        self.fsync_dir()
        self.meta_live[self.meta_live.index(src)] = dst
        self.log(ev="renamed", **{"from": src, "to": dst})

    def op_unlink(self) -> None:
        name = self.meta_live.pop(self.rng.randrange(len(self.meta_live)))
        self.log(ev="unlinking", name=name)
        self.call("unlink", os.unlink, self.path(name))
        self.fsync_dir()
        self.log(ev="unlinked", name=name)

    def op_link(self) -> None:
        src = self.rng.choice(self.meta_live)
        dst = f"h{self.meta_counter}"
        self.meta_counter += 1
        self.log(ev="linking", **{"from": src, "to": dst})
        self.call("link", os.link, self.path(src), self.path(dst))
        self.fsync_dir()
        self.meta_live.append(dst)
        self.log(ev="linked", **{"from": src, "to": dst})

    def step(self) -> None:
        r = self.rng.random()
        data_ok = self.written < self.budget
        if r < 0.35 and data_ok:
            self.op_append()
        elif r < 0.45 and data_ok:
            self.op_dsync()
        elif r < 0.55:
            self.op_version()
        elif r < 0.75 or not self.meta_live:
            if len(self.meta_live) < MAX_LIVE_META:
                self.op_create()
            else:
                self.op_unlink()
        elif r < 0.85:
            self.op_rename()
        elif r < 0.92:
            self.op_unlink()
        else:
            self.op_link()

    def run(self) -> None:
        try:
            self.setup()
            while True:
                self.step()
        except Stop as s:
            op, err = s.args
            self.log(ev="stopped", op=op, errno=errno.errorcode.get(err, err))


def main() -> int:
    workdir, logfile, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    budget = int(sys.argv[4]) if len(sys.argv) > 4 else 16 << 20
    Workload(workdir, logfile, seed, budget).run()
    return 0


# ---------------------------------------------------------------------------
# Checking (imported by the test)
# ---------------------------------------------------------------------------


def read_log(logfile: str) -> list[dict]:
    """The events of a side log; a torn last line (writer killed) is ignored."""
    events = []
    with open(logfile, "rb") as f:
        for line in f.read().split(b"\n"):
            if not line.strip():
                continue
            try:
                events.append(json.loads(line))
            except ValueError:
                pass
    return events


def _exists(path: str) -> bool:
    return os.path.lexists(path)


def verify(workdir: str, events: list[dict], strict_prefix: bool = True) -> list[str]:
    """Check the state of `workdir` after a crash against the promises in `events`.

    Returns a list of violations (empty = all good):
      * every fsync'd / O_DSYNC record is present and intact;
      * with strict_prefix, each appended file is exactly a sequence of whole
        records (writes are atomic: no torn or zero-filled tail);
      * each renamed-over version file holds a complete version >= the promised one;
      * every durable create/rename/unlink/link is reflected; an interrupted
        rename left exactly one of the two names.
    """
    problems: list[str] = []
    if not any(e["ev"] == "ready" for e in events):
        return problems  # the daemon died before the work directory was durable
    if not os.path.isdir(workdir):
        return [f"{workdir}: the work directory vanished although it was fsync'd"]

    durable: dict[str, tuple[int, int]] = {}  # file -> (size, records)
    for e in events:
        if e["ev"] in ("append", "dsync"):
            durable[e["file"]] = (e["size"], e["records"])
    names = [f"append{i}" for i in range(APPEND_FILES)] + [f"dsync{i}" for i in range(DSYNC_FILES)]
    for idx, name in enumerate(names):
        file_id = idx if name.startswith("append") else 100 + int(name[5:])
        size, records = durable.get(name, (0, 0))
        path = os.path.join(workdir, name)
        if not _exists(path):
            problems.append(f"{name}: missing (it was created and fsync'd)")
            continue
        with open(path, "rb") as f:
            data = f.read()
        if len(data) < size:
            problems.append(f"{name}: {len(data)} bytes, but {size} bytes were fsync'd")
        got, good, why = parse_records(data, file_id)
        if got < records:
            problems.append(f"{name}: only {got} intact records of {records} fsync'd ({why})")
        elif strict_prefix and why is not None:
            hint = ""
            if len(data) % 4096 == 0 and "torn" in why:
                hint = (" - the file ends on a 4 KiB page boundary inside the record: the kernel sent this "
                        "write() as several FUSE WRITE requests and only the first ones committed")
            problems.append(f"{name}: after {got} whole records (>= {records} fsync'd): {why} "
                            f"[file is {len(data)} bytes; every write() must be atomic]{hint}")

    promised_versions: dict[str, int] = {}
    for e in events:
        if e["ev"] == "version":
            promised_versions[e["file"]] = e["version"]
    for i in range(VERSION_FILES):
        name = f"version{i}"
        version = promised_versions.get(name, 0)
        path = os.path.join(workdir, name)
        if not _exists(path):
            if version:
                problems.append(f"{name}: missing, version {version} was renamed in and the dir fsync'd")
            continue
        with open(path, "rb") as f:
            data = f.read()
        file_id = 200 + int(name[len("version"):])
        ok, why = _check_version(data, file_id, version)
        if not ok:
            problems.append(f"{name}: {why}")

    # Metadata: replay the log into the set of names that must / may exist.
    must: dict[str, int] = {}  # name -> crc of content
    maybe: dict[str, int] = {}
    gone: set[str] = set()
    pairs: list[tuple[str, str, int]] = []  # interrupted renames: exactly one must exist
    crc_of: dict[str, int] = {}
    for e in events:
        ev = e["ev"]
        if ev == "created":
            must[e["name"]] = e["crc"]
            crc_of[e["name"]] = e["crc"]
        elif ev == "renaming":
            src, dst = e["from"], e["to"]
            crc = crc_of.get(src)
            must.pop(src, None)
            if crc is not None:
                pairs.append((src, dst, crc))
        elif ev == "renamed":
            src, dst = e["from"], e["to"]
            crc = crc_of.pop(src, None)
            pairs = [p for p in pairs if p[:2] != (src, dst)]
            gone.add(src)
            if crc is not None:
                must[dst] = crc
                crc_of[dst] = crc
        elif ev == "unlinking":
            name = e["name"]
            if name in must:
                maybe[name] = must.pop(name)
        elif ev == "unlinked":
            maybe.pop(e["name"], None)
            gone.add(e["name"])
        elif ev == "linking":
            if e["from"] in crc_of:
                maybe[e["to"]] = crc_of[e["from"]]
        elif ev == "linked":
            if e["to"] in maybe:
                must[e["to"]] = maybe.pop(e["to"])
                crc_of[e["to"]] = must[e["to"]]

    def content_ok(name: str, crc: int) -> bool:
        with open(os.path.join(workdir, name), "rb") as f:
            return zlib.crc32(f.read()) == crc

    for name, crc in must.items():
        if not _exists(os.path.join(workdir, name)):
            problems.append(f"{name}: missing, its creation/rename/link was made durable")
        elif not content_ok(name, crc):
            problems.append(f"{name}: content differs from what was fsync'd")
    for name, crc in maybe.items():
        if _exists(os.path.join(workdir, name)) and not content_ok(name, crc):
            problems.append(f"{name}: exists with content that was never written to it")
    for name in gone - set(must) - set(maybe) - {p[0] for p in pairs} - {p[1] for p in pairs}:
        if _exists(os.path.join(workdir, name)):
            problems.append(f"{name}: still exists although its unlink/rename was made durable")
    for src, dst, crc in pairs:
        present = [n for n in (src, dst) if _exists(os.path.join(workdir, n))]
        if len(present) != 1:
            problems.append(f"interrupted rename {src} -> {dst}: {len(present)} of the two names exist "
                            f"(rename must be atomic: exactly one)")
        elif not content_ok(present[0], crc):
            problems.append(f"interrupted rename {src} -> {dst}: {present[0]} has wrong content")
    return problems


def _check_version(data: bytes, file_id: int, promised: int) -> tuple[bool, str]:
    if len(data) < HEADER.size:
        return False, f"{len(data)} bytes: not a complete version (>= {promised} promised)"
    m, fid, version, length, pcrc, hcrc = HEADER.unpack_from(data, 0)
    if m != VERSION_MAGIC or zlib.crc32(data[:20]) != hcrc or fid != file_id:
        return False, "header is not a valid version header"
    body = data[HEADER.size:]
    if len(body) != length or zlib.crc32(body) != pcrc or body != payload_for(file_id, version, length):
        return False, f"version {version} is torn or corrupted"
    if version < promised:
        return False, f"holds version {version}, but version {promised} was made durable"
    return True, ""


if __name__ == "__main__":
    sys.exit(main())
