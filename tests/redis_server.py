"""A real redis-server for the tests: start, SIGKILL and restart on the same port and data folder (no fixtures here)."""

from __future__ import annotations

import os
import random
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

REDIS_PORTS = range(16600, 16700)
"""Loopback ports the durable tests' Redis servers use (this branch's own range)."""

REDIS_DURABLE_OPTIONS = ("--appendonly", "yes", "--appendfsync", "always", "--save", "")
"""redis-server options under which the store's default ``durability="fsync"`` accepts the server."""


def free_port() -> int:
    """Return a port of :data:`REDIS_PORTS` that nothing listens on now (start at random: parallel runs)."""
    ports = list(REDIS_PORTS)
    start = random.randrange(len(ports))
    for port in ports[start:] + ports[:start]:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free loopback port in {REDIS_PORTS.start}-{REDIS_PORTS.stop - 1} for redis-server")


def ping(port: int) -> bool:
    """True when a Redis server answers PING on 127.0.0.1:``port``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def server_pid(port: int) -> int | None:
    """The process id of the Redis server answering on 127.0.0.1:``port`` (``INFO server``), or None."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as conn:
            conn.sendall(b"INFO server\r\n")
            data = b""
            while not re.search(rb"process_id:\d+\r\n", data):
                chunk = conn.recv(65536)
                if not chunk:
                    return None
                data += chunk
    except OSError:
        return None
    found = re.search(rb"process_id:(\d+)\r\n", data)
    return int(found.group(1)) if found else None


class RedisServer:
    """One real redis-server process: start, SIGKILL, and restart on the same port and data folder.

    ``options`` are redis-server command-line options (``"--appendonly", "yes"``, ...). The server
    keeps its files (RDB snapshot, AOF) in ``directory``, so a restart loads what it persisted.
    Several test runs share the machine's port range: a start checks that the server answering on
    its port is its own process (another run may take a port between the free check and the bind);
    the first start then moves to another free port, a restart fails.
    """

    def __init__(self, binary: str, directory: Path, *options: str, port: int | None = None) -> None:
        self.binary = binary
        self.directory = directory
        self.options = options
        self.port = port if port is not None else free_port()
        self._may_move = port is None  # until the first successful start
        self.process: subprocess.Popen[bytes] | None = None
        directory.mkdir(parents=True, exist_ok=True)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        for _ in range(5):
            if self._start_once():
                self._may_move = False
                return self
            if not self._may_move:
                break
            self.port = free_port()
        raise RuntimeError(f"another process answers on port {self.port}; {self.binary} could not take it")

    def _start_once(self) -> bool:
        """Start on ``self.port``; False when another server holds the port (ours is stopped then)."""
        log = self.directory / "redis.log"
        self.process = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.directory),
                "--logfile",
                str(log),
                *self.options,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while not ping(self.port):
            if self.process.poll() is not None or time.monotonic() > deadline:
                text = log.read_text(errors="replace") if log.exists() else ""
                self.stop()
                if "Address already in use" in text:
                    return False
                raise RuntimeError(f"{self.binary} did not start on port {self.port}:\n{text[-2000:]}")
            time.sleep(0.02)
        if server_pid(self.port) != self.process.pid:  # another run's server answered the ping
            self.stop()
            return False
        return True

    def kill(self) -> None:
        """SIGKILL the server (no shutdown save, no AOF flush beyond what it already did) and reap it."""
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)
        self.process = None

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None
