// The job queue (coord.v1.Queue over HTTP): submit, look up, cancel, retry.
import { invalidArgument } from "./errors.js";
import { Coalescer, type CoalescerOptions } from "./coalesce.js";
import { randomID, type Transport } from "./transport.js";
import { decode, duration, instant, req, type Schemas } from "./wire.js";
import type { QueueJob, SubmittedJob } from "./types.js";
import { activeTraceparent, loadOtel } from "./tracing.js";

export interface JobOptions {
  /** Queue name (default "default"). */
  queue?: string;
  /** Run at this instant (Date or epoch ms), on the cluster's calendar clock. */
  runAt?: Date | number;
  /** Run after this many ms. (Neither runAt nor after: now.) */
  after?: number;
  /** Idempotent submit: a second submit with the key returns the first job (duplicate). Default: a generated key ("auto:..."), for the call's retries. */
  uniqueKey?: string;
  priority?: number;
  maxAttempts?: number;
  /** How long an attempt lives without a heartbeat, ms (default 30 s). */
  visibilityTimeout?: number;
  /** Each attempt ends at its start + maxRun, ms, heartbeats or not (default: the queue's max_run, else none). */
  maxRun?: number;
  backoff?: { initial?: number; max?: number; factor?: number };
  labels?: Record<string, string>;
  /** Deliver the job's attempts to this HTTP endpoint instead of a pull worker (docs/delivery.md; the endpoint's side: deliveryHandler). */
  target?: Target;
  /**
   * The job's W3C trace context (docs/tracing.md), which its attempts continue. Default: the active span's when
   * @opentelemetry/api is installed, else none. Malformed: the submit is refused (INVALID_ARGUMENT naming the field).
   */
  traceparent?: string;
  tracestate?: string;
}

/** An HTTP target (docs/delivery.md, "A target"). */
export interface Target {
  /** Absolute http(s) URL on the servers' --delivery-allow list. */
  url: string;
  /** POST by default; PUT, PATCH, GET, DELETE. */
  method?: string;
  /** Extra request headers (up to 16; coordd's own are refused). */
  headers?: Record<string, string>;
  /** One request's bound, ms (default the job's visibility timeout). */
  timeout?: number;
  /** 4xx statuses that also fail an attempt retryably (429 and 5xx always do). */
  retryableStatus?: number[];
  /** The name of a --delivery-secrets entry (empty: unsigned). */
  secret?: string;
}

/** A submit's own options besides the job's. */
export interface SubmitOptions extends JobOptions {
  /** Ends this call's wait (CANCELLED; outcome unknown once its request was sent), not a request it shares with others. */
  signal?: AbortSignal;
}

export interface NewJob extends JobOptions {
  kind: string;
  /** Any JSON value. */
  args?: unknown;
}

/** The prefix of the unique keys generated for jobs submitted without one. */
export const AUTO_KEY_PREFIX = "auto:";

/** The wire form of a job to submit. */
export function newJobBody(j: NewJob): Schemas["v1NewJob"] {
  if (!j.kind) throw invalidArgument("kind", "required");
  if (j.runAt !== undefined && j.after !== undefined) throw invalidArgument("run_at", "give runAt or after, not both");
  return {
    queue: j.queue, kind: j.kind, args: j.args,
    run_at: j.runAt === undefined ? undefined : instant(j.runAt),
    delay: j.after === undefined ? undefined : duration(j.after),
    unique_key: j.uniqueKey || AUTO_KEY_PREFIX + randomID(),
    priority: j.priority, max_attempts: j.maxAttempts,
    visibility_timeout: j.visibilityTimeout === undefined ? undefined : duration(j.visibilityTimeout),
    max_run: j.maxRun === undefined ? undefined : duration(j.maxRun),
    backoff_initial: j.backoff?.initial === undefined ? undefined : duration(j.backoff.initial),
    backoff_max: j.backoff?.max === undefined ? undefined : duration(j.backoff.max),
    backoff_factor: j.backoff?.factor,
    labels: j.labels,
    traceparent: j.traceparent, tracestate: j.tracestate,
    target: j.target && { url: j.target.url, method: j.target.method, headers: j.target.headers, secret: j.target.secret,
      timeout: j.target.timeout === undefined ? undefined : duration(j.target.timeout), retryable_status: j.target.retryableStatus },
  };
}

export class Jobs {
  /** Concurrent submits of this client, coalesced (undefined: off). */
  private readonly submits?: Coalescer<Schemas["v1NewJob"], SubmittedJob>;

  /** coalesce: concurrent submit calls share requests (default on; false: one request per call). */
  constructor(private readonly t: Transport, coalesce: boolean | CoalescerOptions = true) {
    if (coalesce !== false) {
      this.submits = new Coalescer(async (jobs) => {
        const r = decode(await this.t.call("POST", "/v1/queue/jobs", { idempotent: true, body: req("v1QueueSubmitRequest", { jobs }) }));
        return (r.jobs ?? []).map((j: SubmittedJob) => ({ ok: j }));
      }, coalesce === true ? {} : coalesce);
    }
  }

  /**
   * Submits one job: now, at runAt, or after a delay. Safe to retry (a unique key, generated if absent).
   * Concurrent calls of one client share one request (ClientOptions.coalesce), each with its own answer or error.
   */
  async submit(kind: string, args?: unknown, o: SubmitOptions = {}): Promise<SubmittedJob> {
    const { signal, ...opts } = o;
    let j: NewJob = { ...opts, kind, args };
    if (!this.submits) return (await this.submitBatch([j], { signal }))[0];
    if (!j.traceparent && !j.tracestate) {
      const active = activeTraceparent(await loadOtel()); // the caller's context, before the wait
      if (active) j = { ...j, ...active };
    }
    const body = newJobBody(j);
    return this.submits.add(body, jsonSize(body), signal);
  }

  /** Submits up to 1,000 jobs in one call: all or nothing (a bad one refuses the call, metadata.index says which). */
  async submitBatch(jobs: NewJob[], o: { signal?: AbortSignal } = {}): Promise<SubmittedJob[]> {
    if (jobs.length === 0) return [];
    const active = activeTraceparent(await loadOtel());
    if (active) jobs = jobs.map((j) => (j.traceparent || j.tracestate ? j : { ...j, ...active }));
    const r = decode(await this.t.call("POST", "/v1/queue/jobs", { idempotent: true, signal: o.signal,
      body: req("v1QueueSubmitRequest", { jobs: jobs.map(newJobBody) }) }));
    return r.jobs ?? [];
  }

  async get(id: number): Promise<QueueJob> {
    return decode(await this.t.call("GET", `/v1/queue/jobs/${id}`, { idempotent: true })).job;
  }

  async list(o: { queue?: string; state?: string; kind?: string; label?: string; pageSize?: number; pageToken?: string } = {}):
    Promise<{ jobs: QueueJob[]; next_page_token: string }> {
    const r = decode(await this.t.call("GET", "/v1/queue/jobs", { idempotent: true,
      query: { queue: o.queue, state: o.state, kind: o.kind, label: o.label, page_size: o.pageSize, page_token: o.pageToken } }));
    return { jobs: r.jobs ?? [], next_page_token: r.next_page_token ?? "" };
  }

  /** Cancels a job (idempotent: a repeat returns it unchanged, duplicate). */
  async cancel(id: number): Promise<{ job: QueueJob; duplicate: boolean }> {
    const r = decode(await this.t.call("POST", `/v1/queue/jobs/${id}/cancel`, { idempotent: true, body: req("QueueCancelBody", {}) }));
    return { job: r.job, duplicate: !!r.duplicate };
  }

  /**
   * Makes a dead or cancelled job available again. Not retried once sent:
   * after an unknown outcome (err.outcomeUnknown) look the job up first.
   */
  async retry(id: number): Promise<{ job: QueueJob; duplicate: boolean }> {
    const r = decode(await this.t.call("POST", `/v1/queue/jobs/${id}/retry`, { idempotent: false, body: req("QueueRetryBody", {}) }));
    return { job: r.job, duplicate: !!r.duplicate };
  }

  async stats(queue?: string): Promise<any[]> {
    return decode(await this.t.call("GET", "/v1/queue/stats", { idempotent: true, query: { queue } })).queues ?? [];
  }
}

/** About a value's size on the wire (UTF-16 units of its JSON; at most 3 bytes each). */
function jsonSize(v: unknown): number {
  return JSON.stringify(v)?.length ?? 0;
}
