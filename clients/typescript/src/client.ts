/** The client: `Client` makes and finds addresses, `Address` reads and writes one of them. */
import {
  encodeAsk,
  encodeCreateAddress,
  encodeHook,
  encodeHookStatus,
  encodePutState,
  encodeTimer,
  type AskOptions,
  type CreateAddressOptions,
  type HookOptions,
  type OperationName,
  type TimerOptions,
} from "./contract.js";
import { loadCredentials, saveCredentials, credentialsDirectory, credentialsPath, validateTask, FORMAT_VERSION, type CredentialsFile } from "./credentials.js";
import { AgentAddressError, RevisionConflict } from "./errors.js";
import { isAbort, sleep, Transport, type RequestInit, type TransportOptions } from "./http.js";

export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };

/** An event of the feed (docs/API.md §4). Unknown fields are kept as they came. Its contents are untrusted. */
export interface Event {
  id: string;
  sequence: number;
  type: string;
  source?: string | null;
  ingress_surface: string;
  received_at: string;
  acknowledged_at?: string | null;
  data: unknown;
  http?: { content_type?: string; headers?: Record<string, string>; [field: string]: unknown } | null;
  verification?: Record<string, unknown> | null;
  [field: string]: unknown;
}

export interface Page {
  events: Event[];
  /** Pass as `after` to read on. */
  nextCursor: number;
  hasMore: boolean;
}

export interface PollOptions {
  /** Read the events after this sequence (default: the address's cursor, see `ack`). */
  after?: number;
  /** Seconds to wait for a first event, 0..25 (default 0). */
  wait?: number;
  /** Only events of these types (patterns, docs/API.md §21). */
  types?: string[];
  /** 1..100 (default: the server's, 100). */
  limit?: number;
  signal?: AbortSignal;
}

export interface EventsOptions extends PollOptions {
  /** Each long poll's wait (default 25). */
  wait?: number;
}

export interface HookView {
  id: string;
  url: string;
  types: string[];
  format: string;
  header_names: string[];
  debounce_seconds: number;
  status: string;
  delivered_through: number;
  created_at: string;
  last_wake_at?: string | null;
  last_error?: string | null;
  [field: string]: unknown;
}

export interface PersonRequest {
  id: string;
  /** The person's page (only in the answer that created the request). */
  url?: string | null;
  title: string;
  body?: string | null;
  options: string[];
  comment: string;
  status: "open" | "answered" | "expired" | string;
  created_at: string;
  expires_at: string;
  answer?: { choice: string; comment?: string | null; answered_at: string } | null;
  [field: string]: unknown;
}

export interface Timer {
  id: string;
  type: string;
  fire_at: string;
  status: "pending" | "fired" | "cancelled" | string;
  data: unknown;
  created_at: string;
  closed_at?: string | null;
  event_id?: string | null;
  sequence?: number | null;
  [field: string]: unknown;
}

export interface Delivery {
  duplicate: boolean;
  event: { id: string; sequence: number };
}

export interface ClientOptions extends TransportOptions {
  /** The server's base URL, without `/api/v1` (default: `AGENTADDRESS_URL`, else http://127.0.0.1:8080). */
  baseUrl?: string;
}

const DEFAULT_URL = "http://127.0.0.1:8080";
const INSPECT = Symbol.for("nodejs.util.inspect.custom");

function trimBase(url: string): string {
  return url.replace(/\/+$/, "");
}

function encodeSegment(s: string): string {
  return encodeURIComponent(s);
}

export class Client {
  readonly baseUrl: string;
  /** Whether the base URL was given (option or `AGENTADDRESS_URL`) rather than the default. */
  readonly #explicitBase: boolean;
  /** @internal */
  readonly transport: Transport;

  constructor(options: ClientOptions = {}) {
    const given = options.baseUrl ?? process.env.AGENTADDRESS_URL;
    this.#explicitBase = Boolean(given);
    this.baseUrl = trimBase(given || DEFAULT_URL);
    this.transport = new Transport(options);
  }

  /** Creates an address (`POST /api/v1/addresses`). */
  async createAddress(options: CreateAddressOptions = {}): Promise<Address> {
    const { body } = await this.transport.call("createAddress", `${this.baseUrl}/api/v1/addresses`, { json: encodeCreateAddress(options) });
    const b = body as {
      address: { id: string; email: string; name?: string | null; task_id?: string | null; created_at: string; expires_at?: string | null };
      credentials: { read_token: string };
      endpoints: { inbox_url: string; events_url: string; state_url: string };
      hooks?: Array<{ hook: HookView; signing_secret: string }>;
    };
    const address = new Address(this, this.baseUrl, b.address.id, b.credentials.read_token, {
      email: b.address.email,
      inboxUrl: b.endpoints.inbox_url,
      name: b.address.name ?? null,
      taskId: b.address.task_id ?? null,
      createdAt: b.address.created_at,
      expiresAt: b.address.expires_at ?? null,
    });
    for (const h of b.hooks ?? []) address._rememberHookSecret(h.hook.id, h.signing_secret);
    address.createdHooks = (b.hooks ?? []).map((h) => h.hook);
    return address;
  }

  /** An address known by its id and read token (no request is sent). */
  address(id: string, readToken: string): Address {
    return new Address(this, this.baseUrl, id, readToken, {});
  }

  /** Loads the task's credentials file (shared with the CLI, docs/CLI.md). */
  async load(task: string, options: { home?: string } = {}): Promise<Address> {
    const dir = options.home ?? credentialsDirectory();
    const c = await loadCredentials(task, dir);
    const base = this.#explicitBase ? this.baseUrl : trimBase(c.base_url || this.baseUrl);
    const address = new Address(this, base, c.address_id, c.read_token, {
      email: c.email,
      inboxUrl: c.inbox_url,
      name: c.name ?? null,
      taskId: c.task,
      createdAt: c.created_at ?? null,
      expiresAt: c.expires_at ?? null,
      cursor: c.cursor ?? 0,
    });
    for (const [id, secret] of Object.entries(c.hook_secrets ?? {})) address._rememberHookSecret(id, secret);
    address._bind(task, dir, c.base_url || base);
    return address;
  }

  /** Delivers a body to an inbox URL, as a webhook sender would (docs/API.md §3). */
  async deliver(inboxUrl: string, body: unknown, options: { idempotencyKey?: string; contentType?: string; headers?: Record<string, string>; signal?: AbortSignal } = {}): Promise<Delivery> {
    const headers: Record<string, string> = { ...options.headers };
    if (options.idempotencyKey !== undefined) headers["idempotency-key"] = options.idempotencyKey;
    const init: RequestInit = { headers, signal: options.signal };
    if (typeof body === "string" || body instanceof Uint8Array) {
      init.body = body;
      headers["content-type"] = options.contentType ?? (typeof body === "string" ? "text/plain; charset=utf-8" : "application/octet-stream");
    } else {
      init.body = JSON.stringify(body);
      headers["content-type"] = options.contentType ?? "application/json";
    }
    const { body: answer } = await this.transport.call("deliver", inboxUrl, init);
    return answer as Delivery;
  }
}

/** The durable state of an address (docs/API.md §7). */
export class State {
  readonly #call: (op: OperationName, path: string, init?: RequestInit) => Promise<unknown>;

  /** @internal */
  constructor(call: (op: OperationName, path: string, init?: RequestInit) => Promise<unknown>) {
    this.#call = call;
  }

  /** `[value, revision]`; `[undefined, 0]` when the key does not exist. */
  async get<T = JsonValue>(key: string): Promise<[T | undefined, number]> {
    try {
      const b = (await this.#call("stateGet", `/state/${encodeSegment(key)}`)) as { value: T; revision: number };
      return [b.value, b.revision];
    } catch (e) {
      if (e instanceof AgentAddressError && e.code === "not_found" && e.status === 404) return [undefined, 0];
      throw e;
    }
  }

  /**
   * Writes the key; returns its new revision. `ifRevision`: 0 = only if the key does not exist,
   * N = only if its revision is N (else `RevisionConflict`).
   */
  async put(key: string, value: unknown, options: { ifRevision?: number } = {}): Promise<number> {
    const b = (await this.#call("statePut", `/state/${encodeSegment(key)}`, { json: encodePutState(value, options.ifRevision) })) as { revision: number };
    return b.revision;
  }

  /** Deletes the key; returns the revision of its deletion. A missing key is `not_found`. */
  async delete(key: string, options: { ifRevision?: number } = {}): Promise<number> {
    const b = (await this.#call("stateDelete", `/state/${encodeSegment(key)}`, { query: { if_revision: options.ifRevision } })) as { revision: number };
    return b.revision;
  }

  /**
   * A compare-and-set loop: reads the key, computes `fn(value)` (`undefined` when absent), writes it
   * if nobody wrote meanwhile, else tries again (at most `retries` times). Returns `[value, revision]`.
   */
  async update<T = JsonValue>(key: string, fn: (value: T | undefined) => T | Promise<T>, options: { retries?: number } = {}): Promise<[T, number]> {
    const retries = options.retries ?? 5;
    for (let attempt = 0; ; attempt++) {
      const [value, revision] = await this.get<T>(key);
      const next = await fn(value);
      try {
        const written = await this.put(key, next, { ifRevision: revision });
        return [next, written];
      } catch (e) {
        if (!(e instanceof RevisionConflict) || attempt >= retries) throw e;
      }
    }
  }

  /** Every key with its revision, size and time. */
  async keys(): Promise<Array<{ key: string; revision: number; size: number; updated_at: string }>> {
    const b = (await this.#call("stateKeys", "/state")) as { keys: Array<{ key: string; revision: number; size: number; updated_at: string }> };
    return b.keys;
  }
}

interface AddressFields {
  email?: string;
  inboxUrl?: string;
  name?: string | null;
  taskId?: string | null;
  createdAt?: string | null;
  expiresAt?: string | null;
  cursor?: number;
}

/** One address, with its read token (never shown: not in `toString`, `JSON.stringify` or `util.inspect`). */
export class Address {
  readonly id: string;
  readonly baseUrl: string;
  email: string;
  /** The write capability: hand it to webhook senders. Empty when unknown (an address made from id and token). */
  inboxUrl: string;
  readonly eventsUrl: string;
  readonly stateUrl: string;
  name: string | null;
  taskId: string | null;
  createdAt: string | null;
  expiresAt: string | null;
  /** Where `poll` and `events` start by default: the highest sequence acknowledged (the CLI's rule). */
  cursor: number;
  /** The hooks made with the address (their secrets: `hookSecret(id)`). */
  createdHooks: HookView[] = [];
  readonly state: State;
  readonly #client: Client;
  readonly #token: string;
  readonly #hookSecrets = new Map<string, string>();
  #task: { task: string; dir: string; baseUrl: string } | undefined;

  /** @internal Use `client.createAddress`, `client.address` or `client.load`. */
  constructor(client: Client, baseUrl: string, id: string, readToken: string, fields: AddressFields) {
    this.#client = client;
    this.#token = readToken;
    this.id = id;
    this.baseUrl = baseUrl;
    this.email = fields.email ?? "";
    this.inboxUrl = fields.inboxUrl ?? "";
    this.eventsUrl = `${this.#root()}/events`;
    this.stateUrl = `${this.#root()}/state`;
    this.name = fields.name ?? null;
    this.taskId = fields.taskId ?? null;
    this.createdAt = fields.createdAt ?? null;
    this.expiresAt = fields.expiresAt ?? null;
    this.cursor = fields.cursor ?? 0;
    this.state = new State((op, path, init) => this.#call(op, path, init));
  }

  #root(): string {
    return `${this.baseUrl}/api/v1/addresses/${encodeSegment(this.id)}`;
  }

  async #call(op: OperationName, path: string, init: RequestInit = {}): Promise<unknown> {
    const { body } = await this.#client.transport.call(op, `${this.#root()}${path}`, { ...init, token: this.#token });
    return body;
  }

  /** @internal */
  _rememberHookSecret(hookId: string, secret: string): void {
    this.#hookSecrets.set(hookId, secret);
  }

  /** @internal */
  _bind(task: string, dir: string, baseUrl: string): void {
    this.#task = { task, dir, baseUrl };
  }

  /** The signing secret of a hook this client made or loaded, if known. */
  hookSecret(hookId: string): string | undefined {
    return this.#hookSecrets.get(hookId);
  }

  /** `GET {root}`: the address, its usage and limits. */
  async info(options: { signal?: AbortSignal } = {}): Promise<Record<string, unknown> & { address: Record<string, unknown>; usage: { last_sequence: number } }> {
    const b = (await this.#call("getAddress", "", { signal: options.signal })) as { address: { email: string; name?: string | null; task_id?: string | null; created_at: string; expires_at?: string | null }; usage: { last_sequence: number } };
    this.email = b.address.email;
    this.name = b.address.name ?? null;
    this.taskId = b.address.task_id ?? this.taskId;
    this.createdAt = b.address.created_at;
    this.expiresAt = b.address.expires_at ?? null;
    return b as Record<string, unknown> & typeof b;
  }

  /** Deletes the address and everything in it (the saved file stays). */
  async delete(): Promise<void> {
    await this.#call("deleteAddress", "");
  }

  /** One page of the feed (docs/API.md §4, §21). */
  async poll(options: PollOptions = {}): Promise<Page> {
    const wait = options.wait ?? 0;
    const b = (await this.#call("listEvents", "/events", {
      query: {
        after: options.after ?? this.cursor,
        wait: wait > 0 ? wait : undefined,
        limit: options.limit,
        types: options.types && options.types.length > 0 ? options.types.join(",") : undefined,
      },
      signal: options.signal,
      waitSeconds: Math.min(wait, 25),
    })) as { events: Event[]; next_cursor: number; has_more: boolean };
    return { events: b.events, nextCursor: b.next_cursor, hasMore: b.has_more };
  }

  /**
   * Every event after `after` (default: the cursor), forever, in order, each once: long polls
   * of `wait` seconds (default 25) with the cursor kept. A dropped connection, a restarted
   * server, a 5xx or a rate limit is waited out (0.5 s doubling to 15 s, or `Retry-After`) and
   * reading resumes from the cursor. `signal` ends the iteration (at once, even mid-poll);
   * 401 and 410 end it with their error.
   */
  async *events(options: EventsOptions = {}): AsyncGenerator<Event, void, undefined> {
    const { signal } = options;
    let cursor = options.after ?? this.cursor;
    const wait = options.wait ?? 25;
    let backoff = 500;
    while (!signal?.aborted) {
      let page: Page;
      try {
        page = await this.poll({ after: cursor, wait, types: options.types, limit: options.limit, signal });
        backoff = 500;
      } catch (e) {
        if (signal?.aborted || isAbort(e)) return;
        if (!(e instanceof AgentAddressError) || !transient(e)) throw e;
        const delay = e.retryAfter !== undefined ? Math.min(e.retryAfter * 1000, 60_000) : backoff;
        backoff = Math.min(backoff * 2, 15_000);
        try {
          await sleep(delay, signal);
        } catch {
          return;
        }
        continue;
      }
      for (const event of page.events) {
        cursor = event.sequence;
        yield event;
        if (signal?.aborted) return;
      }
      cursor = Math.max(cursor, page.nextCursor);
    }
  }

  /**
   * Acknowledges an event (docs/API.md §5) and moves the cursor to its sequence if that is
   * higher (saved to the task's file when the address was loaded or saved, as the CLI's `ack`).
   */
  async ack(eventId: string): Promise<{ id: string; sequence: number; acknowledged_at: string }> {
    const b = (await this.#call("ack", `/events/${encodeSegment(eventId)}/ack`)) as { event: { id: string; sequence: number; acknowledged_at: string } };
    if (b.event.sequence > this.cursor) {
      this.cursor = b.event.sequence;
      if (this.#task) await saveCredentials(this.#credentials(this.#task.task, this.#task.baseUrl), true, this.#task.dir);
    }
    return b.event;
  }

  /** One event by id. */
  async event(eventId: string): Promise<Event> {
    const b = (await this.#call("getEvent", `/events/${encodeSegment(eventId)}`)) as { event: Event };
    return b.event;
  }

  /** Asks a person (docs/API.md §12): hand `url` to them; the answer arrives as `request.answered`. */
  async ask(title: string, options: AskOptions = {}): Promise<PersonRequest & { url: string }> {
    const headers: Record<string, string> = {};
    if (options.idempotencyKey !== undefined) headers["idempotency-key"] = options.idempotencyKey;
    const b = (await this.#call("createRequest", "/requests", { json: encodeAsk(title, options), headers })) as { request: PersonRequest & { url: string } };
    return b.request;
  }

  /** A request as it is now. */
  async request(requestId: string, options: { wait?: number; signal?: AbortSignal } = {}): Promise<PersonRequest> {
    const wait = options.wait ?? 0;
    const b = (await this.#call("getRequest", `/requests/${encodeSegment(requestId)}`, { query: { wait: wait > 0 ? Math.min(wait, 25) : undefined }, signal: options.signal, waitSeconds: Math.min(wait, 25) })) as { request: PersonRequest };
    return b.request;
  }

  /**
   * Waits until the person answers or the request expires, and returns the request (`status`
   * `answered` with its `answer`, or `expired`). With `timeout` (seconds) it returns the request
   * still `open` once that has passed.
   */
  async waitForAnswer(requestId: string, options: { timeout?: number; signal?: AbortSignal } = {}): Promise<PersonRequest> {
    const deadline = options.timeout === undefined ? Infinity : Date.now() + options.timeout * 1000;
    let backoff = 500;
    for (;;) {
      const left = (deadline - Date.now()) / 1000;
      const wait = Math.max(0, Math.min(25, left));
      let request: PersonRequest;
      try {
        request = await this.request(requestId, { wait, signal: options.signal });
        backoff = 500;
      } catch (e) {
        if (!(e instanceof AgentAddressError) || !transient(e) || Date.now() >= deadline) throw e;
        await sleep(Math.min(e.retryAfter !== undefined ? e.retryAfter * 1000 : backoff, Math.max(0, deadline - Date.now())), options.signal);
        backoff = Math.min(backoff * 2, 15_000);
        continue;
      }
      if (request.status !== "open" || Date.now() >= deadline) return request;
    }
  }

  /** Adds a wake hook (docs/API.md §19); the signing secret is shown only here. */
  async addHook(url: string, options: HookOptions = {}): Promise<{ hook: HookView; signingSecret: string }> {
    const b = (await this.#call("createHook", "/hooks", { json: encodeHook(url, options) })) as { hook: HookView; signing_secret: string };
    this.#hookSecrets.set(b.hook.id, b.signing_secret);
    if (this.#task) await saveCredentials(this.#credentials(this.#task.task, this.#task.baseUrl), true, this.#task.dir);
    return { hook: b.hook, signingSecret: b.signing_secret };
  }

  async listHooks(): Promise<HookView[]> {
    return ((await this.#call("listHooks", "/hooks")) as { hooks: HookView[] }).hooks;
  }

  async removeHook(hookId: string): Promise<void> {
    await this.#call("deleteHook", `/hooks/${encodeSegment(hookId)}`);
    this.#hookSecrets.delete(hookId);
  }

  /** Pauses (`paused`) or resumes (`active`, which also re-enables a disabled hook) a hook. */
  async setHookStatus(hookId: string, status: "active" | "paused"): Promise<HookView> {
    return ((await this.#call("setHookStatus", `/hooks/${encodeSegment(hookId)}`, { json: encodeHookStatus(status) })) as { hook: HookView }).hook;
  }

  /** Sends one `hook.test` wake now: the receiver's status and the time it took. */
  async testHook(hookId: string): Promise<{ status: number; ms: number }> {
    return (await this.#call("testHook", `/hooks/${encodeSegment(hookId)}/test`)) as { status: number; ms: number };
  }

  /** Sets a timer (docs/API.md §20): an event of its type at its time. */
  async addTimer(options: TimerOptions): Promise<Timer> {
    const headers: Record<string, string> = {};
    if (options.idempotencyKey !== undefined) headers["idempotency-key"] = options.idempotencyKey;
    return ((await this.#call("createTimer", "/timers", { json: encodeTimer(options), headers })) as { timer: Timer }).timer;
  }

  /** The pending timers, then the last 100 fired or cancelled. */
  async listTimers(): Promise<Timer[]> {
    return ((await this.#call("listTimers", "/timers")) as { timers: Timer[] }).timers;
  }

  /** Cancels a timer; one that fired already is `timer_fired` (409). */
  async cancelTimer(timerId: string): Promise<Timer> {
    return ((await this.#call("cancelTimer", `/timers/${encodeSegment(timerId)}`)) as { timer: Timer }).timer;
  }

  #credentials(task: string, baseUrl: string): CredentialsFile {
    const c: CredentialsFile = {
      version: FORMAT_VERSION,
      task,
      base_url: baseUrl,
      address_id: this.id,
      read_token: this.#token,
      inbox_url: this.inboxUrl,
      email: this.email,
      name: this.name,
      created_at: this.createdAt,
      expires_at: this.expiresAt,
      cursor: this.cursor,
    };
    if (this.#hookSecrets.size > 0) c.hook_secrets = Object.fromEntries([...this.#hookSecrets].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
    return c;
  }

  /**
   * Saves the credentials to the task's file (the CLI's format, docs/CLI.md), atomically, 0600.
   * A file of another address is not replaced unless `force`. Later `ack`s and `addHook`s keep
   * the file up to date. Returns the file's path.
   */
  async save(task: string, options: { force?: boolean; home?: string } = {}): Promise<string> {
    validateTask(task);
    const dir = options.home ?? credentialsDirectory();
    if (!this.email) await this.info();
    let replace = options.force === true;
    if (!replace) {
      try {
        const existing = await loadCredentials(task, dir);
        replace = existing.address_id === this.id;
        if (!replace) throw new AgentAddressError("task_exists", `task '${task}' already has a saved address in ${dir} (pass { force: true } to replace it)`);
      } catch (e) {
        if (!(e instanceof AgentAddressError) || e.code !== "unknown_task") throw e;
      }
    }
    const path = await saveCredentials(this.#credentials(task, this.baseUrl), replace, dir);
    this.#task = { task, dir, baseUrl: this.baseUrl };
    if (this.taskId === null) this.taskId = task;
    return path;
  }

  /** Where `save(task)` writes. */
  static credentialsPath(task: string, options: { home?: string } = {}): string {
    validateTask(task);
    return credentialsPath(task, options.home ?? credentialsDirectory());
  }

  toString(): string {
    return `Address(${this.id})`;
  }

  toJSON(): Record<string, unknown> {
    return {
      id: this.id,
      email: this.email,
      inboxUrl: this.inboxUrl,
      eventsUrl: this.eventsUrl,
      name: this.name,
      taskId: this.taskId,
      createdAt: this.createdAt,
      expiresAt: this.expiresAt,
      cursor: this.cursor,
    };
  }

  [INSPECT](): string {
    return `Address ${JSON.stringify(this.toJSON(), null, 2)}`;
  }
}

/**
 * Whether an error of a read is worth waiting out (the feed holds everything: nothing is lost):
 * no answer, a rate limit, or a 5xx (a proxy's error page included). A 2xx the client cannot
 * read (`bad_response`) is not: it would not get better.
 */
function transient(e: AgentAddressError): boolean {
  return e.code === "unreachable" || e.code === "timeout" || e.status === 429 || e.status >= 500;
}
