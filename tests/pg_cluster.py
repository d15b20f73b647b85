"""A throwaway PostgreSQL cluster for the tests and benches: initdb in a temp dir, started on a
free loopback port, stopped and removed at the end. Never a server it did not start.

PostgreSQL refuses to run as root, and on these machines /etc/passwd is not readable by other
users, so the server runs as the `postgres` user under libnss_wrapper with passwd and group
files written here (how PostgreSQL's own container images run as arbitrary users).
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

NSS_WRAPPER = Path("/usr/lib/x86_64-linux-gnu/libnss_wrapper.so")


class ClusterUnavailable(Exception):
    """This machine cannot start a throwaway cluster; the message says what is missing."""


def _bindir() -> Path:
    try:
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        raise ClusterUnavailable(f"pg_config not found: {exc}") from exc
    bindir = Path(out.stdout.strip())
    if not (bindir / "initdb").exists():
        raise ClusterUnavailable(f"{bindir}/initdb missing (the PostgreSQL server package)")
    return bindir


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Cluster:
    def __init__(self, *settings: str) -> None:
        """`settings`: the server's own, each `name=value` (given as `-c` at every start)."""
        self.settings = settings
        self.bindir = _bindir()
        self.root = Path(tempfile.mkdtemp(prefix="loopdeck-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self.password = "loopdeck-secret-pw"
        self.user = "loopdeck"
        self._uid: int | None = None
        self._env = dict(os.environ)

    @property
    def url(self) -> str:
        """With the password in it: for tests of credentials; others use `env`."""
        return f"postgresql://{self.user}:{self.password}@127.0.0.1:{self.port}/loopdeck"

    @property
    def bare_url(self) -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/loopdeck"

    def _as_server(self, *argv: str) -> subprocess.CompletedProcess[str]:
        kwargs: dict[str, object] = {}
        if self._uid is not None:
            kwargs["user"] = self._uid
        return subprocess.run(
            list(argv), env=self._env, capture_output=True, text=True, check=False, **kwargs
        )  # type: ignore[call-overload]

    def start(self) -> Cluster:
        if os.geteuid() == 0:
            self._run_as_postgres()
        pwfile = self.root / "pw"
        pwfile.write_text(self.password + "\n")
        if self._uid is not None:
            os.chown(pwfile, self._uid, -1)
        done = self._as_server(
            str(self.bindir / "initdb"), "-D", str(self.data), "-U", self.user,
            "--pwfile", str(pwfile), "-A", "scram-sha-256", "-E", "UTF8", "--no-sync",
        )  # fmt: skip
        if done.returncode != 0:
            raise ClusterUnavailable(f"initdb failed: {done.stderr.strip() or done.stdout}")
        self._start_on_a_free_port()
        done = self._as_server(
            str(self.bindir / "createdb"), "-h", "127.0.0.1", "-p", str(self.port),
            "-U", self.user, "loopdeck",
        )  # fmt: skip
        if done.returncode != 0:
            raise ClusterUnavailable(f"createdb failed: {done.stderr.strip()}")
        return self

    def _start_on_a_free_port(self, tries: int = 3) -> None:
        """The port was free when picked, but another process (another pytest-xdist worker's
        cluster, a test's listener) can take it before the server binds it: another then."""
        for _ in range(tries - 1):
            try:
                self.start_server()
                return
            except ClusterUnavailable as exc:
                if "already in use" not in str(exc):
                    raise
            self.port = _free_port()
        self.start_server()

    def start_server(self) -> None:
        """Start the server on its data and port (again, after `stop_server`)."""
        options = f"-p {self.port} -k {self.root} -h 127.0.0.1 -c fsync=off -c max_connections=200"
        options += "".join(f" -c {setting}" for setting in self.settings)
        done = self._as_server(
            str(self.bindir / "pg_ctl"), "-D", str(self.data), "-l", str(self.root / "log"),
            "-o", options, "-w", "start",
        )  # fmt: skip
        if done.returncode != 0:
            log = (self.root / "log").read_text() if (self.root / "log").exists() else ""
            raise ClusterUnavailable(f"pg_ctl start failed: {done.stderr.strip()} {log[-2000:]}")

    def stop_server(self) -> None:
        """A fast shutdown, its data kept: every connection is ended, open transactions are
        rolled back (what `pg_ctl stop -m fast` does to a production server)."""
        done = self._as_server(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "fast",
                               "-w", "stop")  # fmt: skip
        if done.returncode != 0:
            raise ClusterUnavailable(f"pg_ctl stop failed: {done.stderr.strip()}")

    def restart(self) -> None:
        """`pg_ctl restart -m fast`: down and straight back up, same port and data."""
        done = self._as_server(
            str(self.bindir / "pg_ctl"), "-D", str(self.data), "-l", str(self.root / "log"),
            "-m", "fast", "-w", "restart",
        )  # fmt: skip
        if done.returncode != 0:
            raise ClusterUnavailable(f"pg_ctl restart failed: {done.stderr.strip()}")

    def _run_as_postgres(self) -> None:
        if not NSS_WRAPPER.exists():
            raise ClusterUnavailable(f"{NSS_WRAPPER} missing: apt-get install -y libnss-wrapper")
        try:
            entry = pwd.getpwnam("postgres")
        except KeyError as exc:
            raise ClusterUnavailable("no postgres user on this machine") from exc
        self._uid = entry.pw_uid
        passwd, group = self.root / "passwd", self.root / "group"
        passwd.write_text(
            f"postgres:x:{entry.pw_uid}:{entry.pw_gid}:PostgreSQL:{self.root}:/bin/false\n"
        )
        group.write_text(f"postgres:x:{entry.pw_gid}:\n")
        for path in (self.root, passwd, group):
            os.chown(path, entry.pw_uid, entry.pw_gid)
        self._env |= {
            "LD_PRELOAD": str(NSS_WRAPPER),
            "NSS_WRAPPER_PASSWD": str(passwd),
            "NSS_WRAPPER_GROUP": str(group),
            "PGPASSWORD": self.password,
            "HOME": str(self.root),
        }
        self._env.pop("PGSERVICEFILE", None)

    def stop(self) -> None:
        self._as_server(
            str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop"
        )
        shutil.rmtree(self.root, ignore_errors=True)
