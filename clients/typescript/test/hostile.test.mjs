// @ts-check
// Answers a real server should not give, or gives only when things go wrong: a local stub
// server for those it cannot be made to give, and a real serve killed and restarted.
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { AgentAddressError, Client, RateLimited } from "agentaddress-client";
import { delay, startServe, startStub } from "./helpers.mjs";

/** @type {Array<() => Promise<unknown>>} */
const cleanups = [];
after(async () => {
  for (const c of cleanups) await c();
});

/** @param {number} sequence @param {Record<string, unknown>} [extra] */
function event(sequence, extra = {}) {
  return { id: `evt_${sequence}`, sequence, type: "x.y", source: null, ingress_surface: "http", received_at: "2026-12-06T00:00:00.000Z", acknowledged_at: null, data: { n: sequence }, ...extra };
}

/** @param {import("node:http").ServerResponse} res @param {number} status @param {unknown} body @param {Record<string, string>} [headers] */
function json(res, status, body, headers = {}) {
  res.writeHead(status, { "content-type": "application/json", ...headers }).end(JSON.stringify(body));
}

test("503 and 429 with Retry-After are retried; a bounded number of times", async () => {
  let calls = 0;
  const stub = await startStub((req, res) => {
    calls++;
    if (calls === 1) return json(res, 503, { error: { code: "unavailable", message: "busy" } }, { "retry-after": "1" });
    if (calls === 2) return json(res, 429, { error: { code: "rate_limited", message: "slow down", retry_after_seconds: 0 } }, { "retry-after": "0" });
    json(res, 200, { events: [event(1)], next_cursor: 1, has_more: false });
  });
  cleanups.push(stub.close);
  const address = new Client({ baseUrl: stub.url }).address("addr_x", "aat_x");
  const started = Date.now();
  const page = await address.poll();
  assert.equal(calls, 3);
  assert.ok(Date.now() - started >= 900, "Retry-After: 1 was honoured");
  assert.equal(page.events[0].id, "evt_1");

  let refused = 0;
  const always = await startStub((req, res) => {
    refused++;
    json(res, 429, { error: { code: "rate_limited", message: "slow down", retry_after_seconds: 0 } }, { "retry-after": "0" });
  });
  cleanups.push(always.close);
  const limited = new Client({ baseUrl: always.url, maxRetries: 2 }).address("addr_x", "aat_x");
  await assert.rejects(limited.poll(), (e) => e instanceof RateLimited && e.retryAfter === 0 && e.message === "slow down");
  assert.equal(refused, 3);
  // A Retry-After longer than the client's bound is not waited for.
  const long = await startStub((req, res) => json(res, 503, { error: { code: "unavailable", message: "later" } }, { "retry-after": "3600" }));
  cleanups.push(long.close);
  const t0 = Date.now();
  await assert.rejects(new Client({ baseUrl: long.url }).address("addr_x", "aat_x").poll(), (e) => e instanceof AgentAddressError && e.code === "unavailable" && e.retryAfter === 3600);
  assert.ok(Date.now() - t0 < 2000);
});

test("an HTML answer (a proxy's error page) is a clear AgentAddressError", async () => {
  const stub = await startStub((req, res) => {
    if (req.url?.includes("/events")) return res.writeHead(502, { "content-type": "text/html" }).end("<html><body><h1>502 Bad Gateway</h1></body></html>");
    res.writeHead(200, { "content-type": "text/html" }).end("<html>welcome</html>");
  });
  cleanups.push(stub.close);
  const client = new Client({ baseUrl: stub.url, maxRetries: 0 });
  await assert.rejects(client.address("addr_x", "aat_x").poll(), (e) => {
    assert.ok(e instanceof AgentAddressError);
    assert.equal(e.code, "bad_response");
    assert.equal(e.status, 502);
    assert.match(e.message, /not JSON \(text\/html\)/);
    return true;
  });
  await assert.rejects(client.createAddress(), (e) => e instanceof AgentAddressError && e.code === "bad_response" && e.status === 200);
});

test("an answer missing a field the client reads is bad_response, not a crash later", async () => {
  const stub = await startStub((req, res) => json(res, 200, { events: [{ id: "evt_1", type: "x" }], next_cursor: 1, has_more: false }));
  cleanups.push(stub.close);
  await assert.rejects(new Client({ baseUrl: stub.url }).address("addr_x", "aat_x").poll(), (e) => e instanceof AgentAddressError && e.code === "bad_response" && /events\[0\]\.sequence is missing/.test(e.message));
});

test("unknown event types and fields are kept", async () => {
  const stub = await startStub((req, res) =>
    json(res, 200, { events: [event(1, { type: "brand.new.kind", future_field: { nested: [1, 2] }, ingress_surface: "carrier-pigeon" })], next_cursor: 1, has_more: false, page_note: "new" }),
  );
  cleanups.push(stub.close);
  const page = await new Client({ baseUrl: stub.url }).address("addr_x", "aat_x").poll();
  assert.equal(page.events[0].type, "brand.new.kind");
  assert.deepEqual(page.events[0].future_field, { nested: [1, 2] });
  assert.equal(page.events[0].ingress_surface, "carrier-pigeon");
});

test("a connection dropped mid-poll: events() reconnects with its cursor, no loss, no duplicate", async () => {
  let polls = 0;
  /** @type {string[]} */
  const afters = [];
  const stub = await startStub((req, res) => {
    const url = new URL(req.url ?? "/", "http://x");
    const afterN = Number(url.searchParams.get("after") ?? 0);
    afters.push(String(afterN));
    polls++;
    if (polls === 2) {
      // Mid long poll: the connection dies without an answer.
      setTimeout(() => req.socket.destroy(), 200);
      return;
    }
    if (afterN < 3) return json(res, 200, { events: [event(afterN + 1)], next_cursor: afterN + 1, has_more: false });
    json(res, 200, { events: [], next_cursor: afterN, has_more: false });
  });
  cleanups.push(stub.close);
  const address = new Client({ baseUrl: stub.url }).address("addr_x", "aat_x");
  const seen = [];
  for await (const e of address.events({ wait: 5 })) {
    seen.push(e.sequence);
    if (seen.length === 3) break;
  }
  assert.deepEqual(seen, [1, 2, 3]);
  assert.deepEqual(afters, ["0", "1", "1", "2"]);
});

test("serve killed and restarted on the same port and database mid-events(): iteration goes on, no loss, no duplicate", async () => {
  const serve = await startServe();
  cleanups.push(serve.stop);
  const client = new Client({ baseUrl: serve.url });
  const address = await client.createAddress();
  const inbox = address.inboxUrl;
  for (let i = 1; i <= 3; i++) await client.deliver(inbox, { type: "n", data: { i } });
  const controller = new AbortController();
  /** @type {number[]} */
  const seen = [];
  const consumer = (async () => {
    for await (const e of address.events({ wait: 25, signal: controller.signal })) {
      seen.push(/** @type {{i: number}} */ (e.data).i);
      if (seen.length === 8) return;
    }
  })();
  while (seen.length < 3) await delay(20);
  await delay(200); // now in a long poll
  await serve.kill();
  await delay(700);
  await serve.start();
  assert.equal(serve.url, client.baseUrl, "the same port");
  for (let i = 4; i <= 8; i++) await client.deliver(inbox, { type: "n", data: { i } });
  const timeout = setTimeout(() => controller.abort(), 30000);
  await consumer;
  clearTimeout(timeout);
  assert.deepEqual(seen, [1, 2, 3, 4, 5, 6, 7, 8]);
});

test("events() waits out a proxy's 502 page but ends on an unreadable 200", async () => {
  let calls = 0;
  const stub = await startStub((req, res) => {
    calls++;
    if (calls === 1) return res.writeHead(502, { "content-type": "text/html" }).end("<html>bad gateway</html>");
    if (calls === 2) return json(res, 200, { events: [event(1)], next_cursor: 1, has_more: false });
    res.writeHead(200, { "content-type": "text/html" }).end("<html>login page</html>");
  });
  cleanups.push(stub.close);
  const address = new Client({ baseUrl: stub.url, maxRetries: 0 }).address("addr_x", "aat_x");
  /** @type {number[]} */
  const seen = [];
  await assert.rejects(
    (async () => {
      for await (const e of address.events({ wait: 1 })) seen.push(e.sequence);
    })(),
    (e) => e instanceof AgentAddressError && e.code === "bad_response" && e.status === 200,
  );
  assert.deepEqual(seen, [1]);
  assert.equal(calls, 3);
});
