"""Runs every ```python example of README.md, in order, each as its own process (a "run"),
against a real `agentaddress serve` this script starts (`$AGENTADDRESS_BIN`), with
`AGENTADDRESS_URL` and a fresh `AGENTADDRESS_HOME` set, using the installed package.

A comment before a block changes how it runs:
  <!-- smoke: background "TEXT" -->  started in the background; once the later blocks have run,
                                     its output must show TEXT (then it is stopped);
  <!-- smoke: answer "TEXT" -->      run while this script answers, on the person's page (a
                                     form POST, as a browser sends it), each URL it prints
                                     after "ask the person:"; its output must show TEXT.
Usage: python smoke.py [README.md]
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

BLOCK = re.compile(r"(?:<!-- smoke: (\w+) \"(.*?)\" -->\n)?```python\n(.*?)```", re.S)


def start_serve(binary: str, db: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [binary, "serve", "--listen", "127.0.0.1:0", "--db", str(db), "--allow-private-hooks"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    m = re.search(r"listening on (http://\S+)", line)
    if not m:
        proc.kill()
        sys.exit(f"smoke: serve did not start: {line!r}")
    return proc, m.group(1)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> int:
    readme = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "README.md")
    binary = os.environ.get("AGENTADDRESS_BIN")
    if not binary:
        sys.exit("smoke: set AGENTADDRESS_BIN to the agentaddress binary")
    blocks = BLOCK.findall(readme.read_text())
    if len(blocks) < 8:
        sys.exit(f"smoke: only {len(blocks)} python blocks in {readme}")
    with tempfile.TemporaryDirectory() as tmp:
        serve, base = start_serve(binary, Path(tmp) / "smoke.db")
        env = {
            **os.environ,
            "AGENTADDRESS_URL": base,
            "AGENTADDRESS_HOME": str(Path(tmp) / "home"),
            "PORT": str(free_port()),
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        env.pop("OPENAI_API_KEY", None)
        background: list[tuple[subprocess.Popen[str], str, list[str]]] = []
        try:
            for n, (mode, expect, code) in enumerate(blocks, 1):
                script = Path(tmp) / f"block{n}.py"
                script.write_text(code)
                print(f"smoke: block {n} ({mode or 'run'})", flush=True)
                if mode == "background":
                    p = subprocess.Popen(
                        [sys.executable, str(script)],
                        env=env,
                        cwd=tmp,
                        stdout=subprocess.PIPE,
                        text=True,
                    )
                    lines: list[str] = []
                    threading.Thread(target=_collect, args=(p, lines), daemon=True).start()
                    background.append((p, expect, lines))
                    time.sleep(1.0)  # let it listen
                    if p.poll() is not None:
                        sys.exit(f"smoke: background block {n} exited: {''.join(lines)}")
                elif mode == "answer":
                    out = _run_answering(script, env, tmp)
                    if expect not in out:
                        sys.exit(f"smoke: block {n} did not print {expect!r}:\n{out}")
                else:
                    r = subprocess.run(
                        [sys.executable, str(script)],
                        env=env,
                        cwd=tmp,
                        capture_output=True,
                        text=True,
                        timeout=120,
                    )
                    sys.stdout.write(r.stdout)
                    if r.returncode != 0:
                        sys.exit(f"smoke: block {n} failed:\n{code}\n{r.stderr}")
            for _p, expect, lines in background:
                deadline = time.monotonic() + 20
                while expect not in "".join(lines) and time.monotonic() < deadline:
                    time.sleep(0.1)
                if expect not in "".join(lines):
                    sys.exit(f"smoke: a background block never printed {expect!r}: {lines}")
                print(f"smoke: background block printed {expect!r}", flush=True)
        finally:
            for p, _, _ in background:
                p.kill()
                p.wait()
            serve.kill()
            serve.wait()
    print(f"smoke: all {len(blocks)} examples of {readme.name} ran", flush=True)
    return 0


def _collect(p: subprocess.Popen[str], lines: list[str]) -> None:
    assert p.stdout is not None
    for line in p.stdout:
        lines.append(line)


def _run_answering(script: Path, env: dict[str, str], cwd: str) -> str:
    p = subprocess.Popen(
        [sys.executable, str(script)], env=env, cwd=cwd, stdout=subprocess.PIPE, text=True
    )
    assert p.stdout is not None
    out: list[str] = []
    for line in p.stdout:
        out.append(line)
        m = re.search(r"ask the person: (\S+)", line)
        if m:
            # The person: the page's form, form-encoded, as a browser posts it.
            page = httpx.get(m.group(1))
            page.raise_for_status()
            answer = httpx.post(m.group(1), data={"choice": "Deploy", "comment": "go"})
            if answer.status_code not in (200, 303):
                sys.exit(f"smoke: answering the page: HTTP {answer.status_code}")
    code = p.wait(timeout=120)
    if code != 0:
        sys.exit(f"smoke: the answered block failed ({code}):\n{''.join(out)}")
    return "".join(out)


if __name__ == "__main__":
    sys.exit(main())
