// @ts-check
// Kept honest: the client's table of what it reads and sends (agentaddress-client/contract,
// which its decoding and encoding use) checked against the running server's /openapi.json.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { ERROR_READS, OPERATIONS, encodeAsk, encodeCreateAddress, encodeHook, encodeHookStatus, encodePutState, encodeTimer } from "agentaddress-client/contract";
import { startServe } from "./helpers.mjs";

/** @type {import("./helpers.mjs").Serve} */
let serve;
/** @type {any} */
let doc;
before(async () => {
  serve = await startServe();
  doc = await (await fetch(`${serve.url}/openapi.json`)).json();
});
after(async () => serve?.stop());

/** @param {any} s @returns {any} */
function deref(s) {
  while (s && s.$ref) {
    const name = s.$ref.replace("#/components/schemas/", "");
    s = doc.components.schemas[name];
    assert.ok(s, `schema ${name} exists`);
  }
  return s;
}

/** The JSON types a schema allows (`any` when it does not say), with `null` separately. @param {any} s */
function typesOf(s) {
  s = deref(s);
  /** @type {Set<string>} */
  const types = new Set();
  if (s.oneOf || s.anyOf) {
    for (const v of s.oneOf ?? s.anyOf) for (const t of typesOf(v)) types.add(t);
    return types;
  }
  if (s.type === undefined) return new Set(s.properties ? ["object"] : ["any", "null"]);
  for (const t of Array.isArray(s.type) ? s.type : [s.type]) types.add(t);
  return types;
}

/** The non-null object schema of a (possibly nullable) schema. @param {any} s @returns {any} */
function objectOf(s) {
  s = deref(s);
  if (s.oneOf || s.anyOf) {
    const v = (s.oneOf ?? s.anyOf).map(deref).find((/** @type {any} */ x) => x.type !== "null");
    return v ? objectOf(v) : s;
  }
  return s;
}

/**
 * The schema of a field path (`a.b[].c`), and whether its parent requires it.
 * @param {string} schemaName @param {string} path
 */
function fieldOf(schemaName, path) {
  let s = objectOf({ $ref: `#/components/schemas/${schemaName}` });
  let required = false;
  for (const segment of path.split(".")) {
    const array = segment.endsWith("[]");
    const name = array ? segment.slice(0, -2) : segment;
    s = objectOf(s);
    const props = s.properties ?? {};
    assert.ok(name in props, `${schemaName}: ${path}: no field "${name}" (the schema has ${Object.keys(props).join(", ")})`);
    required = (s.required ?? []).includes(name);
    s = props[name];
    if (array) {
      s = objectOf(s);
      assert.ok(s.items, `${schemaName}: ${path}: "${name}" is not an array`);
      s = objectOf(s.items);
    }
  }
  return { schema: s, required };
}

/** Whether the client's declared type handles every type the schema allows. @param {any} spec @param {Set<string>} types */
function readCompatible(spec, types) {
  if (spec.type === "any") return true;
  for (const t of types) {
    if (t === "null") {
      if (!spec.nullable) return false;
    } else if (t === "integer") {
      if (spec.type !== "integer" && spec.type !== "number") return false;
    } else if (t !== spec.type) return false;
  }
  return true;
}

/** Whether what the client sends is allowed by the schema. @param {any} spec @param {Set<string>} types */
function sendCompatible(spec, types) {
  if (types.has("any")) return true;
  if (spec.type === "any") return false;
  if (spec.type === "integer") return types.has("integer") || types.has("number");
  return types.has(spec.type);
}

test("every operation the client calls exists, with its statuses and answer schema", () => {
  for (const [name, op] of Object.entries(OPERATIONS)) {
    const item = doc.paths[op.path];
    assert.ok(item, `${name}: no path ${op.path}`);
    const operation = item[op.method.toLowerCase()];
    assert.ok(operation, `${name}: no ${op.method} ${op.path}`);
    for (const status of op.statuses) assert.ok(operation.responses[String(status)], `${name}: ${op.method} ${op.path} never answers ${status}`);
    if ("response" in op) {
      const ok = op.statuses.map((s) => operation.responses[String(s)]).find((r) => r.content);
      const ref = ok.content["application/json"].schema.$ref;
      assert.equal(ref, `#/components/schemas/${op.response.schema}`, `${name}: the answer's schema`);
    }
    if ("request" in op) {
      const ref = operation.requestBody.content["application/json"].schema.$ref;
      assert.equal(ref, `#/components/schemas/${op.request.schema}`, `${name}: the request body's schema`);
    }
    for (const [param, spec] of Object.entries("query" in op ? op.query : {})) {
      const p = (operation.parameters ?? []).find((/** @type {any} */ x) => x.name === param && x.in === "query");
      assert.ok(p, `${name}: no query parameter ${param}`);
      assert.ok(sendCompatible(spec, typesOf(p.schema)), `${name}: query ${param} is ${[...typesOf(p.schema)]}, the client sends ${spec.type}`);
    }
  }
});

test("every field the client reads exists with a compatible type", () => {
  let checked = 0;
  const all = [...Object.entries(OPERATIONS).flatMap(([name, op]) => ("response" in op ? [[name, op.response]] : [])), ["error", ERROR_READS]];
  for (const [name, response] of /** @type {Array<[string, {schema: string, reads: Record<string, any>}]>} */ (all)) {
    for (const [path, spec] of Object.entries(response.reads)) {
      const { schema, required } = fieldOf(response.schema, path);
      const types = typesOf(schema);
      assert.ok(readCompatible(spec, types), `${name}: ${path} is ${[...types].join("|")} in the schema; the client handles ${spec.type}${spec.nullable ? "|null" : ""}`);
      assert.ok(required || spec.optional, `${name}: ${path} is optional in the schema; the client requires it`);
      checked++;
    }
  }
  assert.ok(checked > 100, `${checked} fields checked`);
});

test("every field the client sends exists, and every required one is sent", () => {
  for (const [name, op] of Object.entries(OPERATIONS)) {
    if (!("request" in op)) continue;
    const schema = objectOf({ $ref: `#/components/schemas/${op.request.schema}` });
    for (const [field, spec] of Object.entries(op.request.sends)) {
      assert.ok(field in schema.properties, `${name}: sends ${field}, which ${op.request.schema} does not have`);
      const types = typesOf(schema.properties[field]);
      assert.ok(sendCompatible(spec, types), `${name}: ${field} is ${[...types]} in the schema; the client sends ${spec.type}`);
    }
    for (const field of schema.required ?? []) assert.ok(field in op.request.sends, `${name}: ${op.request.schema} requires ${field}, which the client never sends`);
  }
});

test("the encoders send exactly the fields of the table", () => {
  /** @type {Array<[keyof typeof OPERATIONS, Record<string, unknown>, Record<string, unknown>]>} */
  const cases = [
    ["createAddress", encodeCreateAddress({ name: "n", taskId: "t", expiresInSeconds: 60, verification: { scheme: "stripe", secret: "s" }, hooks: [{ url: "https://x" }] }), encodeCreateAddress()],
    ["statePut", encodePutState({ a: 1 }, 3), encodePutState(undefined)],
    ["createRequest", encodeAsk("t", { body: "b", options: ["a"], comment: "none", expiresInSeconds: 60 }), encodeAsk("t")],
    ["createHook", encodeHook("https://x", { types: ["*"], format: "slack", headers: { a: "b" }, debounceSeconds: 1 }), encodeHook("https://x")],
    ["setHookStatus", encodeHookStatus("paused"), encodeHookStatus("active")],
    ["createTimer", encodeTimer({ inSeconds: 1, fireAt: new Date(), type: "timer.x", data: {} }), encodeTimer({ inSeconds: 1 })],
  ];
  for (const [name, full, minimal] of cases) {
    const op = OPERATIONS[name];
    assert.ok("request" in op);
    assert.deepEqual(Object.keys(full).sort(), Object.keys(op.request.sends).sort(), `${name}: every field of the table is sent`);
    const schema = objectOf({ $ref: `#/components/schemas/${op.request.schema}` });
    for (const field of schema.required ?? []) assert.ok(field in minimal, `${name}: the minimal body lacks ${field}`);
  }
  const hooks = encodeCreateAddress({ hooks: [{ url: "https://x", types: ["a"], format: "standard", headers: {}, debounceSeconds: 0 }] }).hooks;
  const hookSchema = objectOf({ $ref: "#/components/schemas/HookRequest" });
  for (const field of Object.keys(/** @type {any[]} */ (hooks)[0])) assert.ok(field in hookSchema.properties, `hooks[]: ${field}`);
});
