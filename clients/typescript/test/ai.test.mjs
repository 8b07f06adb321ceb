// @ts-check
// agentaddress-client/ai: each tool's execute called directly (no model), against a real serve.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Client } from "agentaddress-client";
import { tools } from "agentaddress-client/ai";
import { delay, startServe } from "./helpers.mjs";

/** @type {import("./helpers.mjs").Serve} */
let serve;
before(async () => {
  serve = await startServe();
});
after(async () => serve?.stop());

const opts = { toolCallId: "call_1", messages: [] };

/** @param {any} t @param {unknown} input */
async function run(t, input) {
  assert.equal(typeof t.execute, "function");
  return t.execute(input, opts);
}

test("the tools wait, acknowledge, get and set state, ask a person and wait for the answer", async () => {
  const client = new Client({ baseUrl: serve.url });
  const address = await client.createAddress({ name: "ai" });
  const home = `${serve.dir}/ai-home`;
  await address.save("ai-task", { home });
  const token = JSON.parse(await (await import("node:fs/promises")).readFile(`${home}/ai-task.json`, "utf8")).read_token;
  const t = tools(address);
  assert.deepEqual(Object.keys(t).sort(), ["acknowledge_event", "ask_person", "get_state", "set_state", "wait_for_answer", "wait_for_events"]);
  /** @type {unknown[]} */
  const everything = [];
  /** @type {(x: any) => any} */
  const record = (x) => (everything.push(x), x);

  const waiting = run(t.wait_for_events, record({ wait_seconds: 10 }));
  await delay(200);
  await client.deliver(address.inboxUrl, { type: "deploy.finished", data: { ok: true } });
  const page = record(await waiting);
  assert.equal(page.events.length, 1);
  assert.equal(page.events[0].type, "deploy.finished");
  const acked = record(await run(t.acknowledge_event, record({ event_id: page.events[0].id })));
  assert.equal(acked.cursor, 1);
  assert.deepEqual(record(await run(t.wait_for_events, { wait_seconds: 0 })).events, []);

  assert.deepEqual(record(await run(t.get_state, { key: "last_deploy" })), { key: "last_deploy", exists: false, value: null, revision: 0 });
  const set = record(await run(t.set_state, record({ key: "last_deploy", value: { ok: true }, if_revision: 0 })));
  assert.ok(set.revision > 0);
  const conflict = record(await run(t.set_state, { key: "last_deploy", value: 1, if_revision: 0 }));
  assert.equal(conflict.error.code, "revision_conflict");
  assert.equal(conflict.error.current_revision, set.revision);
  assert.deepEqual(record(await run(t.get_state, { key: "last_deploy" })), { key: "last_deploy", exists: true, value: { ok: true }, revision: set.revision });

  const asked = record(await run(t.ask_person, record({ title: "Ship it?", options: ["Ship", "Wait"] })));
  assert.match(asked.request_id, /^req_/);
  const open = record(await run(t.wait_for_answer, { request_id: asked.request_id, timeout_seconds: 0.2 }));
  assert.equal(open.status, "open");
  const answering = run(t.wait_for_answer, record({ request_id: asked.request_id, timeout_seconds: 20 }));
  await delay(200);
  const form = await fetch(asked.url, { method: "POST", headers: { "content-type": "application/x-www-form-urlencoded" }, body: "choice=Ship&comment=", redirect: "manual" });
  assert.equal(form.status, 303);
  const answered = record(await answering);
  assert.equal(answered.status, "answered");
  assert.equal(answered.answer.choice, "Ship");

  const bad = record(await run(t.acknowledge_event, { event_id: "evt_doesnotexist" }));
  assert.equal(bad.error.code, "not_found");

  // The read token is in no tool's schema, description, argument or result.
  const schemas = JSON.stringify(Object.values(t).map((x) => ({ d: x.description, s: /** @type {any} */ (x.inputSchema) })));
  assert.ok(!/read_token|token/i.test(schemas), "no token parameter");
  assert.ok(!JSON.stringify(everything).includes(token), "the token in a tool's input or output");
});
