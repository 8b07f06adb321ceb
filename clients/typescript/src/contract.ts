/**
 * What this client reads from and sends to the server, operation by operation, as data.
 *
 * Internal (exported as `agentaddress-client/contract` for the package's own tests): every
 * answer the client uses is checked against `reads` at run time (a missing or mistyped field is
 * a `bad_response` error, not a crash later), and the bodies it sends are built by the encoders
 * below, which send only the fields of `sends`. A test fetches `/openapi.json` from a running
 * server and checks this table against it: every field read exists with a compatible type,
 * every field sent exists, every required request field is sent. So a field the server renames
 * breaks the test, not a user.
 */
import { AgentAddressError } from "./errors.js";

export type FieldType = "string" | "integer" | "number" | "boolean" | "object" | "array" | "any";

/** One field: its JSON type, whether `null` is handled, whether it may be absent. */
export interface FieldSpec {
  readonly type: FieldType;
  readonly nullable?: boolean;
  readonly optional?: boolean;
}

export interface Operation {
  readonly method: "GET" | "POST" | "PUT" | "DELETE";
  /** The path as `/openapi.json` names it. */
  readonly path: string;
  /** The success statuses the client accepts. */
  readonly statuses: readonly number[];
  /** Query parameters sent. */
  readonly query?: Readonly<Record<string, FieldSpec>>;
  /** The JSON request body: its schema's name in `/openapi.json` and the fields sent. */
  readonly request?: { readonly schema: string; readonly sends: Readonly<Record<string, FieldSpec>> };
  /**
   * The JSON answer: its schema's name and the fields read, as dotted paths (`a.b`; `a[].b` for
   * each element of the array `a`). A field under a `null` or absent parent is not required.
   */
  readonly response?: { readonly schema: string; readonly reads: Readonly<Record<string, FieldSpec>> };
}

const S: FieldSpec = { type: "string" };
const S_NULL: FieldSpec = { type: "string", nullable: true };
const S_NULL_OPT: FieldSpec = { type: "string", nullable: true, optional: true };
const I: FieldSpec = { type: "integer" };
const I_NULL: FieldSpec = { type: "integer", nullable: true };
const B: FieldSpec = { type: "boolean" };
const ANY: FieldSpec = { type: "any", nullable: true };

function prefixed(prefix: string, fields: Record<string, FieldSpec>): Record<string, FieldSpec> {
  return Object.fromEntries(Object.entries(fields).map(([k, v]) => [`${prefix}${k}`, v]));
}

/** The fields of an event the client's `Event` type declares (others are kept, untyped). */
export const EVENT_FIELDS: Record<string, FieldSpec> = {
  id: S,
  sequence: I,
  type: S,
  source: { type: "string", nullable: true, optional: true },
  ingress_surface: S,
  received_at: S,
  acknowledged_at: { type: "string", nullable: true, optional: true },
  data: ANY,
  http: { type: "object", nullable: true, optional: true },
  verification: { type: "object", nullable: true, optional: true },
};

const ADDRESS_FIELDS: Record<string, FieldSpec> = {
  id: S,
  email: S,
  name: S_NULL_OPT,
  task_id: S_NULL_OPT,
  created_at: S,
  expires_at: S_NULL_OPT,
};

const HOOK_FIELDS: Record<string, FieldSpec> = {
  id: S,
  url: S,
  types: { type: "array" },
  format: S,
  header_names: { type: "array" },
  debounce_seconds: I,
  status: S,
  delivered_through: I,
  created_at: S,
  last_wake_at: S_NULL_OPT,
  last_error: S_NULL_OPT,
};

const REQUEST_FIELDS: Record<string, FieldSpec> = {
  id: S,
  url: S_NULL_OPT,
  title: S,
  body: S_NULL_OPT,
  options: { type: "array" },
  comment: S,
  status: S,
  created_at: S,
  expires_at: S,
  answer: { type: "object", nullable: true, optional: true },
  "answer.choice": S,
  "answer.comment": S_NULL_OPT,
  "answer.answered_at": S,
};

const TIMER_FIELDS: Record<string, FieldSpec> = {
  id: S,
  type: S,
  fire_at: S,
  status: S,
  data: ANY,
  created_at: S,
  closed_at: S_NULL_OPT,
  event_id: S_NULL_OPT,
  sequence: { type: "integer", nullable: true, optional: true },
};

const EVENT_REF: Record<string, FieldSpec> = { "event.id": S, "event.sequence": I };

const ROOT = "/api/v1/addresses/{address_id}";

export const OPERATIONS = {
  createAddress: {
    method: "POST",
    path: "/api/v1/addresses",
    statuses: [201],
    request: {
      schema: "CreateAddressRequest",
      sends: {
        name: S,
        task_id: S,
        expires_in_seconds: I,
        verification: { type: "object" },
        hooks: { type: "array" },
      },
    },
    response: {
      schema: "CreatedAddress",
      reads: {
        ...prefixed("address.", ADDRESS_FIELDS),
        "credentials.read_token": S,
        "endpoints.inbox_url": S,
        "endpoints.events_url": S,
        "endpoints.state_url": S,
        hooks: { type: "array", optional: true },
        ...prefixed("hooks[].hook.", HOOK_FIELDS),
        "hooks[].signing_secret": S,
      },
    },
  },
  getAddress: {
    method: "GET",
    path: ROOT,
    statuses: [200],
    response: {
      schema: "AddressDetails",
      reads: {
        ...prefixed("address.", ADDRESS_FIELDS),
        "usage.last_sequence": I,
        limits: { type: "object" },
      },
    },
  },
  deleteAddress: { method: "DELETE", path: ROOT, statuses: [204] },
  deliver: {
    method: "POST",
    path: "/api/v1/inbox/{address_id}/{inbox_secret}",
    statuses: [200, 202],
    response: { schema: "DeliveryResult", reads: { duplicate: B, ...EVENT_REF } },
  },
  listEvents: {
    method: "GET",
    path: `${ROOT}/events`,
    statuses: [200],
    query: { after: I, wait: { type: "number" }, limit: I, types: S },
    response: {
      schema: "EventPageView",
      reads: {
        events: { type: "array" },
        ...prefixed("events[].", EVENT_FIELDS),
        next_cursor: I,
        has_more: B,
      },
    },
  },
  getEvent: {
    method: "GET",
    path: `${ROOT}/events/{event_id}`,
    statuses: [200],
    response: { schema: "SingleEvent", reads: prefixed("event.", EVENT_FIELDS) },
  },
  ack: {
    method: "POST",
    path: `${ROOT}/events/{event_id}/ack`,
    statuses: [200],
    response: { schema: "AckResult", reads: { ...EVENT_REF, "event.acknowledged_at": S } },
  },
  stateKeys: {
    method: "GET",
    path: `${ROOT}/state`,
    statuses: [200],
    response: {
      schema: "StateList",
      reads: {
        keys: { type: "array" },
        "keys[].key": S,
        "keys[].revision": I,
        "keys[].size": I,
        "keys[].updated_at": S,
      },
    },
  },
  stateGet: {
    method: "GET",
    path: `${ROOT}/state/{key}`,
    statuses: [200],
    response: { schema: "StateValue", reads: { key: S, value: ANY, revision: I, updated_at: S } },
  },
  statePut: {
    method: "PUT",
    path: `${ROOT}/state/{key}`,
    statuses: [200],
    request: { schema: "PutStateRequest", sends: { value: ANY, if_revision: I } },
    response: {
      schema: "StateWriteResult",
      reads: { key: S, value: ANY, revision: I, updated_at: S, ...EVENT_REF },
    },
  },
  stateDelete: {
    method: "DELETE",
    path: `${ROOT}/state/{key}`,
    statuses: [200],
    query: { if_revision: I },
    response: {
      schema: "StateDeleteResult",
      reads: { key: S, deleted: B, revision: I, ...EVENT_REF },
    },
  },
  createRequest: {
    method: "POST",
    path: `${ROOT}/requests`,
    statuses: [200, 201],
    request: {
      schema: "CreateRequestBody",
      sends: {
        title: S,
        body: S,
        options: { type: "array" },
        comment: S,
        expires_in_seconds: I,
      },
    },
    response: { schema: "RequestEnvelope", reads: prefixed("request.", REQUEST_FIELDS) },
  },
  getRequest: {
    method: "GET",
    path: `${ROOT}/requests/{request_id}`,
    statuses: [200],
    query: { wait: { type: "number" } },
    response: { schema: "RequestEnvelope", reads: prefixed("request.", REQUEST_FIELDS) },
  },
  createHook: {
    method: "POST",
    path: `${ROOT}/hooks`,
    statuses: [201],
    request: {
      schema: "HookRequest",
      sends: {
        url: S,
        types: { type: "array" },
        format: S,
        headers: { type: "object" },
        debounce_seconds: I,
      },
    },
    response: {
      schema: "HookCreated",
      reads: { ...prefixed("hook.", HOOK_FIELDS), signing_secret: S },
    },
  },
  listHooks: {
    method: "GET",
    path: `${ROOT}/hooks`,
    statuses: [200],
    response: { schema: "HooksEnvelope", reads: { hooks: { type: "array" }, ...prefixed("hooks[].", HOOK_FIELDS) } },
  },
  setHookStatus: {
    method: "PUT",
    path: `${ROOT}/hooks/{hook_id}`,
    statuses: [200],
    request: { schema: "HookStatusBody", sends: { status: S } },
    response: { schema: "HookEnvelope", reads: prefixed("hook.", HOOK_FIELDS) },
  },
  deleteHook: { method: "DELETE", path: `${ROOT}/hooks/{hook_id}`, statuses: [204] },
  testHook: {
    method: "POST",
    path: `${ROOT}/hooks/{hook_id}/test`,
    statuses: [200],
    response: { schema: "HookTested", reads: { status: I, ms: I } },
  },
  createTimer: {
    method: "POST",
    path: `${ROOT}/timers`,
    statuses: [200, 201],
    request: {
      schema: "TimerRequest",
      sends: { fire_at: S, in_seconds: I, type: S, data: { type: "object" } },
    },
    response: { schema: "TimerEnvelope", reads: prefixed("timer.", TIMER_FIELDS) },
  },
  listTimers: {
    method: "GET",
    path: `${ROOT}/timers`,
    statuses: [200],
    response: { schema: "TimersEnvelope", reads: { timers: { type: "array" }, ...prefixed("timers[].", TIMER_FIELDS) } },
  },
  cancelTimer: {
    method: "DELETE",
    path: `${ROOT}/timers/{timer_id}`,
    statuses: [200],
    response: { schema: "TimerEnvelope", reads: prefixed("timer.", TIMER_FIELDS) },
  },
} as const satisfies Record<string, Operation>;

export type OperationName = keyof typeof OPERATIONS;

/** The fields of an error answer the client reads (every error status). */
export const ERROR_READS = {
  schema: "ErrorBody",
  reads: {
    "error.code": S,
    "error.message": S,
    "error.current_revision": { type: "integer", nullable: true, optional: true },
    "error.retry_after_seconds": { type: "integer", nullable: true, optional: true },
  } as Record<string, FieldSpec>,
};

// ---------------------------------------------------------------------------------------------
// Run-time checks of answers

function typeOk(value: unknown, spec: FieldSpec): boolean {
  if (value === null) return spec.nullable === true || spec.type === "any";
  switch (spec.type) {
    case "any":
      return true;
    case "string":
      return typeof value === "string";
    case "integer":
      return typeof value === "number" && Number.isInteger(value);
    case "number":
      return typeof value === "number";
    case "boolean":
      return typeof value === "boolean";
    case "array":
      return Array.isArray(value);
    case "object":
      return typeof value === "object" && !Array.isArray(value);
  }
}

function checkPath(root: unknown, segments: string[], spec: FieldSpec, where: string): string | null {
  if (segments.length === 0) return null;
  const [head, ...rest] = segments as [string, ...string[]];
  const isArray = head.endsWith("[]");
  const name = isArray ? head.slice(0, -2) : head;
  if (root === null || typeof root !== "object" || Array.isArray(root)) return null; // the parent's own check reports it
  const obj = root as Record<string, unknown>;
  const present = Object.prototype.hasOwnProperty.call(obj, name);
  const value = obj[name];
  if (rest.length === 0) {
    if (!present) return spec.optional ? null : `${where}${name} is missing`;
    return typeOk(value, spec) ? null : `${where}${name} is not ${spec.nullable ? `${spec.type} or null` : spec.type}`;
  }
  if (!present || value === null || value === undefined) return null;
  if (isArray) {
    if (!Array.isArray(value)) return `${where}${name} is not an array`;
    for (let i = 0; i < value.length; i++) {
      const problem = checkPath(value[i], rest, spec, `${where}${name}[${i}].`);
      if (problem) return problem;
    }
    return null;
  }
  return checkPath(value, rest, spec, `${where}${name}.`);
}

/** Checks an answer against the fields the client reads; throws `bad_response` naming the first problem. */
export function checkAnswer(body: unknown, reads: Readonly<Record<string, FieldSpec>>, what: string, status: number): void {
  if (body === null || typeof body !== "object" || Array.isArray(body)) {
    throw new AgentAddressError("bad_response", `the server's answer to ${what} is not a JSON object`, { status });
  }
  for (const [path, spec] of Object.entries(reads)) {
    const problem = checkPath(body, path.split("."), spec, "");
    if (problem) {
      throw new AgentAddressError("bad_response", `the server's answer to ${what} is not as expected: ${problem}`, { status });
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Request bodies: built here, from the fields of `sends` only.

function compact(body: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(body).filter(([, v]) => v !== undefined));
}

export interface HookOptions {
  types?: string[];
  format?: "standard" | "github-dispatch" | "slack";
  headers?: Record<string, string>;
  debounceSeconds?: number;
}

export function encodeHook(url: string, options: HookOptions = {}): Record<string, unknown> {
  return compact({
    url,
    types: options.types,
    format: options.format,
    headers: options.headers,
    debounce_seconds: options.debounceSeconds,
  });
}

export interface CreateAddressOptions {
  name?: string;
  taskId?: string;
  expiresInSeconds?: number;
  /** A signing secret for verified webhooks (docs/API.md §15), sent as given: `{scheme, secret, reject_unverified?, tolerance_seconds?, …}`. */
  verification?: Record<string, unknown>;
  /** Wake hooks made with the address (docs/API.md §19). */
  hooks?: Array<{ url: string } & HookOptions>;
}

export function encodeCreateAddress(options: CreateAddressOptions = {}): Record<string, unknown> {
  return compact({
    name: options.name,
    task_id: options.taskId,
    expires_in_seconds: options.expiresInSeconds,
    verification: options.verification,
    hooks: options.hooks?.map(({ url, ...rest }) => encodeHook(url, rest)),
  });
}

export function encodePutState(value: unknown, ifRevision?: number): Record<string, unknown> {
  return compact({ value: value === undefined ? null : value, if_revision: ifRevision });
}

export interface AskOptions {
  body?: string;
  options?: string[];
  comment?: "none" | "optional" | "required";
  expiresInSeconds?: number;
  idempotencyKey?: string;
}

export function encodeAsk(title: string, options: AskOptions = {}): Record<string, unknown> {
  return compact({
    title,
    body: options.body,
    options: options.options,
    comment: options.comment,
    expires_in_seconds: options.expiresInSeconds,
  });
}

export interface TimerOptions {
  /** Seconds from now (1..31,536,000). Exactly one of `inSeconds` and `fireAt`. */
  inSeconds?: number;
  /** When it fires: a `Date` or an RFC 3339 time with its offset. */
  fireAt?: Date | string;
  /** The type of the event it appends, `timer.…` (default `timer.fired`). */
  type?: string;
  /** JSON the event carries as `data.data`. */
  data?: Record<string, unknown>;
  idempotencyKey?: string;
}

export function encodeTimer(options: TimerOptions): Record<string, unknown> {
  return compact({
    fire_at: options.fireAt instanceof Date ? options.fireAt.toISOString() : options.fireAt,
    in_seconds: options.inSeconds,
    type: options.type,
    data: options.data,
  });
}

export function encodeHookStatus(status: "active" | "paused"): Record<string, unknown> {
  return { status };
}
