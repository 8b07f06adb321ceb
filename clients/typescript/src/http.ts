/** The HTTP side: one request, JSON in and out, errors mapped, 429/503 retried (bounded). */
import { checkAnswer, ERROR_READS, OPERATIONS, type OperationName } from "./contract.js";
import { AgentAddressError, errorFromAnswer } from "./errors.js";

export interface TransportOptions {
  /** The `fetch` to use (default: the global one). */
  fetch?: typeof fetch;
  /** How many times a 429 or 503 is retried (default 3). */
  maxRetries?: number;
  /** The longest single wait for a retry, in seconds (default 30); a longer `Retry-After` ends the retries. */
  maxRetryWaitSeconds?: number;
  /** Seconds a request may take beyond its long-poll wait before it is abandoned (default 30). */
  requestTimeoutSeconds?: number;
}

export interface RequestInit {
  token?: string;
  /** A JSON body. */
  json?: unknown;
  /** A raw body (deliveries), sent as is. */
  body?: string | Uint8Array;
  headers?: Record<string, string>;
  query?: Record<string, string | number | undefined>;
  signal?: AbortSignal;
  /** The long-poll wait of this request, in seconds (lengthens the timeout). */
  waitSeconds?: number;
}

export interface Answer {
  status: number;
  body: unknown;
}

export function isAbort(e: unknown): boolean {
  return e instanceof Error && (e.name === "AbortError" || (e as { code?: unknown }).code === "ABORT_ERR");
}

/** Sleeps, or rejects with the signal's reason when it aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(abortError());
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(abortError());
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

function abortError(): Error {
  const e = new Error("the operation was aborted");
  e.name = "AbortError";
  return e;
}

function retryAfterOf(headers: Headers, detail: Record<string, unknown> | undefined): number | undefined {
  const header = headers.get("retry-after");
  if (header !== null && /^\s*\d+(\.\d+)?\s*$/.test(header)) return Number(header);
  if (header !== null) {
    const date = Date.parse(header);
    if (!Number.isNaN(date)) return Math.max(0, (date - Date.now()) / 1000);
  }
  const field = detail?.retry_after_seconds;
  return typeof field === "number" && field >= 0 ? field : undefined;
}

/** A URL with its secrets (the inbox secret of an inbox URL) left out, for messages. */
export function describeUrl(url: string): string {
  try {
    const u = new URL(url);
    const path = u.pathname.replace(/^(.*\/api\/v1\/inbox\/[^/]+\/)[^/]+/, "$1…");
    return `${u.origin}${path}`;
  } catch {
    return "(an invalid URL)";
  }
}

export class Transport {
  readonly #fetch: typeof fetch;
  readonly maxRetries: number;
  readonly maxRetryWaitSeconds: number;
  readonly requestTimeoutSeconds: number;

  constructor(options: TransportOptions = {}) {
    this.#fetch = options.fetch ?? ((input, init) => fetch(input, init));
    this.maxRetries = options.maxRetries ?? 3;
    this.maxRetryWaitSeconds = options.maxRetryWaitSeconds ?? 30;
    this.requestTimeoutSeconds = options.requestTimeoutSeconds ?? 30;
  }

  /** Sends one operation of the contract, retrying 429 and 503; returns the checked answer. */
  async call(op: OperationName, url: string, init: RequestInit = {}): Promise<Answer> {
    const spec = OPERATIONS[op];
    const what = `${spec.method} ${spec.path}`;
    for (let attempt = 0; ; attempt++) {
      const answer = await this.#once(spec.method, url, init, what);
      if ((spec.statuses as readonly number[]).includes(answer.status)) {
        if ("response" in spec && answer.status !== 204) {
          checkAnswer(answer.body, spec.response.reads, what, answer.status);
        }
        return { status: answer.status, body: answer.body };
      }
      const error = answer.error ?? new AgentAddressError("bad_response", `the server answered ${what} with HTTP ${answer.status}, which this client does not expect`, { status: answer.status });
      const retriable = answer.status === 429 || answer.status === 503;
      if (!retriable || attempt >= this.maxRetries) throw error;
      const wait = error.retryAfter ?? Math.min(2 ** attempt, 8);
      if (wait > this.maxRetryWaitSeconds) throw error;
      await sleep(wait * 1000, init.signal);
    }
  }

  async #once(method: string, url: string, init: RequestInit, what: string): Promise<{ status: number; body: unknown; error?: AgentAddressError }> {
    const target = new URL(url);
    for (const [k, v] of Object.entries(init.query ?? {})) {
      if (v !== undefined) target.searchParams.set(k, String(v));
    }
    const headers: Record<string, string> = { accept: "application/json", ...init.headers };
    let body: string | Uint8Array | undefined = init.body;
    if (init.json !== undefined) {
      body = JSON.stringify(init.json);
      headers["content-type"] = "application/json; charset=utf-8";
    }
    if (init.token !== undefined) headers.authorization = `Bearer ${init.token}`;
    // AbortSignal.timeout takes whole milliseconds (a fraction is a RangeError); waits may be fractional.
    const timeout = AbortSignal.timeout(Math.ceil((this.requestTimeoutSeconds + (init.waitSeconds ?? 0)) * 1000));
    const signal = init.signal ? AbortSignal.any([init.signal, timeout]) : timeout;
    let response: Response;
    let text: string;
    try {
      const payload = body instanceof Uint8Array ? new Uint8Array(body) : body;
      response = await this.#fetch(target, { method, headers, body: payload, signal, redirect: "manual" });
      text = await response.text();
    } catch (e) {
      if (init.signal?.aborted) throw init.signal.reason instanceof Error && isAbort(init.signal.reason) ? init.signal.reason : abortError();
      if (timeout.aborted) {
        throw new AgentAddressError("timeout", `no answer from ${describeUrl(url)} to ${what} within ${this.requestTimeoutSeconds + (init.waitSeconds ?? 0)} s`, { cause: e });
      }
      const reason = e instanceof Error ? (e.cause instanceof Error ? e.cause.message : e.message) : String(e);
      throw new AgentAddressError("unreachable", `cannot reach ${describeUrl(url)} (${what}): ${reason}`, { cause: e });
    }
    const status = response.status;
    if (status === 204) return { status, body: null };
    let parsed: unknown;
    let isJson = false;
    if (text.length > 0) {
      try {
        parsed = JSON.parse(text);
        isJson = true;
      } catch {
        isJson = false;
      }
    }
    const ok = status >= 200 && status < 300;
    if (!isJson) {
      const type = response.headers.get("content-type") ?? "no content type";
      const error = new AgentAddressError(
        "bad_response",
        `the server answered ${what} with HTTP ${status} and ${text.length === 0 ? "an empty body" : `a body that is not JSON (${type.split(";")[0]})`}${ok ? "" : ": a proxy's error page?"}`,
        { status, retryAfter: retryAfterOf(response.headers, undefined) },
      );
      if (ok) throw error;
      return { status, body: undefined, error };
    }
    if (ok) return { status, body: parsed };
    const detail =
      parsed !== null && typeof parsed === "object" && !Array.isArray(parsed) && typeof (parsed as { error?: unknown }).error === "object"
        ? ((parsed as { error: Record<string, unknown> }).error ?? undefined)
        : undefined;
    if (detail === undefined) {
      return {
        status,
        body: parsed,
        error: new AgentAddressError("bad_response", `the server answered ${what} with HTTP ${status} and JSON that is not an error object`, { status, retryAfter: retryAfterOf(response.headers, undefined) }),
      };
    }
    try {
      checkAnswer(parsed, ERROR_READS.reads, `${what} (an error)`, status);
    } catch (e) {
      return { status, body: parsed, error: e as AgentAddressError };
    }
    const error = errorFromAnswer(status, detail, retryAfterOf(response.headers, detail), `HTTP ${status}`);
    return { status, body: parsed, error };
  }
}
