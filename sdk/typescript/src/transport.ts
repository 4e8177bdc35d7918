// The HTTP transport: node:http / node:https with keep-alive agents (the
// built-in fetch cannot present a client certificate without the undici
// package, and one code path for both is simpler), leader routing and the
// retry policy of the Go SDK (client/DESIGN.md, "invoke classifies each
// failed attempt"), mapped onto HTTP answers.
import * as http from "node:http";
import * as https from "node:https";
import { readFileSync } from "node:fs";
import { randomBytes } from "node:crypto";
import { CoorddError, type ErrorBody } from "./errors.js";

export interface TLSFiles {
  /** CA bundle (PEM) that signed the nodes' certificates; turns HTTPS on. */
  ca?: string | Buffer;
  /** Client certificate (PEM) and its key, for mutual TLS. */
  cert?: string | Buffer;
  key?: string | Buffer;
}

export interface TransportOptions {
  /** HTTP(S) base URLs or host:port of the nodes' --http-addr. */
  endpoints: string[];
  tls?: TLSFiles;
  /** Bound of one attempt (default 5 s). */
  attemptTimeoutMs?: number;
  /** Bound of a call with its retries (default 30 s). */
  callTimeoutMs?: number;
}

export interface CallOptions {
  /** A repeat cannot apply twice: retried after an unknown outcome. */
  idempotent: boolean;
  query?: Record<string, string | number | boolean | string[] | undefined>;
  body?: unknown;
  /** Overrides the attempt timeout (a long poll adds its wait). */
  attemptTimeoutMs?: number;
  /** Overrides the call timeout. */
  callTimeoutMs?: number;
  signal?: AbortSignal;
  /** Called just before each attempt is sent (the lease's send time). */
  onSend?: () => void;
}

/** Nothing was sent: the connection was never made. */
const NOT_SENT = new Set(["ECONNREFUSED", "ENOTFOUND", "EHOSTUNREACH", "ENETUNREACH", "EADDRNOTAVAIL", "EAI_AGAIN"]);
/** Refused before doing anything: another node (or later) may serve it. */
const RETRY_REASONS = new Set(["NOT_LEADER", "NO_LEADER", "SHUTTING_DOWN"]);
/** May have been applied. */
const UNKNOWN_REASONS = new Set(["LEADERSHIP_LOST", "TIMEOUT"]);

type Outcome =
  | { kind: "ok"; value: any }
  | { kind: "final"; err: CoorddError }
  | { kind: "retry"; err: CoorddError; refused?: boolean }
  | { kind: "unknown"; err: CoorddError };

export function normalizeEndpoint(ep: string, tls: boolean): string {
  ep = ep.trim().replace(/\/+$/, "");
  if (/^https?:\/\//.test(ep)) return ep;
  return (tls ? "https://" : "http://") + ep;
}

function readPEM(v: string | Buffer | undefined): string | Buffer | undefined {
  if (v === undefined || Buffer.isBuffer(v) || v.includes("-----BEGIN")) return v;
  return readFileSync(v);
}

export class Transport {
  readonly endpoints: string[];
  private readonly agent: http.Agent;
  private readonly attemptTimeoutMs: number;
  private readonly callTimeoutMs: number;
  private current = 0;
  private known = false;
  private locating: Promise<void> | null = null;
  private closed = false;
  private located = false;

  constructor(o: TransportOptions) {
    const tls = o.tls?.ca !== undefined || o.endpoints.some((e) => e.startsWith("https://"));
    if (o.endpoints.length === 0) throw new CoorddError({ code: "INVALID_ARGUMENT", reason: "INVALID_ARGUMENT", message: "no endpoints" });
    this.endpoints = o.endpoints.map((e) => normalizeEndpoint(e, tls));
    this.agent = tls
      ? new https.Agent({ keepAlive: true, maxSockets: 256, ca: readPEM(o.tls?.ca), cert: readPEM(o.tls?.cert), key: readPEM(o.tls?.key) })
      : new http.Agent({ keepAlive: true, maxSockets: 256 });
    this.attemptTimeoutMs = o.attemptTimeoutMs ?? 5000;
    this.callTimeoutMs = o.callTimeoutMs ?? 30000;
  }

  close(): void {
    this.closed = true;
    this.agent.destroy();
  }

  /** The endpoint calls go to now (the leader when known). */
  endpoint(): string {
    return this.endpoints[this.current];
  }

  /**
   * A streaming GET of one node (the watch: one JSON object a line): onLine
   * gets each line as it comes; resolves when the stream ends (or signal
   * aborts), rejects on a transport error or a status other than 200.
   */
  stream(ep: string, path: string, onLine: (line: string) => void, signal: AbortSignal): Promise<void> {
    return new Promise((resolve, reject) => {
      const url = new URL(ep + path);
      const mod = url.protocol === "https:" ? https : http;
      const req = mod.request(url, { method: "GET", agent: this.agent, headers: { accept: "application/json" } }, (res) => {
        if (res.statusCode !== 200) {
          res.resume();
          reject(new Error(`watch answered ${res.statusCode}`));
          return;
        }
        let buf = "";
        res.setEncoding("utf8");
        res.on("data", (c: string) => {
          buf += c;
          for (let i = buf.indexOf("\n"); i >= 0; i = buf.indexOf("\n")) {
            const line = buf.slice(0, i).trim();
            buf = buf.slice(i + 1);
            if (line) onLine(line);
          }
        });
        res.on("end", () => { signal.removeEventListener("abort", onAbort); resolve(); });
        res.on("error", (e) => { signal.removeEventListener("abort", onAbort); signal.aborted ? resolve() : reject(e); });
      });
      const onAbort = () => req.destroy();
      signal.addEventListener("abort", onAbort);
      req.on("error", (e) => { signal.removeEventListener("abort", onAbort); signal.aborted ? resolve() : reject(e); });
      req.end();
    });
  }

  /** One HTTP exchange with one node. Rejects with a transport error (code, sent). */
  send(ep: string, method: string, path: string, body: string | undefined, timeoutMs: number,
    signal?: AbortSignal): Promise<{ status: number; text: string }> {
    return new Promise((resolve, reject) => {
      const url = new URL(ep + path);
      const mod = url.protocol === "https:" ? https : http;
      let sent = false;
      const req = mod.request(url, {
        method, agent: this.agent, timeout: timeoutMs,
        headers: body === undefined ? { accept: "application/json" }
          : { "content-type": "application/json", "content-length": Buffer.byteLength(body), accept: "application/json" },
      }, (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () => {
          clearTimeout(timer);
          signal?.removeEventListener("abort", onAbort);
          resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString("utf8") });
        });
        res.on("error", fail);
      });
      const fail = (err: any) => {
        clearTimeout(timer);
        signal?.removeEventListener("abort", onAbort);
        err.sent = sent && !NOT_SENT.has(err.code);
        reject(err);
      };
      const onAbort = () => req.destroy(Object.assign(new Error("aborted"), { code: "ABORTED" }));
      // The socket timeout only sees idleness; this bounds the whole exchange.
      const timer = setTimeout(() => req.destroy(Object.assign(new Error(`no answer within ${timeoutMs} ms`), { code: "ATTEMPT_TIMEOUT" })), timeoutMs);
      req.on("timeout", () => req.destroy(Object.assign(new Error(`no answer within ${timeoutMs} ms`), { code: "ATTEMPT_TIMEOUT" })));
      req.on("error", fail);
      req.on("socket", (s) => {
        if (!(s as any).connecting) sent = true; // a kept-alive connection
        else s.once(url.protocol === "https:" ? "secureConnect" : "connect", () => { sent = true; });
      });
      if (signal?.aborted) return onAbort();
      signal?.addEventListener("abort", onAbort, { once: true });
      req.end(body);
    });
  }

  /** Asks every node's /v1/cluster/status who leads; moves to the one that says it does. */
  locate(): Promise<void> {
    if (this.locating) return this.locating;
    this.located = true;
    this.locating = new Promise<void>((resolve) => {
      let pending = this.endpoints.length;
      const done = () => { this.locating = null; resolve(); };
      const timer = setTimeout(done, 500);
      this.endpoints.forEach((ep, i) => {
        this.send(ep, "GET", "/v1/cluster/status", undefined, 500).then(({ status, text }) => {
          if (status === 200 && JSON.parse(text).state === "Leader") {
            this.current = i;
            this.known = true;
            clearTimeout(timer);
            done();
          }
        }).catch(() => {}).finally(() => {
          if (--pending === 0) { clearTimeout(timer); done(); }
        });
      });
    });
    return this.locating;
  }

  private failed(ep: string): void {
    if (this.endpoints[this.current] !== ep) return; // someone moved on already
    this.known = false;
    this.current = (this.current + 1) % this.endpoints.length;
  }

  /** A call with the retry policy; resolves to the decoded JSON answer. */
  async call(method: string, path: string, o: CallOptions): Promise<any> {
    const deadline = Date.now() + (o.callTimeoutMs ?? this.callTimeoutMs);
    const body = o.body === undefined ? undefined : JSON.stringify(o.body);
    const qs = query(o.query);
    let delay = 50;
    let refusedInARow = 0;
    let unknown = false;
    let last: CoorddError | undefined;
    for (let attempt = 0; ; attempt++) {
      if (this.closed) throw new CoorddError({ code: "CANCELLED", reason: "TRANSPORT", message: "client closed" });
      // Find the leader at the first call and after a failure: a follower would forward (one more hop).
      if (!this.known && (attempt > 0 || !this.located)) await this.locate();
      const ep = this.endpoints[this.current];
      const left = deadline - Date.now();
      const out = await this.attempt(ep, method, path + qs, body, Math.max(1, Math.min(o.attemptTimeoutMs ?? this.attemptTimeoutMs, left)), o);
      if (out.kind === "ok") return out.value;
      if (out.kind === "final") throw unknown && o.idempotent ? out.err.asUnknown() : out.err;
      last = out.err;
      this.failed(ep);
      if (out.kind === "unknown") {
        unknown = true;
        if (!o.idempotent) throw out.err.asUnknown();
      }
      refusedInARow = out.kind === "retry" && out.refused ? refusedInARow + 1 : 0;
      if (o.signal?.aborted || Date.now() >= deadline) break;
      // At once to another node after a refused connection, until all refused.
      if (!(out.kind === "retry" && out.refused && refusedInARow < this.endpoints.length)) {
        await sleep(Math.min(delay * (0.75 + Math.random() / 2), deadline - Date.now()), o.signal);
        delay = Math.min(delay * 2, 1000);
      }
      if (o.signal?.aborted || Date.now() >= deadline) break;
    }
    const err = last ?? new CoorddError({ code: "DEADLINE_EXCEEDED", reason: "TIMEOUT", message: "no attempt" });
    throw unknown ? err.asUnknown() : err;
  }

  private async attempt(ep: string, method: string, path: string, body: string | undefined, timeoutMs: number, o: CallOptions): Promise<Outcome> {
    o.onSend?.();
    let res: { status: number; text: string };
    try {
      res = await this.send(ep, method, path, body, timeoutMs, o.signal);
    } catch (e: any) {
      const err = new CoorddError({ code: e.code === "ATTEMPT_TIMEOUT" ? "DEADLINE_EXCEEDED" : e.code === "ABORTED" ? "CANCELLED" : "UNAVAILABLE",
        reason: "TRANSPORT", message: `${method} ${ep}${path}: ${e.message}`, cause: e });
      if (tlsFailure(e)) {
        return { kind: "final", err: new CoorddError({ code: "UNAUTHENTICATED", reason: "UNAUTHENTICATED", message: err.message, cause: e }) };
      }
      if (!e.sent) return { kind: e.code === "ABORTED" ? "final" : "retry", err, refused: true };
      return { kind: e.code === "ABORTED" ? "final" : "unknown", err: e.code === "ABORTED" ? err.asUnknown() : err };
    }
    let parsed: any;
    try {
      parsed = res.text === "" ? {} : JSON.parse(res.text);
    } catch {
      const err = new CoorddError({ code: "UNKNOWN", reason: "TRANSPORT", status: res.status,
        message: `${method} ${ep}${path}: HTTP ${res.status}, not JSON: ${res.text.slice(0, 200)}` });
      return res.status >= 500 ? { kind: "unknown", err } : { kind: "final", err };
    }
    if (res.status >= 200 && res.status < 300) return { kind: "ok", value: parsed };
    const b = parsed as ErrorBody;
    const err = new CoorddError({ ...b, status: res.status, outcomeUnknown: false });
    if (RETRY_REASONS.has(err.reason)) return { kind: "retry", err };
    if (UNKNOWN_REASONS.has(err.reason) || res.status === 504 || err.code === "DEADLINE_EXCEEDED" ||
      (err.code === "UNAVAILABLE" && err.reason !== "UNAUTHENTICATED")) {
      return { kind: "unknown", err };
    }
    return { kind: "final", err };
  }
}

function tlsFailure(e: any): boolean {
  const c = String(e?.code ?? "");
  // Node's and OpenSSL's codes: ERR_TLS_*, ERR_SSL_*, UNABLE_TO_VERIFY_LEAF_SIGNATURE, SELF_SIGNED_CERT_IN_CHAIN, ...
  return /TLS|SSL|CERT|SIGNATURE|ISSUER/.test(c) || /alert (bad|unknown|handshake)|certificate required/i.test(String(e?.message));
}

function query(q: CallOptions["query"]): string {
  if (!q) return "";
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(q)) {
    if (v === undefined || v === "" || v === false) continue;
    for (const x of Array.isArray(v) ? v : [v]) p.append(k, String(x));
  }
  const s = p.toString();
  return s ? "?" + s : "";
}

/** encodeURIComponent per segment, keeping the slashes names may contain. */
export function pathName(name: string): string {
  return name.split("/").map(encodeURIComponent).join("/");
}

export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (ms <= 0 || signal?.aborted) return resolve();
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });
}

/** A random id (request ids, generated unique keys, owners). */
export function randomID(): string {
  return randomBytes(12).toString("hex");
}
