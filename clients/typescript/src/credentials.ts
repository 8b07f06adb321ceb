/**
 * The CLI's credentials files (docs/CLI.md, "Credentials files"): one JSON file per task in
 * `$AGENTADDRESS_HOME`, else `~/.agentaddress`; the directory 0700, the files 0600 from the
 * moment they exist, written atomically (a temporary file in the same directory, synced, then
 * renamed over the task's file, or hard-linked to it when it must not exist yet).
 */
import { constants } from "node:fs";
import { link, mkdir, open, readFile, rename, stat, chmod, unlink } from "node:fs/promises";
import { homedir } from "node:os";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { AgentAddressError } from "./errors.js";

/** The format version this client writes and reads. */
export const FORMAT_VERSION = 1;

/** The file's JSON, as the CLI writes it. */
export interface CredentialsFile {
  version: number;
  task: string;
  base_url: string;
  address_id: string;
  read_token: string;
  inbox_url: string;
  email: string;
  name?: string | null;
  created_at?: string | null;
  expires_at?: string | null;
  cursor?: number;
  hook_secrets?: Record<string, string>;
}

/** The credentials directory: `$AGENTADDRESS_HOME`, else `~/.agentaddress`. */
export function credentialsDirectory(): string {
  const env = process.env.AGENTADDRESS_HOME;
  if (env) return env;
  return join(homedir(), ".agentaddress");
}

/** A task name is a safe file name: 1..128 of `A-Z a-z 0-9 . _ -`, not starting with `.`. */
export function validateTask(task: string): void {
  if (typeof task !== "string" || !/^[A-Za-z0-9._-]{1,128}$/.test(task) || task.startsWith(".")) {
    throw new AgentAddressError(
      "invalid_task",
      "the task name must be 1 to 128 of the characters A-Z a-z 0-9 . _ - and must not start with '.' (it names a file in the credentials directory)",
    );
  }
}

export function credentialsPath(task: string, dir = credentialsDirectory()): string {
  return join(dir, `${task}.json`);
}

function ioError(what: string, path: string, e: unknown): AgentAddressError {
  const reason = (e as { code?: string }).code ?? (e instanceof Error ? e.message : String(e));
  return new AgentAddressError("credentials_error", `cannot ${what} ${path}: ${reason}`, { cause: e });
}

/** Reads a task's file. Refuses a file that others can read or write, as a password file. */
export async function loadCredentials(task: string, dir = credentialsDirectory()): Promise<CredentialsFile> {
  validateTask(task);
  const path = credentialsPath(task, dir);
  let mode: number;
  try {
    mode = (await stat(path)).mode;
  } catch (e) {
    if ((e as { code?: string }).code === "ENOENT") {
      throw new AgentAddressError("unknown_task", `no saved address for task '${task}' in ${dir} (create one, or run \`agentaddress create ${task}\`)`);
    }
    throw ioError("inspect", path, e);
  }
  if (process.platform !== "win32" && (mode & 0o077) !== 0) {
    throw new AgentAddressError(
      "credentials_insecure",
      `${path} can be read or written by other users (mode ${(mode & 0o777).toString(8).padStart(4, "0")}): it holds a read token; make it 0600 (chmod 600) and try again`,
    );
  }
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (e) {
    throw ioError("read", path, e);
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    // The parser's message may quote the text, which holds the token: not repeated.
    throw new AgentAddressError("credentials_error", `the credentials file ${path} is not valid JSON`);
  }
  const c = parsed as Partial<CredentialsFile> | null;
  const strings = ["task", "base_url", "address_id", "read_token", "inbox_url", "email"] as const;
  if (c === null || typeof c !== "object" || typeof c.version !== "number" || strings.some((k) => typeof c[k] !== "string")) {
    throw new AgentAddressError("credentials_error", `the credentials file ${path} is not valid: missing or mistyped field`);
  }
  if (c.version > FORMAT_VERSION) {
    throw new AgentAddressError("credentials_error", `the credentials file ${path} has format version ${c.version}; this client reads version ${FORMAT_VERSION} (upgrade it)`);
  }
  return c as CredentialsFile;
}

async function ensureDirectory(dir: string): Promise<void> {
  try {
    await mkdir(dir, { recursive: true, mode: 0o700 });
    if (process.platform !== "win32" && ((await stat(dir)).mode & 0o777) !== 0o700) await chmod(dir, 0o700);
  } catch (e) {
    throw ioError("create the directory", dir, e);
  }
}

/**
 * Writes a task's file atomically with mode 0600. `replace` false: fails with `task_exists`
 * when the task already has a file (a hard link, atomic); true: renames over it.
 */
export async function saveCredentials(creds: CredentialsFile, replace: boolean, dir = credentialsDirectory()): Promise<string> {
  validateTask(creds.task);
  await ensureDirectory(dir);
  const path = credentialsPath(creds.task, dir);
  const tmp = join(dir, `.${creds.task}.json.${process.pid}.${randomBytes(6).toString("hex")}.tmp`);
  const text = `${JSON.stringify(creds, null, 2)}\n`;
  try {
    const handle = await open(tmp, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL, 0o600);
    try {
      await handle.writeFile(text, "utf8");
      await handle.sync();
    } finally {
      await handle.close();
    }
  } catch (e) {
    await unlink(tmp).catch(() => {});
    throw ioError("write", tmp, e);
  }
  try {
    if (replace) {
      await rename(tmp, path);
    } else {
      try {
        await link(tmp, path);
      } catch (e) {
        if ((e as { code?: string }).code === "EEXIST") {
          throw new AgentAddressError("task_exists", `task '${creds.task}' already has a saved address in ${dir} (pass { force: true } to replace it)`);
        }
        throw ioError("create", path, e);
      }
    }
  } finally {
    await unlink(tmp).catch(() => {});
  }
  try {
    const d = await open(dir, constants.O_RDONLY);
    await d.sync().catch(() => {});
    await d.close();
  } catch {
    // best effort, as the CLI
  }
  return path;
}
