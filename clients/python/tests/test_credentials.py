"""Credentials files shared with the CLI (docs/CLI.md, "Credentials files"), both ways."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentaddress_client import AgentAddressError, Client


def test_cli_creates_python_loads_polls_and_acks(
    server: Any, home: Path, run_cli: Callable[..., Any]
) -> None:
    made = run_cli("create", "from-cli", "--name", "cli made", "--url", server.base)
    assert Path(made["credentials_file"]) == home / "from-cli.json"
    # No base_url and no AGENTADDRESS_URL: the URL the task was created on.
    with Client() as c:
        a = c.load("from-cli")
        assert a.id == made["address_id"] and a.email == made["email"]
        assert a.inbox_url == made["inbox_url"] and a.name == "cli made" and a.task == "from-cli"
        assert a.base_url == server.base
        for n in range(3):
            c.deliver(a.inbox_url, {"type": "n", "data": n})
        page = a.poll()
        assert [e.data for e in page.events] == [0, 1, 2]
        a.ack(page.events[1].id)  # moves the task's saved cursor, as `agentaddress ack` does
    saved = json.loads((home / "from-cli.json").read_text())
    assert saved["cursor"] == 2 and saved["version"] == 1
    assert stat.S_IMODE((home / "from-cli.json").stat().st_mode) == 0o600
    after = run_cli("poll", "from-cli")
    assert [e["data"] for e in after["events"]] == [2]


def test_python_saves_cli_reads_and_acks(
    client: Client, home: Path, run_cli: Callable[..., Any]
) -> None:
    a = client.create_address(name="py made")
    hook, secret = a.add_hook("http://127.0.0.1:9/h")
    path = a.save("from-python")
    assert path == home / "from-python.json"
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    saved = json.loads(path.read_text())
    assert saved["version"] == 1 and saved["task"] == "from-python"
    assert saved["hook_secrets"] == {hook.id: secret}
    assert not [p for p in home.iterdir() if p.name.startswith(".")]  # no temporary left

    assert run_cli("handoff", "from-python")["address_id"] == a.id
    a.deliver({"type": "one"})
    a.deliver({"type": "two"})
    page = run_cli("poll", "from-python")
    assert [e["type"] for e in page["events"]] == ["one", "two"]
    run_cli("ack", "from-python", page["events"][0]["id"])
    listed = run_cli("hook", "list", "from-python")
    assert hook.id in json.dumps(listed)
    again = Client(client.base_url).load("from-python")
    assert again.cursor == 1 and again.hook_secrets == {hook.id: secret}
    assert [e.type for e in again.poll().events] == ["two"]
    # The CLI rewrote the file: still the same format, and Python still reads it.
    assert json.loads(path.read_text())["hook_secrets"] == {hook.id: secret}


def test_save_refuses_an_existing_task_unless_overwrite(client: Client, home: Path) -> None:
    a = client.create_address()
    b = client.create_address()
    a.save("task")
    with pytest.raises(AgentAddressError) as e:
        b.save("task")
    assert e.value.code == "task_exists"
    assert Client(client.base_url).load("task").id == a.id
    b.save("task", overwrite=True)
    assert Client(client.base_url).load("task").id == b.id


def test_a_file_others_may_read_is_refused_as_the_cli_refuses_it(
    client: Client, home: Path
) -> None:
    a = client.create_address()
    path = a.save("shared")
    for mode in (0o644, 0o640, 0o604, 0o660, 0o602, 0o610):
        os.chmod(path, mode)
        with pytest.raises(AgentAddressError) as e:
            Client(client.base_url).load("shared")
        assert e.value.code == "credentials_insecure" and "chmod 600" in e.value.message
        cli = subprocess.run(
            [os.environ["AGENTADDRESS_BIN"], "poll", "shared"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert cli.returncode != 0 and "credentials_insecure" in cli.stderr, cli.stderr
    os.chmod(path, 0o600)
    assert Client(client.base_url).load("shared").id == a.id


def test_fields_of_a_newer_writer_are_kept(client: Client, home: Path) -> None:
    a = client.create_address()
    path = a.save("newer")
    data = json.loads(path.read_text())
    data["from_the_future"] = {"x": 1}
    path.write_text(json.dumps(data))
    loaded = Client(client.base_url).load("newer")
    event = loaded.deliver({"type": "x"})
    loaded.ack(event.event.id)  # rewrites the file: the unknown field stays
    again = json.loads(path.read_text())
    assert again["from_the_future"] == {"x": 1} and again["cursor"] == 1
    loaded.save("newer-copy")
    assert json.loads((home / "newer-copy.json").read_text())["from_the_future"] == {"x": 1}


def test_bad_tasks_and_files(client: Client, home: Path) -> None:
    a = client.create_address()
    for bad in ["", ".", "..", "../x", "a/b", ".hidden", "a b", "x" * 129]:
        with pytest.raises(AgentAddressError) as e:
            a.save(bad)
        assert e.value.code == "invalid_task"
    with pytest.raises(AgentAddressError) as unknown:
        Client().load("nothing-here")
    assert unknown.value.code == "unknown_task"
    home.mkdir(exist_ok=True)
    corrupt = home / "corrupt.json"
    corrupt.write_text('{"read_token": "aat_secretvalue", ')
    corrupt.chmod(0o600)
    with pytest.raises(AgentAddressError) as c:
        Client().load("corrupt")
    assert c.value.code == "credentials_error" and "aat_secretvalue" not in str(c.value)


def test_env_and_explicit_urls_win_over_the_saved_one(
    client: Client, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = client.create_address()
    a.save("where")
    monkeypatch.setenv("AGENTADDRESS_URL", "http://127.0.0.1:1")
    assert Client().load("where").base_url == "http://127.0.0.1:1"
    assert Client("http://127.0.0.1:2/").load("where").base_url == "http://127.0.0.1:2"
    monkeypatch.delenv("AGENTADDRESS_URL")
    assert Client().load("where").base_url == client.base_url
    assert Client().base_url == "http://127.0.0.1:8080"
