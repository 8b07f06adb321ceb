// @ts-check
// Measures (prints figures, asserts nothing):
//   1. events/s one Node consumer sustains reading a 10,000-event backlog in pages of 100;
//   2. the client-side overhead of one long poll woken by a delivery: the time from the
//      delivery's answer to the poll's answer, with this client and with curl.
// Usage (from .cache/client-typescript-app, after scripts/client-typescript --install-only):
//   AGENTADDRESS_BIN=target/debug/agentaddress node <this file> [EVENTS] [ROUNDS]
import { spawn } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { Client } from "agentaddress-client";

const EVENTS = Number(process.argv[2] ?? 10000);
const ROUNDS = Number(process.argv[3] ?? 20);
const bin = process.env.AGENTADDRESS_BIN;
if (!bin) throw new Error("set AGENTADDRESS_BIN");
const dir = await mkdtemp(join(tmpdir(), "aa-bench-"));
const serve = spawn(bin, ["serve", "--listen", "127.0.0.1:0", "--db", join(dir, "b.db"), "--max-retained-events", String(EVENTS + 1000), "--polls-per-minute", "1000000", "--creations-per-minute", "1000"], { stdio: ["ignore", "pipe", "ignore"] });
const url = await new Promise((resolve) => createInterface({ input: /** @type {import("node:stream").Readable} */ (serve.stdout) }).on("line", (l) => { const m = /listening on (\S+)/.exec(l); if (m) resolve(m[1]); }));
const client = new Client({ baseUrl: /** @type {string} */ (url) });
try {
  const address = await client.createAddress();
  let next = 0;
  const t0 = performance.now();
  await Promise.all(Array.from({ length: 16 }, async () => {
    while (next < EVENTS) {
      const i = next++;
      await client.deliver(address.inboxUrl, { type: "bench.event", data: { i, pad: "x".repeat(100) } });
    }
  }));
  console.log(`backlog: ${EVENTS} deliveries in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  for (let run = 0; run < 3; run++) {
    const t1 = performance.now();
    let read = 0;
    let after = 0;
    for (;;) {
      const page = await address.poll({ after, limit: 100 });
      read += page.events.length;
      after = page.nextCursor;
      if (!page.hasMore) break;
    }
    const s = (performance.now() - t1) / 1000;
    console.log(`read ${read} events in pages of 100: ${s.toFixed(2)} s, ${Math.round(read / s)} events/s`);
  }

  const fresh = await client.createAddress();
  const home = await mkdtemp(join(dir, "h-"));
  const token = JSON.parse(await readFile(await fresh.save("bench", { home }), "utf8")).read_token;
  /** @type {number[]} */ const ts = [];
  /** @type {number[]} */ const curl = [];
  for (let i = 0; i < ROUNDS; i++) {
    const after = (await fresh.poll({ after: 0, limit: 100 })).nextCursor;
    let end = 0;
    const poll = fresh.poll({ after, wait: 10 }).then(() => (end = performance.now()));
    await new Promise((r) => setTimeout(r, 100));
    await client.deliver(fresh.inboxUrl, { type: "wake" });
    const delivered = performance.now();
    await poll;
    ts.push(end - delivered);

    const after2 = after + 1;
    const started = performance.now();
    const c = spawn("curl", ["-s", "-o", "/dev/null", "-w", "%{time_total}", "-H", `Authorization: Bearer ${token}`, `${fresh.eventsUrl}?after=${after2}&wait=10`], { stdio: ["ignore", "pipe", "ignore"] });
    let out = "";
    c.stdout.on("data", (d) => (out += d));
    await new Promise((r) => setTimeout(r, 100));
    await client.deliver(fresh.inboxUrl, { type: "wake" });
    const delivered2 = performance.now();
    await new Promise((r) => c.once("exit", r));
    // When curl exited (an upper bound: it includes curl's teardown and the exit's notice).
    curl.push(performance.now() - delivered2);
    void started;
  }
  const med = (/** @type {number[]} */ a) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];
  console.log(`long poll woken by a delivery, delivery answered -> poll answered, median of ${ROUNDS}: agentaddress-client ${med(ts).toFixed(2)} ms, curl (to its exit) ${med(curl).toFixed(2)} ms`);
} finally {
  serve.kill();
  await rm(dir, { recursive: true, force: true });
}
