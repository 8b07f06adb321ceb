// @ts-check
// The whole surface against a real `agentaddress serve`.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { inspect } from "node:util";
import { AddressGone, AgentAddressError, Client, InvalidSignature, RevisionConflict, Unauthorized, verifyWake } from "agentaddress-client";
import { delay, readBody, startServe, startStub } from "./helpers.mjs";

/** @type {import("./helpers.mjs").Serve} */
let serve;
/** @type {Client} */
let client;

before(async () => {
  serve = await startServe();
  client = new Client({ baseUrl: serve.url });
});
after(async () => serve?.stop());

test("create, deliver, poll, ack", async () => {
  const address = await client.createAddress({ name: "ts test", taskId: "surface", expiresInSeconds: 3600 });
  assert.match(address.id, /^addr_/);
  assert.match(address.email, /@/);
  assert.ok(address.inboxUrl.startsWith(`${serve.url}/api/v1/inbox/${address.id}/`));
  assert.equal(address.eventsUrl, `${serve.url}/api/v1/addresses/${address.id}/events`);
  assert.equal(address.name, "ts test");
  assert.equal(address.taskId, "surface");

  const first = await client.deliver(address.inboxUrl, { type: "ci.finished", source: "ci", data: { ok: true } }, { idempotencyKey: "k1" });
  assert.deepEqual(first, { duplicate: false, event: { id: first.event.id, sequence: 1 } });
  const again = await client.deliver(address.inboxUrl, { type: "ci.finished", source: "ci", data: { ok: true } }, { idempotencyKey: "k1" });
  assert.equal(again.duplicate, true);
  assert.equal(again.event.id, first.event.id);
  await client.deliver(address.inboxUrl, "plain text");

  const page = await address.poll();
  assert.equal(page.events.length, 2);
  assert.equal(page.nextCursor, 2);
  assert.equal(page.hasMore, false);
  assert.equal(page.events[0].type, "ci.finished");
  assert.deepEqual(page.events[0].data, { ok: true });
  assert.equal(page.events[1].type, "http.request");

  const filtered = await address.poll({ types: ["ci.*"] });
  assert.deepEqual(filtered.events.map((e) => e.sequence), [1]);
  assert.equal(filtered.nextCursor, 2);

  const limited = await address.poll({ limit: 1 });
  assert.equal(limited.events.length, 1);
  assert.equal(limited.hasMore, true);

  const acked = await address.ack(page.events[0].id);
  assert.equal(acked.sequence, 1);
  assert.equal(address.cursor, 1);
  const rest = await address.poll();
  assert.deepEqual(rest.events.map((e) => e.sequence), [2]);
  assert.equal((await address.event(page.events[1].id)).sequence, 2);

  const info = await address.info();
  assert.equal(info.usage.last_sequence, 2);
});

test("a long poll is woken by a delivery", async () => {
  const address = await client.createAddress();
  const started = Date.now();
  const waiting = address.poll({ wait: 10 });
  await delay(300);
  await client.deliver(address.inboxUrl, { type: "late" });
  const page = await waiting;
  assert.equal(page.events[0].type, "late");
  assert.ok(Date.now() - started < 5000);
});

test("fractional waits (as waitForAnswer computes from its deadline) are waited on", async () => {
  const address = await client.createAddress();
  const started = Date.now();
  const page = await address.poll({ wait: 0.3333 });
  assert.deepEqual(page.events, []);
  assert.ok(Date.now() - started >= 300, "the server waited the fraction");
  const asked = await address.ask("Fraction?");
  const request = await address.request(asked.id, { wait: 0.2501 });
  assert.equal(request.status, "open");
});

test("events() iterates in order, each once, and stops on abort mid-poll", async () => {
  const address = await client.createAddress();
  for (let i = 0; i < 5; i++) await client.deliver(address.inboxUrl, { type: "n", data: { i } });
  const controller = new AbortController();
  /** @type {number[]} */
  const seen = [];
  const consumer = (async () => {
    for await (const event of address.events({ signal: controller.signal, wait: 25 })) {
      seen.push(/** @type {{i: number}} */ (event.data).i);
      if (seen.length === 7) break;
    }
  })();
  await delay(300);
  await client.deliver(address.inboxUrl, { type: "n", data: { i: 5 } });
  await delay(200);
  // Now it waits in a long poll: abort must end it at once, not after 25 s.
  const aborted = Date.now();
  controller.abort();
  await consumer;
  assert.ok(Date.now() - aborted < 2000, "abort ended the iteration promptly");
  assert.deepEqual(seen, [0, 1, 2, 3, 4, 5]);

  const typed = [];
  for await (const event of address.events({ after: 2, types: ["n"], wait: 0 })) {
    typed.push(event.sequence);
    if (typed.length === 2) break;
  }
  assert.deepEqual(typed, [3, 4]);
});

test("state: get, put, compare-and-set, update, delete", async () => {
  const address = await client.createAddress();
  assert.deepEqual(await address.state.get("progress"), [undefined, 0]);
  const r1 = await address.state.put("progress", { step: 1 }, { ifRevision: 0 });
  assert.deepEqual(await address.state.get("progress"), [{ step: 1 }, r1]);
  await assert.rejects(address.state.put("progress", { step: 9 }, { ifRevision: 0 }), (e) => {
    assert.ok(e instanceof RevisionConflict);
    assert.equal(e.code, "revision_conflict");
    assert.equal(e.status, 409);
    assert.equal(e.currentRevision, r1);
    assert.ok(e.message.length > 0);
    return true;
  });
  // Concurrent updates: every increment lands.
  await Promise.all(
    Array.from({ length: 5 }, () => address.state.update("count", (/** @type {number | undefined} */ v) => (v ?? 0) + 1, { retries: 20 })),
  );
  const [count] = await address.state.get("count");
  assert.equal(count, 5);
  const keys = await address.state.keys();
  assert.deepEqual(keys.map((k) => k.key).sort(), ["count", "progress"]);
  await assert.rejects(address.state.delete("progress", { ifRevision: r1 + 1000 }), RevisionConflict);
  const deleted = await address.state.delete("progress", { ifRevision: r1 });
  assert.ok(deleted > r1);
  assert.deepEqual(await address.state.get("progress"), [undefined, 0]);
  const events = (await address.poll()).events.map((e) => e.type);
  assert.ok(events.includes("state.updated") && events.includes("state.deleted"));
});

test("ask a person: the page's form answers, waitForAnswer returns it", async () => {
  const address = await client.createAddress({ name: "deploy watcher" });
  const request = await address.ask("Deploy to production?", { body: "Build **7** passed.", options: ["Deploy", "Hold"], expiresInSeconds: 600 });
  assert.match(request.id, /^req_/);
  assert.ok(request.url.startsWith(`${serve.url}/r/${request.id}/`));
  const open = await address.waitForAnswer(request.id, { timeout: 0.5 });
  assert.equal(open.status, "open");

  const waiting = address.waitForAnswer(request.id, { timeout: 20 });
  await delay(300);
  const page = await fetch(request.url);
  assert.equal(page.status, 200);
  assert.match(await page.text(), /Deploy to production\?/);
  const form = await fetch(request.url, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({ choice: "Deploy", comment: "go" }).toString(),
    redirect: "manual",
  });
  assert.equal(form.status, 303);
  const answered = await waiting;
  assert.equal(answered.status, "answered");
  assert.equal(answered.answer?.choice, "Deploy");
  assert.equal(answered.answer?.comment, "go");
  const events = await address.poll({ types: ["request.answered"] });
  assert.equal(/** @type {{choice: string}} */ (events.events[0].data).choice, "Deploy");
});

test("a wake hook reaches a local receiver and verifies; a tampered one throws", async () => {
  /** @type {Array<{headers: import("node:http").IncomingHttpHeaders, body: Buffer}>} */
  const wakes = [];
  const receiver = await startStub(async (req, res) => {
    wakes.push({ headers: req.headers, body: await readBody(req) });
    res.writeHead(204).end();
  });
  try {
    const address = await client.createAddress({ taskId: "hooked" });
    const { hook, signingSecret } = await address.addHook(`${receiver.url}/wake`, { types: ["deploy.*"], headers: { authorization: "Bearer receiver-token" } });
    assert.match(hook.id, /^hk_/);
    assert.match(signingSecret, /^whsec_/);
    assert.deepEqual(hook.types, ["deploy.*"]);
    assert.equal(address.hookSecret(hook.id), signingSecret);
    assert.deepEqual((await address.listHooks()).map((h) => h.id), [hook.id]);

    await client.deliver(address.inboxUrl, { type: "other" });
    await client.deliver(address.inboxUrl, { type: "deploy.finished", data: { marker: "zq-data-7" } });
    const deadline = Date.now() + 10000;
    while (wakes.length === 0 && Date.now() < deadline) await delay(50);
    assert.equal(wakes.length, 1, "one wake");
    const { headers, body } = wakes[0];
    assert.equal(headers.authorization, "Bearer receiver-token");
    const wake = await verifyWake(signingSecret, headers, body);
    assert.equal(wake.type, "address.wake");
    assert.equal(wake.address_id, address.id);
    assert.equal(wake.task_id, "hooked");
    assert.deepEqual(wake.events?.map((e) => e.type), ["deploy.finished"]);
    assert.ok(!body.toString().includes("zq-data-7"), "no event data in a wake");

    const tampered = Buffer.from(body.toString().replace("deploy.finished", "deploy.started"));
    await assert.rejects(verifyWake(signingSecret, headers, tampered), InvalidSignature);
    await assert.rejects(verifyWake(`whsec_${Buffer.from("another key").toString("base64")}`, headers, body), InvalidSignature);
    await assert.rejects(verifyWake(signingSecret, headers, body, { now: new Date(Date.now() + 3600_000) }), /timestamp/);
    await assert.rejects(verifyWake(signingSecret, {}, body), InvalidSignature);
    // A Fetch API Headers object works too.
    const h = new Headers();
    for (const name of ["webhook-id", "webhook-timestamp", "webhook-signature"]) h.set(name, String(headers[name]));
    assert.equal((await verifyWake(signingSecret, h, body.toString())).hook_id, hook.id);

    const tested = await address.testHook(hook.id);
    assert.equal(tested.status, 204);
    const paused = await address.setHookStatus(hook.id, "paused");
    assert.equal(paused.status, "paused");
    await address.removeHook(hook.id);
    assert.deepEqual(await address.listHooks(), []);
  } finally {
    await receiver.close();
  }
});

test("hooks made with the address come back with their secrets", async () => {
  const address = await client.createAddress({ hooks: [{ url: "http://127.0.0.1:9/never", types: ["x.*"] }] });
  assert.equal(address.createdHooks.length, 1);
  assert.match(address.hookSecret(address.createdHooks[0].id) ?? "", /^whsec_/);
});

test("timers: add, list, cancel, fire", async () => {
  const address = await client.createAddress({ expiresInSeconds: 3600 });
  const later = await address.addTimer({ inSeconds: 600, type: "timer.later", data: { n: 1 }, idempotencyKey: "t1" });
  assert.match(later.id, /^tmr_/);
  assert.equal(later.status, "pending");
  const again = await address.addTimer({ inSeconds: 600, type: "timer.later", data: { n: 1 }, idempotencyKey: "t1" });
  assert.equal(again.id, later.id);
  const soon = await address.addTimer({ fireAt: new Date(Date.now() + 1500) });
  assert.equal(soon.type, "timer.fired");
  assert.deepEqual((await address.listTimers()).map((t) => t.id), [soon.id, later.id]);
  const cancelled = await address.cancelTimer(later.id);
  assert.equal(cancelled.status, "cancelled");
  const page = await address.poll({ wait: 10, types: ["timer.*"] });
  assert.equal(page.events[0].type, "timer.fired");
  assert.equal(/** @type {{timer_id: string}} */ (page.events[0].data).timer_id, soon.id);
  await assert.rejects(address.cancelTimer(soon.id), (e) => e instanceof AgentAddressError && e.code === "timer_fired" && e.status === 409);
});

test("errors: a wrong token, a gone address, a bad request", async () => {
  const address = await client.createAddress();
  const wrong = client.address(address.id, "aat_wrong");
  await assert.rejects(wrong.poll(), (e) => e instanceof Unauthorized && e.status === 401 && e.code === "unauthorized");
  await assert.rejects(address.state.put("...", 1), (e) => e instanceof AgentAddressError && e.code === "invalid_request" && e.status === 400);
  await address.delete();
  await assert.rejects(address.poll(), (e) => e instanceof AddressGone && e.status === 410);
  // events() ends with the error instead of retrying forever.
  await assert.rejects(
    (async () => {
      for await (const _ of address.events()) {
        /* nothing */
      }
    })(),
    AddressGone,
  );
  const nowhere = new Client({ baseUrl: "http://127.0.0.1:9" });
  await assert.rejects(nowhere.createAddress(), (e) => e instanceof AgentAddressError && e.code === "unreachable" && e.status === 0);
});

test("the read token is never shown", async () => {
  const address = await client.createAddress({ name: "secretive" });
  const token = /** @type {string} */ (await readToken(address));
  assert.match(token, /^aat_/);
  for (const shown of [String(address), JSON.stringify(address), inspect(address, { depth: 10, showHidden: true }), inspect(address.state, { depth: 10, showHidden: true }), inspect(client, { depth: 10, showHidden: true })]) {
    assert.ok(!shown.includes(token), `the token in: ${shown}`);
  }
  const wrong = client.address(address.id, "aat_notthetokenxyz");
  const error = await wrong.poll().catch((e) => e);
  for (const shown of [String(error), error.message, inspect(error, { depth: 10, showHidden: true }), JSON.stringify(error)]) {
    assert.ok(!shown.includes("aat_notthetokenxyz"), `the token in: ${shown}`);
  }
});

/**
 * The token, the only way a user can get it back: saving the credentials.
 * @param {import("agentaddress-client").Address} address
 */
async function readToken(address) {
  const { mkdtemp, readFile } = await import("node:fs/promises");
  const { join } = await import("node:path");
  const home = await mkdtemp(join(serve.dir, "tok-"));
  const path = await address.save("tok", { home });
  return JSON.parse(await readFile(path, "utf8")).read_token;
}
