// @ts-check
// Test helpers: a real `agentaddress serve` (the binary named by AGENTADDRESS_BIN) on a free
// port with a temporary database, and small local HTTP servers.
import { spawn } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";

export const BIN = process.env.AGENTADDRESS_BIN ?? "";
if (!BIN) throw new Error("AGENTADDRESS_BIN must name the agentaddress binary (cargo sets it in cli/tests/typescript_client.rs)");

/** Generous limits so that tests are not rate limited by each other. */
const SERVE_ARGS = ["--polls-per-minute", "100000", "--creations-per-minute", "100000", "--allow-private-hooks", "--sqlite-synchronous", "normal"];

/**
 * @typedef {{ url: string, port: number, dir: string, db: string, stop: () => Promise<void>, restart: () => Promise<void>, kill: () => Promise<void>, start: () => Promise<void> }} Serve
 */

/** @param {string[]} extra */
export async function startServe(extra = []) {
  const dir = await mkdtemp(join(tmpdir(), "aa-ts-"));
  const db = join(dir, "serve.db");
  /** @type {import("node:child_process").ChildProcess | undefined} */
  let child;
  let listen = "127.0.0.1:0";
  /** @type {Serve} */
  const serve = {
    url: "",
    port: 0,
    dir,
    db,
    async start() {
      const proc = spawn(BIN, ["serve", "--listen", listen, "--db", db, ...SERVE_ARGS, ...extra], {
        stdio: ["ignore", "pipe", "pipe"],
        env: { ...process.env, RUST_LOG: "warn" },
      });
      child = proc;
      let stderr = "";
      proc.stderr?.on("data", (d) => {
        stderr = (stderr + d).slice(-4000);
      });
      const lines = createInterface({ input: /** @type {import("node:stream").Readable} */ (proc.stdout) });
      const url = await new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`serve did not start within 20 s: ${stderr}`)), 20000);
        proc.once("exit", (code) => {
          clearTimeout(timer);
          reject(new Error(`serve exited (${code}) before listening: ${stderr}`));
        });
        lines.on("line", (line) => {
          const m = /^agentaddress listening on (http:\/\/\S+)/.exec(line);
          if (m) {
            clearTimeout(timer);
            resolve(m[1]);
          }
        });
      });
      serve.url = url;
      serve.port = Number(new URL(url).port);
      listen = `127.0.0.1:${serve.port}`;
    },
    async kill() {
      const c = child;
      child = undefined;
      if (c && c.exitCode === null) {
        const exited = new Promise((r) => c.once("exit", r));
        c.kill("SIGKILL");
        await exited;
      }
    },
    async restart() {
      await serve.kill();
      await serve.start();
    },
    async stop() {
      await serve.kill();
      await rm(dir, { recursive: true, force: true });
    },
  };
  await serve.start();
  return serve;
}

/**
 * A local HTTP server answering with `handler`; `url` is its base.
 * @param {import("node:http").RequestListener} handler
 */
export async function startStub(handler) {
  const server = createServer(handler);
  await new Promise((r) => server.listen(0, "127.0.0.1", () => r(undefined)));
  const address = /** @type {import("node:net").AddressInfo} */ (server.address());
  return {
    url: `http://127.0.0.1:${address.port}`,
    server,
    close: () =>
      new Promise((r) => {
        server.closeAllConnections();
        server.close(() => r(undefined));
      }),
  };
}

/** @param {import("node:http").IncomingMessage} req */
export async function readBody(req) {
  const chunks = [];
  for await (const c of req) chunks.push(c);
  return Buffer.concat(chunks);
}

/** @param {string} dir */
export async function tempHome(dir) {
  return mkdtemp(join(dir, "home-"));
}

/**
 * Runs the CLI; resolves with its exit code, stdout and stderr.
 * @param {string[]} args
 * @param {Record<string, string>} env
 */
export function cli(args, env) {
  return new Promise((resolve, reject) => {
    const proc = spawn(BIN, args, { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    proc.stdout.on("data", (d) => (stdout += d));
    proc.stderr.on("data", (d) => (stderr += d));
    proc.on("error", reject);
    proc.on("exit", (code) => resolve({ code, stdout, stderr }));
  });
}

/** @param {number} ms */
export const delay = (ms) => new Promise((r) => setTimeout(r, ms));
