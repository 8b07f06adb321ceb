"""The CLI's credentials files (docs/CLI.md, "Credentials files"), shared with it.

``$AGENTADDRESS_HOME``, else ``~/.agentaddress`` (directory 0700), one ``<TASK>.json`` per task
(0600), written atomically (a temporary file created exclusively with 0600, synced, then renamed
over the task's file or hard-linked to it). A file its group or others have any permission on
(mode bits 0077) is refused (``credentials_insecure``), as the CLI refuses it. Fields this
version does not know are kept when a file is written again: the format grows by adding fields.
"""

from __future__ import annotations

import json
import os
import re
import stat
import time
from pathlib import Path
from typing import Any

from ._errors import AgentAddressError

FORMAT_VERSION = 1
# The fields of format 1 (docs/CLI.md); any other field of a file is kept as it is.
KNOWN = frozenset(
    {
        "version",
        "task",
        "base_url",
        "address_id",
        "read_token",
        "inbox_url",
        "email",
        "name",
        "created_at",
        "expires_at",
        "cursor",
        "hook_secrets",
    }
)
_TASK = re.compile(r"[A-Za-z0-9._-]{1,128}")


def validate_task(task: str) -> None:
    if not _TASK.fullmatch(task) or task.startswith("."):
        raise AgentAddressError(
            "the task name must be 1 to 128 of the characters A-Z a-z 0-9 . _ - and must not "
            "start with '.' (it names a file in the credentials directory)",
            code="invalid_task",
        )


def directory() -> Path:
    home = os.environ.get("AGENTADDRESS_HOME")
    if home:
        return Path(home)
    user = os.environ.get("HOME")
    if not user:
        raise AgentAddressError(
            "neither AGENTADDRESS_HOME nor HOME is set: cannot find the credentials directory",
            code="credentials_error",
        )
    return Path(user) / ".agentaddress"


def path_of(task: str) -> Path:
    validate_task(task)
    return directory() / f"{task}.json"


def _io(what: str, path: Path, e: OSError) -> AgentAddressError:
    return AgentAddressError(
        f"cannot {what} {path}: {e.strerror or type(e).__name__}", code="credentials_error"
    )


def load(task: str) -> dict[str, Any]:
    """The saved JSON of ``task`` (``unknown_task`` when there is none)."""
    path = path_of(task)
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise AgentAddressError(
            f"no saved address for task '{task}' in {path.parent} "
            f"(create one first, e.g. `agentaddress create {task}`)",
            code="unknown_task",
        ) from None
    except OSError as e:
        raise _io("read", path, e) from None
    with os.fdopen(fd, "rb") as f:
        mode = os.fstat(f.fileno()).st_mode
        if stat.S_IMODE(mode) & 0o077:
            raise AgentAddressError(
                f"the credentials file {path} has mode {stat.S_IMODE(mode):04o}: others may "
                "read its token, so it is not used. If nobody else could have read it, run "
                f"`chmod 600 {path}`; otherwise treat the token as leaked",
                code="credentials_insecure",
            )
        raw = f.read()
    try:
        data = json.loads(raw)
    except ValueError as e:
        # The parser's position only: never the content, which holds the token.
        pos = getattr(e, "pos", None)
        raise AgentAddressError(
            f"the credentials file {path} is not valid JSON (at byte {pos})",
            code="credentials_error",
        ) from None
    required = ("version", "task", "base_url", "address_id", "read_token", "inbox_url", "email")
    if not isinstance(data, dict) or any(k not in data for k in required):
        raise AgentAddressError(
            f"the credentials file {path} is not valid: missing or mistyped field",
            code="credentials_error",
        )
    return data


def save(task: str, data: dict[str, Any], *, replace: bool) -> Path:
    """Writes ``data`` as the file of ``task``, atomically, 0600; without ``replace`` a task
    that has a file already is refused (``task_exists``), atomically too."""
    path = path_of(task)
    folder = path.parent
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        if stat.S_IMODE(folder.stat().st_mode) != 0o700:
            folder.chmod(0o700)
    except OSError as e:
        raise _io("create the directory", folder, e) from None
    text = (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode()
    tmp: Path | None = None
    for attempt in range(100):
        candidate = folder / f".{task}.json.{os.getpid()}.{time.time_ns()}.{attempt}.tmp"
        try:
            fd = os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            continue
        except OSError as e:
            raise _io("create", candidate, e) from None
        tmp = candidate
        break
    if tmp is None:
        raise AgentAddressError(f"no free temporary name in {folder}", code="credentials_error")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if replace:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise AgentAddressError(
                    f"task '{task}' already has a saved address in {folder} "
                    "(save with overwrite=True to replace it)",
                    code="task_exists",
                ) from None
    except OSError as e:
        raise _io("write", path, e) from None
    finally:
        try:
            tmp.unlink()
        except FileNotFoundError:
            pass
    try:
        dfd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass
    return path
