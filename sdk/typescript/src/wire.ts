// Every conversion between the SDK's values and the HTTP/JSON contract
// (docs/http-api.md, "Conventions") is here, so a change of the contract is
// a change of this file:
//   - durations: the SDK takes and gives milliseconds (numbers); the wire
//     has google.protobuf.Duration strings ("30s", "0.500s");
//   - instants: the SDK takes Date (or epoch ms) and gives Date; the wire
//     has RFC 3339 strings;
//   - 64-bit integers arrive as strings: the SDK gives numbers (counters,
//     generations and job ids stay far below 2^53);
//   - payloads (job args and results, fenced-commit payloads, window
//     results, lease values) are JSON values on both sides, untouched;
//   - enums are short names ("AVAILABLE"); an answer's full name
//     ("JOB_STATE_AVAILABLE") is shortened.
// Records keep the API's field names (snake_case, as in the protos).
import { ENUM_PREFIXES, INT64_FIELDS, TIMESTAMP_FIELDS } from "./gen/fields.js";

/** A duration in ms as the wire's Duration string. */
export function duration(ms: number): string {
  if (!Number.isFinite(ms)) throw new RangeError(`duration ${ms} ms`);
  const s = Math.round(ms) / 1000;
  return Number.isInteger(s) ? `${s}s` : `${s.toFixed(3)}s`;
}

/** An instant (Date or epoch ms) as the wire's Timestamp string. */
export function instant(t: Date | number): string {
  return new Date(t).toISOString();
}

/** Durations of the API (google.protobuf.Duration): decoded to ms. */
export const DURATION_FIELDS: ReadonlySet<string> = new Set([
  "ttl", "expires_in", "held", "renewed_ago", "wait", "delay", "visibility_timeout", "backoff_initial", "backoff_max",
  "catch_up", "complete_within", "starting_deadline", "interval", "oldest_available_age", "overdue", "lease_clock_lag",
  "lease_time", "offset", "offset_error",
]);
/** Instants of the API: decoded to Date (also listed by the OpenAPI document, TIMESTAMP_FIELDS). */
const INSTANT_FIELDS: ReadonlySet<string> = new Set([
  "run_at", "created_at", "updated_at", "finished_at", "started_at", "deadline", "next_due", "expires_at", "acquired_at",
  "renewed_at", "not_before", "paused_at", "deleted_at", "calendar_time", "completed_at", "first_started_at", "last_commit_at",
  "last_materialised", "at", "last_at", "recorded_at", "due", "oldest_available_run_at", "measured_at", "oldest_at",
]);
/** User data: passed through as is, never converted. */
const PAYLOAD_FIELDS: ReadonlySet<string> = new Set(["args", "result", "payload", "value", "labels", "metadata"]);

/** Enum-valued fields (the others are never shortened, whatever they hold). */
const ENUM_FIELDS: ReadonlySet<string> = new Set(["state", "job_state", "job_states", "family", "families", "kind", "outcome",
  "overlap", "dst_policy", "skipped", "skip_reason"]);

const DURATION_RE = /^-?\d+(\.\d+)?s$/;
const INT_RE = /^-?\d+$/;
const TIME_RE = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$/;

/** Decodes an answer (recursively): see the conventions above. */
export function decode(x: any, key = ""): any {
  if (Array.isArray(x)) return x.map((v) => decode(v, key));
  if (x === null || typeof x !== "object") return scalar(x, key);
  const out: Record<string, any> = {};
  for (const [k, v] of Object.entries(x)) {
    if (LEGACY && BYTES_FIELDS.has(k)) out[k] = fromBase64(v);
    else if (LEGACY && k.endsWith("_ms") && typeof v === "string" && INT_RE.test(v)) legacyTime(out, k.slice(0, -3), Number(v));
    else out[k] = PAYLOAD_FIELDS.has(k) ? v : decode(v, k);
  }
  return out;
}

// TEMPORARY: the contract before issue 25 item 2 (`*_ms` integers, base64
// bytes), for running against a node that still speaks it
// (COORDD_LEGACY_WIRE=1). Removed once the new contract is on main.
const LEGACY = process.env.COORDD_LEGACY_WIRE === "1";
const BYTES_FIELDS = new Set(["args", "result", "payload", "value"]);
const fromBase64 = (v: unknown) => {
  if (typeof v !== "string" || v === "") return null;
  const t = Buffer.from(v, "base64").toString("utf8");
  try { return JSON.parse(t); } catch { return t; }
};
function legacyTime(out: Record<string, any>, k: string, ms: number): void {
  if (k === "calendar") k = "calendar_time";
  out[k] = DURATION_FIELDS.has(k) ? ms : new Date(ms);
}

/** The request body as the contract wants it (identity, but for the legacy contract). */
export function encode(x: any, key = ""): any {
  if (!LEGACY) return x;
  if (Array.isArray(x)) return x.map((v) => encode(v, key));
  if (x === null || typeof x !== "object") return x;
  const out: Record<string, any> = {};
  for (const [k, v] of Object.entries(x)) {
    if (v === undefined) continue;
    if (BYTES_FIELDS.has(k)) out[k] = v === null ? undefined : Buffer.from(JSON.stringify(v)).toString("base64");
    else if (DURATION_FIELDS.has(k) && typeof v === "string" && DURATION_RE.test(v)) out[k + "_ms"] = String(Math.round(parseFloat(v) * 1000));
    else if (INSTANT_FIELDS.has(k) && typeof v === "string" && TIME_RE.test(v)) out[k + "_ms"] = String(Date.parse(v));
    else out[k] = encode(v, k);
  }
  return out;
}

function scalar(v: any, key: string): any {
  if (typeof v !== "string") return v;
  if ((DURATION_FIELDS.has(key)) && DURATION_RE.test(v)) return Math.round(parseFloat(v) * 1000);
  if ((INSTANT_FIELDS.has(key) || TIMESTAMP_FIELDS.has(key)) && TIME_RE.test(v)) return new Date(v);
  if (INT64_FIELDS.has(key) && INT_RE.test(v)) return Number(v);
  if (ENUM_FIELDS.has(key)) for (const p of ENUM_PREFIXES) if (v.startsWith(p)) return v.slice(p.length);
  return v;
}

/** A 64-bit integer for a request (a number is accepted; a string keeps precision). */
export function int64(n: number | bigint | string): string {
  return String(n);
}
