/**
 * Errors. Every failure of a call to the server is an {@link AgentAddressError}: `code` is the
 * server's error code (docs/API.md §9) or one of the client's own (`unreachable`, `timeout`,
 * `bad_response`, `unknown_task`, `invalid_task`, `task_exists`, `credentials_error`,
 * `credentials_insecure`), `status` the HTTP status (0 when there was no answer), `retryAfter`
 * the seconds the server asked to wait (429/503), and the message the server's own sentence.
 * No message ever holds a read token.
 */
export class AgentAddressError extends Error {
  readonly code: string;
  readonly status: number;
  readonly retryAfter: number | undefined;
  /** The `error` object of the server's answer (extra fields included), when there was one. */
  readonly detail: Readonly<Record<string, unknown>> | undefined;

  constructor(
    code: string,
    message: string,
    options: {
      status?: number;
      retryAfter?: number;
      detail?: Record<string, unknown>;
      cause?: unknown;
    } = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = "AgentAddressError";
    this.code = code;
    this.status = options.status ?? 0;
    this.retryAfter = options.retryAfter;
    this.detail = options.detail;
  }

  override toString(): string {
    return `${this.name}: ${this.code}${this.status ? ` (HTTP ${this.status})` : ""}: ${this.message}`;
  }
}

/** 409 `revision_conflict`: the key's revision is not the one given (`currentRevision`, `null` when the key does not exist). */
export class RevisionConflict extends AgentAddressError {
  readonly currentRevision: number | null;
  constructor(message: string, currentRevision: number | null, options: { status?: number; detail?: Record<string, unknown> } = {}) {
    super("revision_conflict", message, { status: 409, ...options });
    this.name = "RevisionConflict";
    this.currentRevision = currentRevision;
  }
}

/** 401 `unauthorized`: a wrong read token or an unknown address (the server does not tell them apart). */
export class Unauthorized extends AgentAddressError {
  constructor(message: string, options: { status?: number; detail?: Record<string, unknown> } = {}) {
    super("unauthorized", message, { status: 401, ...options });
    this.name = "Unauthorized";
  }
}

/** 410 `address_gone`: the address was deleted or has expired. */
export class AddressGone extends AgentAddressError {
  constructor(message: string, options: { status?: number; detail?: Record<string, unknown> } = {}) {
    super("address_gone", message, { status: 410, ...options });
    this.name = "AddressGone";
  }
}

/** 429 `rate_limited`, still refused after the client's bounded retries. */
export class RateLimited extends AgentAddressError {
  constructor(message: string, options: { status?: number; retryAfter?: number; detail?: Record<string, unknown> } = {}) {
    super("rate_limited", message, { status: 429, ...options });
    this.name = "RateLimited";
  }
}

/** A wake whose signature does not verify (see `verifyWake`). */
export class InvalidSignature extends AgentAddressError {
  constructor(message: string) {
    super("signature_invalid", message);
    this.name = "InvalidSignature";
  }
}

/** The error of an answer: the right subclass for the server's code. */
export function errorFromAnswer(
  status: number,
  detail: Record<string, unknown> | undefined,
  retryAfter: number | undefined,
  fallbackMessage: string,
): AgentAddressError {
  const code = typeof detail?.code === "string" ? detail.code : `http_${status}`;
  const message = typeof detail?.message === "string" ? detail.message : fallbackMessage;
  const base = { status, detail };
  switch (code) {
    case "revision_conflict": {
      const current = detail?.current_revision;
      return new RevisionConflict(message, typeof current === "number" ? current : null, base);
    }
    case "unauthorized":
      return new Unauthorized(message, base);
    case "address_gone":
      return new AddressGone(message, base);
    case "rate_limited":
      return new RateLimited(message, { ...base, retryAfter });
    default:
      return new AgentAddressError(code, message, { ...base, retryAfter });
  }
}
