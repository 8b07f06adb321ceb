// @ts-check
// Credentials files shared with the CLI (docs/CLI.md, "Credentials files"), both ways.
import assert from "node:assert/strict";
import { chmod, mkdtemp, readFile, readdir, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { AgentAddressError, Client } from "agentaddress-client";
import { cli, startServe } from "./helpers.mjs";

/** @type {import("./helpers.mjs").Serve} */
let serve;
before(async () => {
  serve = await startServe();
});
after(async () => serve?.stop());

async function home() {
  return mkdtemp(join(serve.dir, "home-"));
}

test("the CLI creates, TypeScript loads, polls and acks, the CLI sees the cursor", async () => {
  const dir = await home();
  const env = { AGENTADDRESS_HOME: dir, AGENTADDRESS_URL: "" };
  const created = await cli(["create", "cli-made", "--name", "from the cli", "--url", serve.url], env);
  assert.equal(created.code, 0, created.stderr);
  const handoff = JSON.parse(created.stdout);

  process.env.AGENTADDRESS_HOME = dir;
  try {
    delete process.env.AGENTADDRESS_URL;
    const client = new Client(); // no URL: the file's base_url is used
    const address = await client.load("cli-made");
    assert.equal(address.id, handoff.address_id);
    assert.equal(address.inboxUrl, handoff.inbox_url);
    assert.equal(address.email, handoff.email);
    assert.equal(address.name, "from the cli");
    assert.equal(address.baseUrl, serve.url);
    await client.deliver(address.inboxUrl, { type: "one" });
    await client.deliver(address.inboxUrl, { type: "two" });
    const page = await address.poll();
    assert.deepEqual(page.events.map((e) => e.type), ["one", "two"]);
    await address.ack(page.events[0].id);
  } finally {
    delete process.env.AGENTADDRESS_HOME;
  }
  const file = JSON.parse(await readFile(join(dir, "cli-made.json"), "utf8"));
  assert.equal(file.cursor, 1);
  assert.equal(file.version, 1);
  assert.equal(((await stat(join(dir, "cli-made.json"))).mode & 0o777), 0o600);
  const polled = await cli(["poll", "cli-made"], env);
  assert.equal(polled.code, 0, polled.stderr);
  assert.deepEqual(JSON.parse(polled.stdout).events.map((/** @type {{type: string}} */ e) => e.type), ["two"]);
});

test("TypeScript creates and saves, the CLI reads, polls, acks; TypeScript sees the CLI's cursor", async () => {
  const dir = await home();
  const client = new Client({ baseUrl: serve.url });
  const address = await client.createAddress({ name: "from ts", taskId: "ts-made" });
  const { hook, signingSecret } = await address.addHook("http://127.0.0.1:9/wake");
  const path = await address.save("ts-made", { home: dir });
  assert.equal(path, join(dir, "ts-made.json"));
  assert.equal((await stat(path)).mode & 0o777, 0o600);
  assert.equal((await stat(dir)).mode & 0o777, 0o700);
  assert.deepEqual((await readdir(dir)).sort(), ["ts-made.json"], "no temporary file left");
  const file = JSON.parse(await readFile(path, "utf8"));
  assert.deepEqual(Object.keys(file).sort(), ["address_id", "base_url", "created_at", "cursor", "email", "expires_at", "hook_secrets", "inbox_url", "name", "read_token", "task", "version"]);
  assert.equal(file.hook_secrets[hook.id], signingSecret);

  const env = { AGENTADDRESS_HOME: dir, AGENTADDRESS_URL: "" };
  const handoff = await cli(["handoff", "ts-made"], env);
  assert.equal(handoff.code, 0, handoff.stderr);
  assert.equal(JSON.parse(handoff.stdout).inbox_url, address.inboxUrl);
  await client.deliver(address.inboxUrl, { type: "a" });
  await client.deliver(address.inboxUrl, { type: "b" });
  const polled = await cli(["poll", "ts-made"], env);
  assert.equal(polled.code, 0, polled.stderr);
  const events = JSON.parse(polled.stdout).events;
  assert.equal(events.length, 2);
  const acked = await cli(["ack", "ts-made", events[0].id], env);
  assert.equal(acked.code, 0, acked.stderr);
  const hooks = await cli(["hook", "list", "ts-made"], env);
  assert.equal(hooks.code, 0, hooks.stderr);

  const again = await client.load("ts-made", { home: dir });
  assert.equal(again.cursor, 1);
  assert.equal(again.hookSecret(hook.id), signingSecret);
  assert.deepEqual((await again.poll()).events.map((e) => e.type), ["b"]);

  // Another address under the same task is refused unless forced; the same one is replaced.
  const other = await client.createAddress();
  await assert.rejects(other.save("ts-made", { home: dir }), (e) => e instanceof AgentAddressError && e.code === "task_exists");
  await again.save("ts-made", { home: dir });
  await other.save("ts-made", { home: dir, force: true });
  assert.equal((await client.load("ts-made", { home: dir })).id, other.id);
  // An address known only by id and token saves with its email fetched.
  const bare = client.address(address.id, file.read_token);
  await bare.save("bare", { home: dir });
  const bareFile = JSON.parse(await readFile(join(dir, "bare.json"), "utf8"));
  assert.equal(bareFile.email, address.email);
  const bareHandoff = await cli(["handoff", "bare"], env);
  assert.equal(bareHandoff.code, 0, bareHandoff.stderr);
});

test("a credentials file others can read is refused; bad names and files too", async () => {
  const dir = await home();
  const client = new Client({ baseUrl: serve.url });
  const address = await client.createAddress();
  const path = await address.save("shared", { home: dir });
  for (const mode of [0o644, 0o640, 0o604, 0o660]) {
    await chmod(path, mode);
    await assert.rejects(client.load("shared", { home: dir }), (e) => {
      assert.ok(e instanceof AgentAddressError);
      assert.equal(e.code, "credentials_insecure");
      assert.match(e.message, /other users/);
      return true;
    });
  }
  await chmod(path, 0o600);
  assert.equal((await client.load("shared", { home: dir })).id, address.id);
  await chmod(path, 0o400);
  assert.equal((await client.load("shared", { home: dir })).id, address.id);

  for (const bad of ["", ".hidden", "../x", "a/b", "x".repeat(129), "é"]) {
    await assert.rejects(client.load(bad, { home: dir }), (e) => e instanceof AgentAddressError && e.code === "invalid_task");
    await assert.rejects(address.save(bad, { home: dir }), (e) => e instanceof AgentAddressError && e.code === "invalid_task");
  }
  await assert.rejects(client.load("missing", { home: dir }), (e) => e instanceof AgentAddressError && e.code === "unknown_task");
  const broken = join(dir, "broken.json");
  await writeFile(broken, '{"read_token": "aat_secretvalue", oops', { mode: 0o600 });
  await assert.rejects(client.load("broken", { home: dir }), (e) => {
    assert.ok(e instanceof AgentAddressError);
    assert.equal(e.code, "credentials_error");
    assert.ok(!e.message.includes("aat_secretvalue"));
    return true;
  });
  // The CLI reads what TypeScript wrote.
  const listed = await cli(["handoff", "shared"], { AGENTADDRESS_HOME: dir });
  assert.equal(listed.code, 0, listed.stderr);
});
