"""The object tier over https (design §5n, URL option `ca_file=`), against a
real MinIO serving TLS with a certificate of a private CA made here with
openssl: a pool PM + SSD + `s3:https://…?ca_file=CA.pem` migrates a file to
s3, reads it back after a remount and fscks clean; without `ca_file` (or
with another CA) mkfs refuses the endpoint at once with one line saying the
certificate is not trusted; a ca_file that is missing, relative or holds no
certificate is refused at mkfs, and at mount when it went away since."""

import contextlib
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from helpers import (assert_clean_error, fsck, mounted_pool, sha256_file, terrace,
                     unique_name, write_pattern_file)
from test_s3_bad_input import assert_runtime_error, failed_mkfs, failed_mount, made_pool
from test_s3_tier import where_tiers


def minio_bin() -> str:
    for b in (os.environ.get("MINIO"), shutil.which("minio"), str(Path.home() / "go/bin/minio")):
        if b and os.access(b, os.X_OK):
            return b
    pytest.fail("no minio binary: run tests/minio/minio.sh start once (it builds one)", pytrace=False)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def openssl(*args, cwd: Path) -> None:
    cp = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0, f"openssl {' '.join(args)}: {cp.stderr}"


def make_ca(d: Path, name: str) -> None:
    """A self-signed CA: d/NAME.pem and d/NAME.key (EC P-256, 2 days)."""
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2",
            "-subj", f"/CN=Terrace test {name}", cwd=d)


def make_server_cert(d: Path, ca: str, certs: Path) -> None:
    """certs/public.crt and certs/private.key for 127.0.0.1, signed by `ca`
    (MinIO reads these two names from --certs-dir)."""
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", str(certs / "private.key"), "-out", "server.csr",
            "-subj", "/CN=127.0.0.1", cwd=d)
    (d / "server.ext").write_text("subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
                                  "keyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
            "-CAcreateserial", "-out", str(certs / "public.crt"), "-days", "2",
            "-extfile", "server.ext", cwd=d)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def launch(d: Path, key: str, secret: str) -> tuple:
    """MinIO over https on a free port with d/certs; (process, port), or
    (None, log) when it exited at start (a port taken meanwhile)."""
    port, cport = free_port(), free_port()
    env = dict(os.environ, MINIO_ROOT_USER=key, MINIO_ROOT_PASSWORD=secret, MINIO_BROWSER="off",
               MINIO_UPDATE="off", MINIO_CI_CD="1")
    log = open(d / "minio.log", "wb")
    proc = subprocess.Popen([minio_bin(), "server", str(d / "data"), "--address", f"127.0.0.1:{port}",
                             "--console-address", f"127.0.0.1:{cport}", "--certs-dir", str(d / "certs"),
                             "--quiet"], env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    log.close()
    ctx = ssl.create_default_context(cafile=str(d / "ca.pem"))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return None, (d / "minio.log").read_text(errors="replace")
        with contextlib.suppress(OSError):
            with urllib.request.urlopen(f"https://127.0.0.1:{port}/minio/health/live", context=ctx,
                                        timeout=2) as r:
                if r.status == 200:
                    return proc, port
        time.sleep(0.1)
    stop(proc)
    pytest.fail(f"minio not live over https after 60 s: {(d / 'minio.log').read_text(errors='replace')}")


@pytest.fixture(scope="module")
def tls_s3():
    """A throwaway MinIO serving https with a server certificate of a CA made
    here; yields {endpoint, bucket, ca, other_ca, dir}. Always stopped."""
    d = Path(tempfile.mkdtemp(prefix="terrace-minio-tls-"))
    saved = dict(os.environ)
    proc = None
    try:
        (d / "certs").mkdir()
        (d / "data").mkdir()
        make_ca(d, "ca")
        make_ca(d, "other-ca")  # trusted by nobody here
        make_server_cert(d, "ca", d / "certs")
        key, secret = f"terrace{os.urandom(6).hex()}", os.urandom(18).hex()
        for _ in range(3):
            proc, port = launch(d, key, secret)
            if proc:
                break
        assert proc, f"minio exited at start 3 times: {port}"
        endpoint = f"https://127.0.0.1:{port}"
        bucket = f"terrace-tls-{os.urandom(4).hex()}"
        cp = subprocess.run(["curl", "-fsS", "--cacert", str(d / "ca.pem"), "-X", "PUT",
                             "--aws-sigv4", "aws:amz:us-east-1:s3", "--user", f"{key}:{secret}",
                             f"{endpoint}/{bucket}"], capture_output=True, text=True, timeout=30)
        assert cp.returncode == 0, f"make bucket: {cp.stderr}"
        os.environ.update(AWS_ACCESS_KEY_ID=key, AWS_SECRET_ACCESS_KEY=secret, AWS_REGION="us-east-1")
        for k in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SHARED_CREDENTIALS_FILE"):
            os.environ.pop(k, None)
        # Requests to a stopped server give up after a few seconds.
        os.environ["TERRACE_S3_TIMEOUT"] = "3"
        yield {"endpoint": endpoint, "bucket": bucket, "ca": d / "ca.pem",
               "other_ca": d / "other-ca.pem", "dir": d}
    finally:
        if proc:
            stop(proc)
        os.environ.clear()
        os.environ.update(saved)
        shutil.rmtree(d, ignore_errors=True)


def tier_url(s3, ca=None) -> str:
    prefix = unique_name("p").replace("_", "-").lower()
    url = f"{s3['endpoint']}/{s3['bucket']}/{prefix}"
    return f"{url}?ca_file={ca}" if ca else url


def bucket_keys(s3, prefix: str) -> list:
    """Keys under `prefix/` in the test bucket, listed over https (curl
    trusts the CA, signs with SigV4)."""
    query = {"list-type": "2", "prefix": prefix + "/"}
    cp = subprocess.run(["curl", "-fsS", "--cacert", str(s3["ca"]), "--aws-sigv4", "aws:amz:us-east-1:s3",
                         "--user", f"{os.environ['AWS_ACCESS_KEY_ID']}:{os.environ['AWS_SECRET_ACCESS_KEY']}",
                         f"{s3['endpoint']}/{s3['bucket']}?{urllib.parse.urlencode(query)}"],
                        capture_output=True, text=True, timeout=30)
    assert cp.returncode == 0, cp.stderr
    ns = {"s3": "http://s3.amazonaws.com/doc/2006-03-01/"}
    return [c.findtext("s3:Key", namespaces=ns) for c in ET.fromstring(cp.stdout).findall("s3:Contents", ns)]


def test_a_pool_over_https_with_ca_file_migrates_remounts_and_fscks_clean(tls_s3):
    url = tier_url(tls_s3, tls_s3["ca"])
    with made_pool(url) as (pool, mnt):
        with mounted_pool(pool, mnt):
            f = mnt / "cold"
            digest = write_pattern_file(f, 3 << 20, 11)
            terrace("migrate", "--to", "s3", mnt, f)
            assert where_tiers(f).get("s3", 0) == f.stat().st_size, where_tiers(f)
        prefix = url.split("?")[0].rsplit("/", 1)[1]
        assert any("/seg-" in k for k in bucket_keys(tls_s3, prefix)), "no part object in the bucket"
        with mounted_pool(pool, mnt, "reverse_read_ratio=0") as m:
            assert sha256_file(f) == digest
            assert where_tiers(f).get("s3", 0) == f.stat().st_size, "read from s3, not elsewhere"
            tier = next(t for t in m.status()["tiers"] if t["kind"] == "s3")
            assert os.environ["AWS_SECRET_ACCESS_KEY"] not in str(tier)
        cp = fsck(pool)
        assert cp.returncode == 0, cp.stdout + cp.stderr
        # The pool keeps the option: the CA going away is one line at mount.
        moved = tls_s3["ca"].with_suffix(".away")
        tls_s3["ca"].rename(moved)
        try:
            cp, took = failed_mount(pool, mnt)
        finally:
            moved.rename(tls_s3["ca"])
        assert_runtime_error(cp, took, str(pool), f"s3 tier {url.split('?')[0]}: ca_file {tls_s3['ca']}: "
                             "cannot read it")


def test_https_without_ca_file_is_refused_at_mkfs_as_an_untrusted_certificate(tls_s3):
    url = tier_url(tls_s3)
    cp, took = failed_mkfs(url, timeout=30)
    msg = assert_runtime_error(cp, took, f"s3 tier {url}: the TLS certificate of {tls_s3['endpoint']} "
                               "is not trusted", "UnknownIssuer", "ca_file=")
    assert took < 20, msg
    # Another CA than the server's is no better.
    url = tier_url(tls_s3, tls_s3["other_ca"])
    cp, took = failed_mkfs(url, timeout=30)
    assert_runtime_error(cp, took, "is not trusted", "UnknownIssuer")


def test_a_bad_ca_file_is_refused_at_mkfs_with_one_line(tls_s3):
    d = tls_s3["dir"]
    missing = d / "missing.pem"
    url = tier_url(tls_s3, missing)
    cp, took = failed_mkfs(url)
    assert_runtime_error(cp, took, f"ca_file {missing}: cannot read it", "No such file")
    # The server's private key: PEM, but no certificate in it.
    key = d / "certs" / "private.key"
    cp, took = failed_mkfs(tier_url(tls_s3, key))
    assert_runtime_error(cp, took, f"ca_file {key}: holds no PEM certificate")
    # A relative path is a usage error of the tier spec (exit 2), like any
    # malformed tier URL.
    cp, _ = failed_mkfs(tier_url(tls_s3) + "?ca_file=ca.pem")
    assert_clean_error(cp, mentions=['ca_file "ca.pem" is not an absolute path'])
    assert cp.returncode == 2, cp.stderr
