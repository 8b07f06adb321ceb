"""Measures the Python client against a real `agentaddress serve` (started here):

1. throughput: the events per second one consumer (``address.events()``, pages of 100) reads
   from a backlog of 10,000 events;
2. the client-side overhead of one long poll woken by a delivery: the time from sending the
   delivery to the waiting poll's return, and the CPU time of the waiting client, for
   ``Address.poll(wait=25)`` (in a thread) and for ``curl`` doing the same request (a process;
   its CPU includes its start-up), median of N rounds.

Usage: AGENTADDRESS_BIN=target/release/agentaddress python clients/python/bench/feed.py
       [--events 10000] [--rounds 20]
Figures only: nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import httpx

from agentaddress_client import Client


def start_serve(binary: str, db: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [
            binary,
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--db",
            str(db),
            "--polls-per-minute",
            "1000000",
            "--max-retained-events",
            "100000",
            "--sqlite-synchronous",
            "normal",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    m = re.search(r"listening on (http://\S+)", proc.stdout.readline())
    if not m:
        proc.kill()
        raise SystemExit("serve did not start")
    return proc, m.group(1)


def fill(base: str, inbox_url: str, count: int, workers: int = 8) -> None:
    def work(k: int) -> None:
        with httpx.Client() as http:
            for n in range(k, count, workers):
                r = http.post(inbox_url, json={"type": "bench.event", "data": {"n": n}})
                r.raise_for_status()

    threads = [threading.Thread(target=work, args=(k,)) for k in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def throughput(client: Client, count: int) -> tuple[float, float]:
    """(events per second, the consumer's CPU microseconds per event)."""
    a = client.create_address(name="bench throughput")
    assert a.inbox_url is not None
    fill(client.base_url, a.inbox_url, count)
    started = time.perf_counter()
    cpu0 = time.process_time()
    seen = 0
    for _event in a.events(after=0, wait=0, limit=100):
        seen += 1
        if seen == count:
            break
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu0
    return count / elapsed, cpu / count * 1e6


def woken_poll_python(client: Client, rounds: int) -> tuple[list[float], list[float]]:
    """(latency from the delivery's send to the poll's return, CPU seconds of each poll call)."""
    a = client.create_address(name="bench long poll")
    assert a.inbox_url is not None
    latencies, cpu = [], []
    cursor = 0
    with httpx.Client() as http:
        for _ in range(rounds):
            done: list[float] = []

            def waiter(after: int, out: list[float]) -> None:
                c0 = time.thread_time()
                page = a.poll(after=after, wait=25)
                out.append(time.perf_counter())
                out.append(time.thread_time() - c0)
                assert len(page.events) == 1

            t = threading.Thread(target=waiter, args=(cursor, done))
            t.start()
            time.sleep(0.3)  # the poll is waiting
            sent = time.perf_counter()
            http.post(a.inbox_url, json={"type": "wake"}).raise_for_status()
            t.join()
            cursor += 1
            latencies.append(done[0] - sent)
            cpu.append(done[1])
    return latencies, cpu


def woken_poll_curl(client: Client, rounds: int) -> tuple[list[float], list[float]]:
    """The same with `curl` as the waiting client (its CPU: user + system of the process)."""
    import resource

    a = client.create_address(name="bench curl")
    assert a.inbox_url is not None
    token = a._AddressCore__token  # type: ignore[attr-defined]
    latencies, cpu = [], []
    cursor = 0
    with httpx.Client() as http:
        for _ in range(rounds):
            url = f"{a.events_url}?after={cursor}&wait=25"
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            proc = subprocess.Popen(
                ["curl", "-sS", "-H", f"Authorization: Bearer {token}", url],
                stdout=subprocess.PIPE,
            )
            done: list[float] = []

            def watch(p: subprocess.Popen[bytes], out: list[float]) -> None:
                p.communicate()
                out.append(time.perf_counter())

            t = threading.Thread(target=watch, args=(proc, done))
            t.start()
            time.sleep(0.3)
            sent = time.perf_counter()
            http.post(a.inbox_url, json={"type": "wake"}).raise_for_status()
            t.join()
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cursor += 1
            latencies.append(done[0] - sent)
            cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return latencies, cpu


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    binary = os.environ.get("AGENTADDRESS_BIN", "target/debug/agentaddress")
    with tempfile.TemporaryDirectory() as tmp:
        serve, base = start_serve(binary, Path(tmp) / "bench.db")
        try:
            with Client(base) as client:
                rate, us = throughput(client, args.events)
                print(
                    f"throughput: {rate:,.0f} events/s ({args.events} events, pages of 100); "
                    f"consumer CPU {us:.1f} us/event"
                )
                py, py_cpu = woken_poll_python(client, args.rounds)
                cu, cu_cpu = woken_poll_curl(client, args.rounds)
                for name, xs, cpu in (("python", py, py_cpu), ("curl", cu, cu_cpu)):
                    ms = sorted(x * 1000 for x in xs)
                    print(
                        f"woken long poll, {name}: delivery sent -> poll returned: "
                        f"median {statistics.median(ms):.2f} ms, "
                        f"p90 {ms[int(len(ms) * 0.9) - 1]:.2f} ms; "
                        f"CPU per poll median {statistics.median(cpu) * 1000:.2f} ms "
                        f"({len(ms)} rounds)"
                    )
                print(
                    "client-side latency overhead, python minus curl (medians): "
                    f"{(statistics.median(py) - statistics.median(cu)) * 1000:+.2f} ms"
                )
        finally:
            serve.kill()
            serve.wait()


if __name__ == "__main__":
    main()
