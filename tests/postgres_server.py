"""A real, throwaway PostgreSQL server for the tests: initdb, start, SIGKILL and restart (no fixtures here).

PostgreSQL refuses to run as root, so the cluster belongs to Debian's ``postgres`` user: its data
folder and Unix socket live in a fresh temporary folder that user owns, and it listens on 127.0.0.1 on
a free port (several test runs share this machine). ``trust`` authentication on loopback only; the
server keeps PostgreSQL's defaults for durability (``fsync``, ``synchronous_commit``).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

OWNER = "postgres"
"""The system user Debian's ``postgresql`` package creates; the server runs as this user."""


def postgres_bin_dir() -> Path | None:
    """The newest ``/usr/lib/postgresql/<version>/bin`` with ``initdb`` and ``pg_ctl``, or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    return Path(found[-1]).parent if found else None


def missing_postgres_advice() -> str | None:
    """Why no throwaway server can start here (and how to fix it), or None when one can."""
    if postgres_bin_dir() is None:
        return (
            "PostgreSQL is not installed, and the Postgres tests need a real server. Install it with "
            "`bash scripts/services/postgres.sh` (or `apt-get install -y postgresql`) and run the tests again."
        )
    try:
        pwd.getpwnam(OWNER)
    except KeyError:
        return f"The system user {OWNER!r} is missing; reinstall Debian's postgresql package."
    return None


def free_port() -> int:
    """A loopback port nothing listens on now (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


_TRANSIENT_START = ("shared memory block", "Address already in use", "lock file")
"""Words in server.log of a start refused only because the killed cluster's resources are not yet free."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:  # a zombie (not yet reaped by its parent) counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return False


def _as_owner(*command: str) -> list[str]:
    return [*(("runuser", "-u", OWNER, "--") if os.geteuid() == 0 else ()), *command]


class PostgresServer:
    """One throwaway PostgreSQL cluster: ``start()``, ``kill()`` (SIGKILL), ``start()`` again, ``stop()``.

    The cluster is created on the first start in a temporary folder owned by ``postgres``; a restart
    reuses the folder and the port, so the server recovers from its own write-ahead log.
    """

    def __init__(self, *, max_connections: int = 300) -> None:
        bin_dir = postgres_bin_dir()
        if bin_dir is None:
            raise RuntimeError(missing_postgres_advice() or "PostgreSQL is not installed")
        self.bin_dir = bin_dir
        self.root = Path(tempfile.mkdtemp(prefix="aff-pg-"))
        owner = pwd.getpwnam(OWNER)
        if os.geteuid() == 0:
            os.chown(self.root, owner.pw_uid, owner.pw_gid)
        self.data = self.root / "data"
        self.port = free_port()
        self.max_connections = max_connections
        self._initialised = False

    @property
    def url(self) -> str:
        """The server's connection string (database ``postgres``, user ``postgres``, no password)."""
        return f"postgresql://{OWNER}@127.0.0.1:{self.port}/postgres"

    def _run(self, *command: str) -> None:
        done = subprocess.run(_as_owner(*command), capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")

    def start(self) -> PostgresServer:
        """Create the cluster (first time), start it, and wait until it accepts connections."""
        if not self._initialised:
            self._run(
                str(self.bin_dir / "initdb"), "-D", str(self.data), "-U", OWNER, "--auth=trust", "-E", "UTF8",
                "--no-sync",
            )  # fmt: skip
            self._initialised = True
        options = (
            f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.root} -c max_connections={self.max_connections} "
            "-c shared_buffers=32MB -c log_min_messages=fatal"
        )
        command = (
            str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-l", str(self.root / "server.log"),
            "-o", options, "-w", "-t", "60", "start",
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while True:
            try:
                self._run(*command)
                return self
            except RuntimeError as error:
                log = self._log_tail()
                # Right after a SIGKILL the kernel may still hold the old cluster's port or shared memory
                # for a moment; anything else (or still so after a minute) is a real failure.
                if not any(sign in log for sign in _TRANSIENT_START) or time.monotonic() > deadline:
                    raise RuntimeError(f"{error}\nserver.log (last lines):\n{log}") from None
                time.sleep(0.5)

    def _log_tail(self) -> str:
        try:
            return "\n".join((self.root / "server.log").read_text(errors="replace").splitlines()[-20:])
        except OSError:
            return ""

    def postmaster_pid(self) -> int | None:
        """The running server's main process id (from ``postmaster.pid``), or None when it is not running."""
        try:
            pid = int((self.data / "postmaster.pid").read_text().splitlines()[0])
            os.kill(pid, 0)
        except (OSError, ValueError, IndexError):
            return None
        return pid

    def kill(self) -> None:
        """SIGKILL the server's main process and its backends (no shutdown checkpoint), and reap them.

        The main process is stopped (SIGSTOP) before its children are listed, so no backend it forks in
        the meantime survives to hold the cluster's shared memory and make the restart refuse.
        """
        pid = self.postmaster_pid()
        assert pid is not None, "the PostgreSQL server is not running"
        os.kill(pid, signal.SIGSTOP)
        listed = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True, check=False).stdout
        children = [int(child) for child in listed.split()]
        for victim in (*children, pid):
            with contextlib.suppress(OSError):
                os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while any(_alive(victim) for victim in (pid, *children)):
            if time.monotonic() > deadline:
                raise RuntimeError("the killed PostgreSQL processes did not exit")
            time.sleep(0.02)
        # The dead postmaster may linger as a zombie until init reaps it; its lock file would then make
        # the restart refuse ("another server might be running"). Every process of the cluster is dead.
        for lock in (self.data / "postmaster.pid", self.root / f".s.PGSQL.{self.port}.lock"):
            lock.unlink(missing_ok=True)

    def stop(self) -> None:
        """Stop the server (fast shutdown) if it runs, and delete its folder."""
        if self.postmaster_pid() is not None:
            subprocess.run(
                _as_owner(str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop"),
                capture_output=True,
                check=False,
            )
        shutil.rmtree(self.root, ignore_errors=True)


def setup_schema(url: str, schema: str) -> str:
    """Create ``schema`` with every table of the package on ``url`` (``migrate_postgres``); return ``schema``.

    Runs in a thread of its own, so it works from synchronous code and inside a running event loop alike.
    """
    import asyncio
    import threading

    from agent_framework_functional import migrate_postgres

    failures: list[BaseException] = []

    def migrate() -> None:
        try:
            asyncio.run(migrate_postgres(url, schema=schema))
        except BaseException as exc:  # re-raised in the caller's thread
            failures.append(exc)

    thread = threading.Thread(target=migrate)
    thread.start()
    thread.join()
    if failures:
        raise failures[0]
    return schema


def new_schema(url: str, prefix: str = "t") -> str:
    """A fresh schema on ``url`` with every table of the package created (:func:`setup_schema`)."""
    import uuid

    return setup_schema(url, f"{prefix}_{uuid.uuid4().hex}")
