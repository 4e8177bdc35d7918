// The endpoint's side of coordd's HTTP delivery (docs/delivery.md): a node
// delivers each attempt of a job with an HTTP target as one request signed
// after Standard Webhooks 1.0 (webhook-id "job_<id>", webhook-timestamp,
// webhook-signature: "v1," + base64 HMAC-SHA256 of "id.timestamp.body", one
// per key during a rotation), carrying the attempt's fencing token
// (Coordd-Fencing-Token) and the job's Idempotency-Key. verifyDelivery checks
// a request; deliveryHandler serves one for node:http, with the effect made
// by one fenced commit carrying the delivery's token. node:crypto only.
import { createHmac, timingSafeEqual } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { CoorddError, isReason } from "./errors.js";
import type { Client } from "./client.js";
import { ATTEMPT_OVER } from "./worker.js";
import type { Commit, CommitOptions } from "./types.js";

/** Seconds a request's webhook-timestamp may be from this machine's clock (the spec's 5 minutes). */
export const DELIVERY_TOLERANCE_SECONDS = 300;

/** A verified delivery: what the request carries. */
export interface Delivery {
  jobId: number;
  /** The attempt number (1, 2, ...). */
  attempt: number;
  /** The attempt's fencing token, "job:<id>:<attempt>", for fencedCommit. */
  token: string;
  /** The job's unique key, else "coordd-job-<id>": the same on every attempt. */
  idempotencyKey: string;
  /** webhook-id: "job_<id>". */
  webhookId: string;
  /** A schedule's job: its window key and occurrence time. */
  window?: string;
  occurrence?: Date;
  /** When the deliverer gives up on this request. */
  deadline: Date;
  /** The job's args (the JSON body; null when empty). */
  args: unknown;
  /** The traceparent header (W3C, docs/tracing.md): the deliverer's span of this request, or the job's trace context. */
  traceparent?: string;
  tracestate?: string;
}

/** The request is not signed by a known secret, or its timestamp is too far from now (answer 401). */
export class SignatureInvalidError extends CoorddError {
  constructor(message: string) {
    super({ code: "UNAUTHENTICATED", reason: "SIGNATURE_INVALID", message });
    this.name = "SignatureInvalidError";
  }
}

/** Signed, but not a well-formed coordd delivery: a header or the JSON body is malformed (answer 400). */
export class DeliveryInvalidError extends CoorddError {
  constructor(field: string, message: string) {
    super({ code: "INVALID_ARGUMENT", reason: "DELIVERY_INVALID", message: `${field}: ${message}`, metadata: { field } });
    this.name = "DeliveryInvalidError";
  }
}

/** Headers as node:http gives them (lower-case names), a fetch Headers, or any name → value record. */
export type HeaderSource = Headers | Record<string, string | string[] | undefined>;

/** A "whsec_<base64>" secret (the prefix optional) as its key bytes (24 to 64, as coordd's webhook package). */
export function parseSecret(secret: string): Buffer {
  const raw = secret.startsWith("whsec_") ? secret.slice("whsec_".length) : secret;
  if (!/^[A-Za-z0-9+/]+={0,2}$/.test(raw) || raw.replace(/=+$/, "").length % 4 === 1) {
    throw new SignatureInvalidError("secret is not whsec_ + base64");
  }
  const key = Buffer.from(raw, "base64");
  if (key.length < 24 || key.length > 64) throw new SignatureInvalidError(`secret has ${key.length} bytes of key, want 24 to 64`);
  return key;
}

function mac(key: Buffer, id: string, timestamp: number, body: Uint8Array): Buffer {
  return createHmac("sha256", key).update(`${id}.${timestamp}.`).update(body).digest();
}

/** The "v1," signature of a request (what a node sends with this secret). */
export function signDelivery(secret: string, webhookId: string, timestamp: number, body: Uint8Array | string): string {
  return "v1," + mac(parseSecret(secret), webhookId, timestamp, bytes(body)).toString("base64");
}

function bytes(body: Uint8Array | string): Uint8Array {
  return typeof body === "string" ? Buffer.from(body, "utf8") : body;
}

function header(h: HeaderSource, name: string): string {
  if (typeof (h as Headers).get === "function") return (h as Headers).get(name) ?? "";
  const rec = h as Record<string, string | string[] | undefined>;
  let v = rec[name];
  if (v === undefined) {
    for (const k of Object.keys(rec)) if (k.toLowerCase() === name) { v = rec[k]; break; }
  }
  return (Array.isArray(v) ? v.join(" ") : v) ?? "";
}

const RFC3339 = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$/i;

function instantHeader(h: HeaderSource, name: string): Date | undefined {
  const v = header(h, name.toLowerCase());
  if (!v) return undefined;
  const t = new Date(v);
  if (!RFC3339.test(v) || Number.isNaN(t.getTime())) throw new DeliveryInvalidError(name, `${JSON.stringify(v)} is not an RFC 3339 time`);
  return t;
}

export interface VerifyOptions {
  /** This machine's clock, epoch ms (default Date.now()). */
  now?: number;
  /** How far the request's timestamp may be from now, seconds (default 300; 0: unchecked). */
  toleranceSeconds?: number;
}

/**
 * Checks a delivery's signature against secrets (one, or several during a
 * rotation: any key's v1 signature is enough), its timestamp against the
 * clock, and that its coordd headers agree with the signed webhook-id
 * (Coordd-Job-Id, a token "job:<id>:<attempt>"); returns what it carries.
 * rawBody is the body as received (before any JSON parsing).
 * SignatureInvalidError (401) or DeliveryInvalidError (400) otherwise.
 */
export function verifyDelivery(secrets: string | readonly string[], headers: HeaderSource, rawBody: Uint8Array | string,
  o: VerifyOptions = {}): Delivery {
  const keys = (typeof secrets === "string" ? [secrets] : secrets).map(parseSecret);
  if (keys.length === 0) throw new SignatureInvalidError("no secret to verify with");
  const body = bytes(rawBody);
  const id = header(headers, "webhook-id"), ts = header(headers, "webhook-timestamp"), sigs = header(headers, "webhook-signature");
  if (!id || !ts || !sigs) throw new SignatureInvalidError("missing webhook-id, webhook-timestamp or webhook-signature");
  if (!/^\d{1,15}$/.test(ts)) throw new SignatureInvalidError(`webhook-timestamp ${JSON.stringify(ts)} is not Unix seconds`);
  const t = Number(ts);
  const tolerance = o.toleranceSeconds ?? DELIVERY_TOLERANCE_SECONDS;
  const skew = (o.now ?? Date.now()) / 1000 - t;
  if (tolerance > 0 && Math.abs(skew) > tolerance) {
    throw new SignatureInvalidError(`webhook-timestamp is ${Math.round(skew)} s from now (tolerance ${tolerance} s)`);
  }
  const wants = keys.map((k) => mac(k, id, t, body));
  const ok = sigs.split(" ").some((sig) => {
    if (!sig.startsWith("v1,")) return false;
    const got = Buffer.from(sig.slice(3), "base64");
    return wants.some((w) => got.length === w.length && timingSafeEqual(got, w));
  });
  if (!ok) throw new SignatureInvalidError("no valid v1 signature");
  return coorddHeaders(headers, id, body);
}

function coorddHeaders(h: HeaderSource, webhookId: string, body: Uint8Array): Delivery {
  const m = /^job_([1-9]\d*)$/.exec(webhookId);
  if (!m) throw new DeliveryInvalidError("webhook-id", `${JSON.stringify(webhookId)} is not a coordd delivery's "job_<id>"`);
  const jobId = Number(m[1]);
  if (header(h, "coordd-job-id") !== m[1]) throw new DeliveryInvalidError("Coordd-Job-Id", `want ${m[1]}, the signed webhook-id's`);
  const token = header(h, "coordd-fencing-token"), attempt = header(h, "coordd-attempt");
  if (!/^[1-9]\d*$/.test(attempt)) throw new DeliveryInvalidError("Coordd-Attempt", `${JSON.stringify(attempt)} is not an attempt number`);
  if (token !== `job:${jobId}:${attempt}`) throw new DeliveryInvalidError("Coordd-Fencing-Token", `${JSON.stringify(token)}: want "job:${jobId}:${attempt}"`);
  const idempotencyKey = header(h, "idempotency-key");
  if (!idempotencyKey) throw new DeliveryInvalidError("Idempotency-Key", "missing");
  const deadline = instantHeader(h, "Coordd-Deadline");
  if (!deadline) throw new DeliveryInvalidError("Coordd-Deadline", "missing");
  let args: unknown = null;
  if (body.length > 0) {
    try {
      args = JSON.parse(Buffer.from(body).toString("utf8"));
    } catch (e) {
      throw new DeliveryInvalidError("body", `not JSON: ${(e as Error).message}`);
    }
  }
  const window = header(h, "coordd-window") || undefined, occurrence = instantHeader(h, "Coordd-Occurrence");
  const traceparent = header(h, "traceparent") || undefined, tracestate = header(h, "tracestate") || undefined;
  return { jobId, attempt: Number(attempt), token, idempotencyKey, webhookId, deadline, args,
    ...(window !== undefined && { window }), ...(occurrence !== undefined && { occurrence }),
    ...(traceparent !== undefined && { traceparent }), ...(tracestate !== undefined && { tracestate }) };
}

export interface DeliveryContext {
  /**
   * A write to resource fenced by the delivery's token, with key (default:
   * the delivery's Idempotency-Key, so a repeated delivery is a duplicate).
   * A refusal saying the attempt is over (STALE_TOKEN, ATTEMPT_EXPIRED, ...)
   * throws; left uncaught, the handler answers 409.
   */
  commit(resource: string, key?: string, payload?: unknown, opts?: CommitOptions): Promise<Commit>;
  /** Aborted at the delivery's Coordd-Deadline or when the deliverer closes the request. */
  signal: AbortSignal;
}

/** Resolves to the job's result (a JSON value; undefined is null) or throws. */
export type DeliveryFn = (delivery: Delivery, ctx: DeliveryContext) => Promise<unknown>;

export interface DeliveryHandlerOptions extends VerifyOptions {
  /** The largest body read, bytes (default 1 MiB): larger is answered 413. */
  maxBodyBytes?: number;
  /** Called with each refused or failed request's error and the status answered (default: ignored). */
  onError?: (err: unknown, status: number) => void;
}

/** Refusals of a fenced commit that say this delivery's attempt is over (or its token fences nothing live). */
const SUPERSEDED = [...ATTEMPT_OVER, "LEASE_LOST", "LEASE_NOT_FOUND", "RESOURCE_LEASE_MISMATCH"];

/**
 * The status a deliverer gets for an error (docs/delivery.md, "Outcomes"):
 * 401 a bad signature, 400 a malformed delivery, 409 a superseded attempt
 * (its write was refused; not retried: the live attempt, if any, does the
 * work), 400 a permanent() error (the job is dead), 502/503 coordd refused
 * the endpoint's own call or was unreachable (retried), 500 anything else
 * (retried). As client/fencehttp's middleware.
 */
export function deliveryStatus(err: unknown): number {
  if (err instanceof SignatureInvalidError) return 401;
  if (err instanceof DeliveryInvalidError) return 400;
  if (isReason(err, ...SUPERSEDED)) return 409;
  if ((err as any)?.coorddPermanent) return 400;
  if (err instanceof CoorddError) {
    if (err.outcomeUnknown || err.code === "UNAVAILABLE" || err.code === "DEADLINE_EXCEEDED") return 503;
    return 502; // the endpoint's own call to coordd was refused: not the deliverer's request at fault
  }
  return 500;
}

class BodyTooLarge extends Error {}

function readBody(req: IncomingMessage, max: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let n = 0;
    req.on("data", (c: Buffer) => {
      n += c.length;
      if (n > max) {
        req.removeAllListeners("data");
        reject(new BodyTooLarge(`body over ${max} bytes`));
        return;
      }
      chunks.push(c);
    });
    req.on("end", () => resolve(Buffer.concat(chunks)));
    req.on("error", reject);
  });
}

function answer(res: ServerResponse, status: number, body: unknown): void {
  if (res.headersSent || res.destroyed) return;
  const text = JSON.stringify(body === undefined ? null : body);
  res.writeHead(status, { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(text) });
  res.end(text);
}

function refuse(res: ServerResponse, err: unknown, status: number, o: DeliveryHandlerOptions): void {
  o.onError?.(err, status);
  answer(res, status, { reason: err instanceof CoorddError ? err.reason : "HANDLER_FAILED", message: err instanceof Error ? err.message : String(err) });
}

/**
 * A node:http request listener (http.createServer(deliveryHandler(...)), or
 * an Express route before any body parser) for one delivery target: it
 * verifies the request (verifyDelivery), runs fn with the delivery and a
 * commit fenced by its token, and answers 200 with fn's result as JSON,
 * which coordd records as the job's result. Errors are answered as
 * deliveryStatus says, with {reason, message}.
 */
export function deliveryHandler(client: Client, secrets: string | readonly string[], fn: DeliveryFn,
  o: DeliveryHandlerOptions = {}): (req: IncomingMessage, res: ServerResponse) => void {
  const max = o.maxBodyBytes ?? 1 << 20;
  return (req, res) => {
    void (async () => {
      let body: Buffer;
      try {
        body = await readBody(req, max);
      } catch (e) {
        // The rest of a body too large is not read: the answer closes the connection.
        res.setHeader("Connection", "close");
        res.on("finish", () => req.destroy());
        return refuse(res, e, e instanceof BodyTooLarge ? 413 : 400, o);
      }
      try {
        const d = verifyDelivery(secrets, req.headers, body, o);
        const ac = new AbortController();
        const timer = setTimeout(() => ac.abort(new Error("the delivery's deadline passed")), 
          Math.min(2 ** 31 - 1, Math.max(0, d.deadline.getTime() - Date.now())));
        const closed = () => { if (!res.writableFinished) ac.abort(new Error("the deliverer closed the request")); };
        res.on("close", closed);
        try {
          const result = await fn(d, {
            signal: ac.signal,
            commit: (resource, key, payload, opts) =>
              client.fencedCommit(resource, d.token, key || d.idempotencyKey, payload, { signal: ac.signal, ...opts }),
          });
          answer(res, 200, result);
        } finally {
          clearTimeout(timer);
          res.off("close", closed);
        }
      } catch (e) {
        refuse(res, e, deliveryStatus(e), o);
      }
    })();
  };
}
