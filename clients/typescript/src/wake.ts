/** Verifying a wake (docs/API.md §19): Standard Webhooks signatures, HMAC-SHA256 with WebCrypto. */
import { InvalidSignature } from "./errors.js";

/** The body of a `standard` wake. */
export interface Wake {
  type: string;
  address_id: string;
  task_id: string | null;
  hook_id: string;
  from_sequence?: number;
  to_sequence?: number;
  events?: Array<{ id: string; sequence: number; type: string; source: string | null; created_at: string; [field: string]: unknown }>;
  events_url?: string;
  [field: string]: unknown;
}

export type HeadersLike = Headers | Record<string, string | string[] | undefined>;

export interface VerifyWakeOptions {
  /** The largest distance between `webhook-timestamp` and now, in seconds (default 300). */
  toleranceSeconds?: number;
  /** Now, for tests (default `Date.now()`). */
  now?: Date;
}

function header(headers: HeadersLike, name: string): string | undefined {
  if (typeof (headers as Headers).get === "function") return (headers as Headers).get(name) ?? undefined;
  for (const [k, v] of Object.entries(headers as Record<string, string | string[] | undefined>)) {
    if (k.toLowerCase() === name) return Array.isArray(v) ? v.join(" ") : v;
  }
  return undefined;
}

function fromBase64(text: string): Uint8Array<ArrayBuffer> {
  return new Uint8Array(Buffer.from(text, "base64"));
}

/**
 * Verifies a wake's `webhook-signature` with the hook's signing secret (`whsec_…`) and returns
 * the parsed wake. Throws `InvalidSignature` when a header is missing, the timestamp is outside
 * the tolerance, or no signature matches. `body` must be the raw bytes received, unparsed.
 */
export async function verifyWake(secret: string, headers: HeadersLike, body: string | Uint8Array, options: VerifyWakeOptions = {}): Promise<Wake> {
  const id = header(headers, "webhook-id");
  const timestamp = header(headers, "webhook-timestamp");
  const signatures = header(headers, "webhook-signature");
  if (!id || !timestamp || !signatures) {
    throw new InvalidSignature("the wake lacks a webhook-id, webhook-timestamp or webhook-signature header");
  }
  if (!/^\d{1,15}$/.test(timestamp)) throw new InvalidSignature("the wake's webhook-timestamp is not a number of seconds");
  const tolerance = options.toleranceSeconds ?? 300;
  const now = (options.now ?? new Date()).getTime() / 1000;
  if (Math.abs(now - Number(timestamp)) > tolerance) {
    throw new InvalidSignature(`the wake's webhook-timestamp is more than ${tolerance} s from now (a replay, or a wrong clock)`);
  }
  const keyBytes = fromBase64(secret.startsWith("whsec_") ? secret.slice("whsec_".length) : secret);
  if (keyBytes.length === 0) throw new InvalidSignature("the signing secret is empty");
  const key = await crypto.subtle.importKey("raw", keyBytes, { name: "HMAC", hash: "SHA-256" }, false, ["verify"]);
  const bodyBytes = typeof body === "string" ? new TextEncoder().encode(body) : new Uint8Array(body);
  const prefix = new TextEncoder().encode(`${id}.${timestamp}.`);
  const signed = new Uint8Array(prefix.length + bodyBytes.length);
  signed.set(prefix, 0);
  signed.set(bodyBytes, prefix.length);
  let verified = false;
  for (const entry of signatures.split(" ")) {
    const comma = entry.indexOf(",");
    if (comma < 0 || entry.slice(0, comma) !== "v1") continue;
    const candidate = fromBase64(entry.slice(comma + 1));
    if (candidate.length !== 32) continue;
    // WebCrypto's verify compares in constant time.
    if (await crypto.subtle.verify("HMAC", key, candidate, signed)) verified = true;
  }
  if (!verified) throw new InvalidSignature("no webhook-signature of the wake matches its signing secret");
  let parsed: unknown;
  try {
    parsed = JSON.parse(new TextDecoder().decode(bodyBytes));
  } catch {
    throw new InvalidSignature("the wake's body is signed but is not JSON");
  }
  return parsed as Wake;
}
