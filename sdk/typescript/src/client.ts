import { hostname } from "node:os";
import { CoorddError, LeaseLostError, NotAcquiredError, invalidArgument } from "./errors.js";
import { Lease, now } from "./lease.js";
import { Jobs } from "./jobs.js";
import { Schedules } from "./schedules.js";
import { Worker, type WorkerOptions } from "./worker.js";
import { Transport, pathName, randomID, type TLSFiles } from "./transport.js";
import { decode, duration, req, type Schemas } from "./wire.js";
import type { Commit, CommitOptions, LeaseInfo, Resource, Window } from "./types.js";

export interface ClientOptions {
  /** HTTP(S) base URLs or host:port of the nodes' HTTP API (--http-addr). Default: from the environment (fromEnv). */
  endpoints?: string[];
  /** CA bundle, client certificate and key: PEM text or file paths. */
  tls?: TLSFiles;
  /** Default owner of leases and worker id (default host:pid:random). */
  owner?: string;
  /** Bound of one HTTP attempt (default 5 s). */
  attemptTimeoutMs?: number;
  /** Bound of a call with its retries (default 30 s). */
  callTimeoutMs?: number;
  /**
   * Concurrent jobs.submit calls share one request (group commit, no timer: a call leaves at once
   * while fewer than maxInFlight submit requests are in flight, else joins the next). Default on; false: one request per call.
   */
  coalesce?: boolean | { maxInFlight?: number };
}

export interface AcquireOptions {
  /** Time to live in ms (at least the cluster's minimum, 1 s by default). */
  ttl: number;
  /** Wait while another owner holds it (a lock; waiters in arrival order). */
  wait?: boolean;
  owner?: string;
  /** Calls with the same id get the same grant back (default: random per call). */
  requestId?: string;
  /** A value published on the lease (elections). */
  value?: unknown;
  /** Bound of the acquire with its retries (default 30 s; with wait, 1 h). */
  timeoutMs?: number;
  signal?: AbortSignal;
}

/** The environment coordctl reads, for the HTTP API. */
export function optionsFromEnv(env: NodeJS.ProcessEnv = process.env): ClientOptions {
  const eps = (env.COORD_HTTP_ENDPOINTS || env.COORD_ENDPOINTS || "127.0.0.1:7401").split(",").map((s) => s.trim()).filter(Boolean);
  const tls = env.COORD_TLS_CA ? { ca: env.COORD_TLS_CA, cert: env.COORD_TLS_CERT || undefined, key: env.COORD_TLS_KEY || undefined } : undefined;
  return { endpoints: eps, tls };
}

/** Splits a token "name:generation" at its last colon; a malformed one is INVALID_TOKEN, locally. */
export function parseToken(token: string): { name: string; generation: number } {
  const i = token.lastIndexOf(":");
  const gen = i > 0 ? token.slice(i + 1) : "";
  if (!/^[1-9]\d*$/.test(gen)) {
    throw new CoorddError({ code: "INVALID_ARGUMENT", reason: "INVALID_TOKEN", message: `malformed fencing token ${JSON.stringify(token)}: want "name:generation"`, metadata: { field: "token" } });
  }
  return { name: token.slice(0, i), generation: Number(gen) };
}

export class Client {
  readonly owner: string;
  readonly jobs: Jobs;
  readonly schedules: Schedules;
  /** @internal */
  readonly transport: Transport;

  constructor(o: ClientOptions = {}) {
    const env = o.endpoints ? {} : optionsFromEnv();
    this.transport = new Transport({ endpoints: o.endpoints ?? env.endpoints ?? [], tls: o.tls ?? env.tls,
      attemptTimeoutMs: o.attemptTimeoutMs, callTimeoutMs: o.callTimeoutMs });
    this.owner = o.owner ?? `${hostname()}:${process.pid}:${randomID().slice(0, 8)}`;
    this.jobs = new Jobs(this.transport, o.coalesce ?? true);
    this.schedules = new Schedules(this.transport);
  }

  /** Closes the connections. Held leases stop renewing only when released. */
  close(): void {
    this.transport.close();
  }

  /**
   * Acquires the lease name. Held by another owner: NotAcquiredError
   * (unless wait). Retries after an unknown outcome carry the same request
   * id, so they never make a second grant.
   */
  async acquire(name: string, o: AcquireOptions): Promise<Lease> {
    if (!(o.ttl > 0)) throw invalidArgument("ttl", "must be positive");
    const owner = o.owner ?? this.owner;
    const requestId = o.requestId ?? randomID();
    let sent = now();
    const body = req("CoordinatorAcquireBody", { owner, ttl: duration(o.ttl), request_id: requestId, wait: !!o.wait, value: o.value });
    const r = decode(await this.transport.call("POST", `/v1/leases/${pathName(name)}/acquire`, {
      idempotent: true, body, signal: o.signal,
      // A waiting acquire has no attempt timeout of its own: the node answers 504 at its
      // write timeout, and the retry (same request id) queues it again where it was.
      attemptTimeoutMs: o.wait ? 65000 : undefined,
      callTimeoutMs: o.timeoutMs ?? (o.wait ? 3600_000 : undefined),
      onSend: () => { sent = now(); },
    }));
    if (!r.acquired) {
      const h = r.lease ?? {};
      throw new NotAcquiredError(name, h.owner ?? "", h.generation ?? 0, h.expires_in ?? 0);
    }
    const gen: number = r.lease.generation;
    if (o.wait && now() - sent > o.ttl / 4) {
      // The local deadline is safe only from the send time: after a long
      // wait, renew once so the lease starts with a deadline worth having.
      const rs = now();
      await this.transport.call("POST", `/v1/leases/${pathName(name)}/renew`, {
        idempotent: true, body: req("CoordinatorRenewBody", { owner, generation: String(gen), ttl: duration(o.ttl) }),
      });
      sent = rs;
    }
    return new Lease(this.transport, { fencedCommit: (b, opts) => this.commit(b, opts) }, name, owner, gen, o.ttl, sent);
  }

  /**
   * Runs fn while holding the lease name and releases it afterwards
   * (also when fn throws). fn gets the lease ({generation, token, signal,
   * ...}); `signal` aborts the moment the lease is lost, before the server
   * could grant it to anyone else. Another owner holds it and no wait:
   * NotAcquiredError, fn not run. Lost while fn ran and fn returned:
   * the loss is thrown (a LeaseLostError).
   */
  async withLease<T>(name: string, o: AcquireOptions, fn: (lease: Lease) => Promise<T>): Promise<T> {
    const lease = await this.acquire(name, o);
    let value: T;
    try {
      value = await fn(lease);
    } catch (e) {
      await lease.release().catch(() => {});
      throw e;
    }
    lease.held(); // a deadline passed while fn ran counts, even if its timer has not run
    const lost = lease.lost;
    try {
      await lease.release();
    } catch (e) {
      if (e instanceof LeaseLostError) throw e;
    }
    if (lost) throw lost;
    return value;
  }

  /**
   * A write to resource fenced by token ("name:generation", as a lease's
   * token or a job attempt's "job:<id>:<attempt>"). With an idempotency key
   * a repeat returns the first outcome (duplicate) and the call is retried
   * after an unknown outcome; without one it is not retried once sent.
   */
  fencedCommit(resource: string, token: string, idempotencyKey?: string, payload?: unknown, opts?: CommitOptions): Promise<Commit> {
    parseToken(token);
    return this.commit({ resource, token, idempotency_key: idempotencyKey, payload }, opts);
  }

  /** Would this fenced commit be accepted? Records nothing (a dry run). */
  checkToken(resource: string, token: string, idempotencyKey?: string): Promise<Commit> {
    return this.fencedCommit(resource, token, idempotencyKey, undefined, { dryRun: true });
  }

  private async commit(b: Schemas["v1FencedCommitRequest"], opts: CommitOptions = {}): Promise<Commit> {
    const body = req("v1FencedCommitRequest", { ...b, dry_run: !!opts.dryRun });
    const r = decode(await this.transport.call("POST", "/v1/fence/commit", {
      idempotent: !!opts.dryRun || !!b.idempotency_key, body, signal: opts.signal,
    }));
    return { accepted: !!r.accepted, duplicate: !!r.duplicate, generation: r.generation ?? 0, max_generation: r.max_generation ?? 0,
      payload: r.payload ?? null, lease_name: r.lease_name ?? "", dry_run: !!r.dry_run };
  }

  async getLease(name: string, o: { stale?: boolean } = {}): Promise<LeaseInfo> {
    return decode(await this.transport.call("GET", `/v1/leases/${pathName(name)}`, { idempotent: true, query: { stale: o.stale } })).lease;
  }

  async listLeases(o: { prefix?: string; pageSize?: number; pageToken?: string } = {}): Promise<{ leases: LeaseInfo[]; next_page_token: string }> {
    return decode(await this.transport.call("GET", "/v1/leases", { idempotent: true,
      query: { prefix: o.prefix, page_size: o.pageSize, page_token: o.pageToken } }));
  }

  async getResource(resource: string): Promise<Resource> {
    return decode(await this.transport.call("GET", `/v1/resources/${pathName(resource)}`, { idempotent: true })).resource;
  }

  async getWindow(job: string, window: string): Promise<Window> {
    return decode(await this.transport.call("GET", `/v1/windows/${pathName(job)}/${encodeURIComponent(window)}`, { idempotent: true })).window;
  }

  /** A queue worker (see Worker). */
  worker(o: WorkerOptions = {}): Worker {
    return new Worker(this.transport, (b, opts) => this.commit(b, opts), { ...o, id: o.id ?? this.owner });
  }
}
