// @ts-check
// Runs the README's examples, as the README shows them, from the installed package (its own
// copy of README.md, in node_modules/agentaddress-client), against a real serve: run 1 creates
// and saves, a delivery, run 2 loads, reads and acks (and a second run 2 sees nothing new), the
// wake receiver verifies a real wake, and the Vercel AI SDK example runs its tools with a mock
// model (`ai/test`) standing for `model`. Prints "smoke: ok" at the end.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtemp, readFile, writeFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { Client } from "agentaddress-client";
import { delay, startServe } from "./helpers.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const readmePath = join(dirname(createRequire(import.meta.url).resolve("agentaddress-client/package.json")), "README.md");
const readme = await readFile(readmePath, "utf8");

/** The code of the README's block `<!-- example: NAME -->`. @param {string} name */
function example(name) {
  const start = readme.indexOf(`<!-- example: ${name} -->`);
  assert.ok(start >= 0, `README.md has no example ${name}`);
  const m = /```js\n([\s\S]*?)```/.exec(readme.slice(start));
  assert.ok(m, `the example ${name} has no js block`);
  return m[1];
}

const serve = await startServe();
const home = await mkdtemp(join(serve.dir, "home-"));
const env = { ...process.env, AGENTADDRESS_URL: serve.url, AGENTADDRESS_HOME: home };

/** @param {string} name @param {string} code */
async function write(name, code) {
  const file = join(here, `example-${name}.mjs`);
  await writeFile(file, code);
  return file;
}

/** @param {string} file @param {Record<string, string>} [extra] @returns {Promise<string>} */
function run(file, extra = {}) {
  return new Promise((resolve, reject) => {
    const p = spawn(process.execPath, [file], { env: { ...env, ...extra }, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    let err = "";
    p.stdout.on("data", (d) => (out += d));
    p.stderr.on("data", (d) => (err += d));
    p.on("exit", (code) => (code === 0 ? resolve(out) : reject(new Error(`${file} exited ${code}: ${out}${err}`))));
  });
}

try {
  // Run 1, a delivery, run 2 twice.
  const out1 = await run(await write("run1", example("run1")));
  const inbox = /^inbox: (\S+)$/m.exec(out1)?.[1] ?? "";
  assert.ok(inbox.startsWith(`${serve.url}/api/v1/inbox/`), out1);
  const client = new Client({ baseUrl: serve.url });
  await client.deliver(inbox, { type: "deploy.finished", data: { ok: true } });
  const run2 = await write("run2", example("run2"));
  assert.equal(await run(run2), 'event 1 deploy.finished {"ok":true}\n');
  assert.equal(await run(run2), "", "the second run 2 starts after the ack");
  console.log("smoke: run1/run2 ok");

  // The wake receiver.
  const address = await client.load("deploy-42", { home });
  const port = await freePort();
  const { signingSecret } = await address.addHook(`http://127.0.0.1:${port}/`, { types: ["deploy.*"] });
  const receiver = spawn(process.execPath, [await write("wake", example("wake"))], { env: { ...env, PORT: String(port), WAKE_SECRET: signingSecret }, stdio: ["ignore", "pipe", "inherit"] });
  try {
    await delay(300);
    const lines = createInterface({ input: /** @type {import("node:stream").Readable} */ (receiver.stdout) });
    const line = new Promise((resolve) => lines.once("line", resolve));
    await client.deliver(inbox, { type: "deploy.started" });
    const got = await Promise.race([line, delay(15000).then(() => "no wake within 15 s")]);
    assert.equal(got, `wake: ${address.id} deploy.started`);
    // A forged wake is refused.
    const forged = await fetch(`http://127.0.0.1:${port}/`, { method: "POST", headers: { "webhook-id": "x", "webhook-timestamp": String(Math.floor(Date.now() / 1000)), "webhook-signature": "v1,AAAA" }, body: "{}" });
    assert.equal(forged.status, 401);
  } finally {
    receiver.kill();
  }
  console.log("smoke: wake receiver ok");

  // The Vercel AI SDK example, with a mock model that calls the tools.
  await client.deliver(inbox, { type: "deploy.finished", data: { build: 8 } });
  const mock = `import { MockLanguageModelV3 } from "ai/test";
const usage = { inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: 1, text: 1, reasoning: 0 } };
let step = 0;
let eventId = "";
const model = new MockLanguageModelV3({
  doGenerate: async (options) => {
    step++;
    const results = options.prompt.flatMap((m) => (m.role === "tool" ? m.content : []));
    const last = results.at(-1)?.output?.value;
    const call = (toolName, input) => ({ content: [{ type: "tool-call", toolCallId: "c" + step, toolName, input: JSON.stringify(input) }], finishReason: { unified: "tool-calls", raw: undefined }, usage, warnings: [] });
    if (step === 1) return call("wait_for_events", { wait_seconds: 5, types: ["deploy.finished"] });
    if (step === 2) { eventId = last.events[0].id; return call("acknowledge_event", { event_id: eventId }); }
    if (step === 3) return call("set_state", { key: "last_deploy", value: { event_id: eventId } });
    return { content: [{ type: "text", text: "recorded " + eventId }], finishReason: { unified: "stop", raw: undefined }, usage, warnings: [] };
  },
});
`;
  const aiOut = await run(await write("ai", example("ai").replace(/^(import[^\n]*\n)+/, (imports) => imports + mock)));
  const events = (await address.poll({ after: 0 })).events.filter((e) => e.type === "deploy.finished");
  const [value] = await address.state.get("last_deploy");
  assert.deepEqual(value, { event_id: events[1].id });
  assert.equal(aiOut, `recorded ${events[1].id}\n`);
  console.log("smoke: ai ok");
  console.log("smoke: ok");
} finally {
  await serve.stop();
}

async function freePort() {
  const { createServer } = await import("node:net");
  return new Promise((resolve) => {
    const s = createServer();
    s.listen(0, "127.0.0.1", () => {
      const { port } = /** @type {import("node:net").AddressInfo} */ (s.address());
      s.close(() => resolve(port));
    });
  });
}
