"""Fixtures: a real `agentaddress serve` (the binary `$AGENTADDRESS_BIN`, on a free port with a
temporary database), clients, a temporary credentials directory, and a stub HTTP server for the
hostile answers a real server cannot be made to give."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentaddress_client import Client

INGEST_SECRET = "python-client-ingest-secret-0123456789"


def binary() -> str:
    path = os.environ.get("AGENTADDRESS_BIN")
    if not path:
        pytest.fail("AGENTADDRESS_BIN must name the agentaddress binary (the Rust test sets it)")
    return path


class Server:
    """One `agentaddress serve`; `restart()` starts it again on the same port and database."""

    def __init__(self, db: Path, extra: list[str] | None = None) -> None:
        self.db = db
        self.extra = extra or []
        self.listen = "127.0.0.1:0"
        self.proc: subprocess.Popen[str] | None = None
        self.base = ""
        self.start()

    def start(self) -> None:
        args = [
            binary(),
            "serve",
            "--listen",
            self.listen,
            "--db",
            str(self.db),
            "--allow-private-hooks",
            "--polls-per-minute",
            "100000",
            "--creations-per-minute",
            "100000",
            "--email-ingest-secret",
            INGEST_SECRET,
            *self.extra,
        ]
        deadline = time.monotonic() + 20
        while True:
            self.proc = subprocess.Popen(
                args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
            )
            assert self.proc.stdout is not None
            line = self.proc.stdout.readline()
            m = re.search(r"listening on (http://\S+)", line)
            if m:
                break
            self.proc.wait()
            # A restart on the same port can find it still held for a moment.
            if time.monotonic() > deadline:
                pytest.fail(f"serve did not start: {line!r}")
            time.sleep(0.2)
        self.base = m.group(1)
        self.listen = self.base.removeprefix("http://")
        # Keep reading stdout so the server never blocks on a full pipe.
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = Server(tmp_path_factory.mktemp("serve") / "client.db")
    yield s
    s.stop()


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[Server]:
    s = Server(tmp_path / "own.db")
    yield s
    s.stop()


@pytest.fixture
def client(server: Server) -> Iterator[Client]:
    with Client(server.base, max_retry_wait=5) as c:
        yield c


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh credentials directory as $AGENTADDRESS_HOME; no $AGENTADDRESS_URL."""
    d = tmp_path / "home"
    monkeypatch.setenv("AGENTADDRESS_HOME", str(d))
    monkeypatch.delenv("AGENTADDRESS_URL", raising=False)
    return d


def cli(*args: str, env: dict[str, str] | None = None) -> Any:
    """Runs the CLI; returns its stdout as JSON (or raises with its stderr)."""
    r = subprocess.run(
        [binary(), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=60,
    )
    if r.returncode != 0:
        raise AssertionError(f"agentaddress {' '.join(args)}: exit {r.returncode}: {r.stderr}")
    return json.loads(r.stdout)


@pytest.fixture
def run_cli() -> Callable[..., Any]:
    return cli


# --- a stub server, for answers a real server never gives ---

Handler = Callable[[socket.socket, bytes], None]


class Stub:
    """Accepts connections on a free port; the n-th request is answered by ``handlers[n]``
    (the last one again after the list). Every request is recorded."""

    def __init__(self, handlers: list[Handler]) -> None:
        self.handlers = handlers
        self.requests: list[bytes] = []
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.base = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.closed = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.closed:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, _, rest = data.partition(b"\r\n\r\n")
            m = re.search(rb"content-length:\s*(\d+)", head, re.I)
            length = int(m.group(1)) if m else 0
            while len(rest) < length:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                rest += chunk
            n = len(self.requests)
            self.requests.append(head + b"\r\n\r\n" + rest)
            self.handlers[min(n, len(self.handlers) - 1)](conn, head)

    def close(self) -> None:
        self.closed = True
        self.sock.close()


def answer(
    status: int,
    body: bytes | str | dict[str, Any],
    headers: dict[str, str] | None = None,
    content_type: str = "application/json",
) -> Handler:
    if isinstance(body, dict):
        raw = json.dumps(body).encode()
    elif isinstance(body, str):
        raw = body.encode()
    else:
        raw = body

    def handle(conn: socket.socket, head: bytes) -> None:
        lines = [f"HTTP/1.1 {status} X", f"content-type: {content_type}"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        lines += [f"content-length: {len(raw)}", "connection: close", "", ""]
        conn.sendall("\r\n".join(lines).encode() + raw)

    return handle


def drop(conn: socket.socket, head: bytes) -> None:
    """Closes the connection without an answer (a dropped connection mid-poll)."""
    conn.shutdown(socket.SHUT_RDWR)


@pytest.fixture
def stub() -> Iterator[Callable[[list[Handler]], Stub]]:
    made: list[Stub] = []

    def make(handlers: list[Handler]) -> Stub:
        s = Stub(handlers)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def event_json(sequence: int, **extra: Any) -> dict[str, Any]:
    return {
        "id": f"evt_stub{sequence}",
        "sequence": sequence,
        "type": "stub.event",
        "source": None,
        "ingress_surface": "http",
        "received_at": "2026-12-01T00:00:00.000Z",
        "acknowledged_at": None,
        "data": {"n": sequence},
        **extra,
    }


def page_json(events: list[dict[str, Any]], after: int = 0) -> dict[str, Any]:
    return {
        "events": events,
        "next_cursor": events[-1]["sequence"] if events else after,
        "has_more": False,
    }


@pytest.fixture
def helpers() -> Any:
    """The helpers above, for test modules (which import nothing from each other)."""

    class H:
        answer = staticmethod(answer)
        drop = staticmethod(drop)
        event_json = staticmethod(event_json)
        page_json = staticmethod(page_json)
        ingest_secret = INGEST_SECRET

    return H
