// The queue Worker (after client/queue's): per queue one long-poll fetch
// asks for as many jobs as there are free slots; each attempt is a claim
// with a fencing token, heartbeaten at a third of its visibility timeout
// (due heartbeats leave together, in one batch), and a local deadline from
// the send time of the fetch or of the last acknowledged heartbeat that
// aborts the handler's signal before the server could hand the job to
// another worker. A handler's value completes the job (its result); a
// throw fails the attempt (retryable unless permanent()).
import { CoorddError, isReason } from "./errors.js";
import { marginFor, now } from "./lease.js";
import { sleep, type Transport } from "./transport.js";
import { Coalescer, type CoalescerOptions, type ItemResult } from "./coalesce.js";
import { decode, duration, req, type Schemas } from "./wire.js";
import { endAttempt, loadOtel, startAttempt, type AttemptTrace } from "./tracing.js";
import type { Commit, CommitOptions, QueueJob } from "./types.js";

export interface WorkerOptions {
  /** Worker id its attempts are recorded with (default: the client's owner). */
  id?: string;
  /** Queues and the concurrency of each (default {default: 10}). */
  queues?: Record<string, number>;
  /** How long a fetch waits for a job when none is due, ms (default 5 s, at most 30 s). */
  pollWaitMs?: number;
  /** How long stop() lets running handlers finish before handing them back (default 30 s). */
  shutdownTimeoutMs?: number;
  /** Called with errors of the worker's own calls, and an outcome the server refused for one job (default: ignored). */
  onError?: (err: unknown) => void;
  /**
   * Completions and failures of concurrent handlers share one request each (group commit, no timer: an outcome
   * leaves at once while fewer than maxInFlight such requests are in flight, else joins the next). Default on;
   * false: one request per outcome.
   */
  coalesce?: boolean | CoalescerOptions;
}

/** A fetched job with its attempt. */
export interface Job extends QueueJob {
  /** This attempt's number (1 for the first). */
  attempt: number;
}

export interface JobContext {
  /** The attempt's fencing token, "job:<id>:<attempt>". */
  token: string;
  /** Aborted when the claim is lost (heartbeat refused, cancelled, local deadline) or at a stop that gave up waiting. */
  signal: AbortSignal;
  /** A write fenced by this attempt's token; a refusal saying the attempt is over also aborts `signal`. */
  fencedCommit(resource: string, idempotencyKey?: string, payload?: unknown, opts?: CommitOptions): Promise<Commit>;
}

/** A handler resolves to the job's result (a JSON value, or undefined) or throws to fail the attempt. */
export type Handler = (job: Job, ctx: JobContext) => Promise<unknown>;

/** Marks an error as not worth retrying: the job is dead at once. */
export function permanent(err: unknown): Error {
  const e = err instanceof Error ? err : new Error(String(err));
  (e as any).coorddPermanent = true;
  return e;
}

/** Refusals that say a job attempt is over: its token fences nothing live any more. */
export const ATTEMPT_OVER = ["ATTEMPT_LOST", "ATTEMPT_EXPIRED", "JOB_CANCELLED", "JOB_NOT_FOUND", "JOB_FINISHED", "STALE_TOKEN"];
const MAX_ERROR_TEXT = 4096;
const DEFAULT_VISIBILITY_MS = 30000;

type CommitFn = (body: Schemas["v1FencedCommitRequest"], opts?: CommitOptions) => Promise<Commit>;

class Claim {
  readonly ac = new AbortController();
  deadlineAt: number;
  deadlineTimer?: NodeJS.Timeout;
  hbTimer?: NodeJS.Timeout;
  state: "running" | "reporting" | "over" = "running";
  /** max_run: the local deadline never passes sent + max_run - its margin (the server ends the attempt then, heartbeats or not). */
  readonly runEnd?: number;
  /** The attempt's span (when OpenTelemetry records it), sent with the outcome. */
  traceparent?: string;
  constructor(readonly job: Job, readonly vt: number, sent: number, runUntil?: Date, startedAt?: Date) {
    this.deadlineAt = sent + vt - marginFor(vt);
    if (runUntil instanceof Date && startedAt instanceof Date) {
      const mr = runUntil.getTime() - startedAt.getTime();
      this.runEnd = sent + mr - marginFor(mr);
      this.deadlineAt = Math.min(this.deadlineAt, this.runEnd);
    }
  }
  bounded(at: number): number {
    return this.runEnd === undefined ? at : Math.min(at, this.runEnd);
  }
  get token(): string {
    return `job:${this.job.id}:${this.job.attempt}`;
  }
}

export class Worker {
  readonly id: string;
  private readonly queues: Record<string, number>;
  private readonly pollWait: number;
  private readonly shutdownTimeout: number;
  private readonly onError: (err: unknown) => void;
  private readonly handlers = new Map<string, Handler>();
  private readonly claims = new Set<Claim>();
  private readonly running = new Set<Promise<void>>();
  private readonly outcomes = new Set<Promise<void>>();
  private readonly free = new Map<string, number>();
  private readonly wake = new Map<string, () => void>();
  private readonly fetchAC = new AbortController();
  private hbDue = new Set<Claim>();
  private hbFlush?: NodeJS.Timeout;
  private loops: Promise<void>[] = [];
  private readonly completions: Coalescer<Schemas["v1JobCompletion"], any>;
  private readonly failures: Coalescer<Schemas["v1JobFailure"], any>;
  private started = false;
  private stopping = false;

  constructor(private readonly t: Transport, private readonly commit: CommitFn, o: WorkerOptions & { id: string }) {
    this.id = o.id;
    this.queues = o.queues ?? { default: 10 };
    this.pollWait = Math.min(o.pollWaitMs ?? 5000, 30000);
    this.shutdownTimeout = o.shutdownTimeoutMs ?? 30000;
    this.onError = o.onError ?? (() => {});
    const co: CoalescerOptions = o.coalesce === false ? { maxInFlight: Infinity, maxItems: 1 } : o.coalesce === true || !o.coalesce ? {} : o.coalesce;
    this.completions = new Coalescer(async (completions) => itemResults(decode(await this.t.call("POST", "/v1/queue/complete", {
      idempotent: true, body: req("v1QueueCompleteRequest", { worker_id: this.id, completions }) })).results), co);
    this.failures = new Coalescer(async (failures) => itemResults(decode(await this.t.call("POST", "/v1/queue/fail", {
      idempotent: true, body: req("v1QueueFailRequest", { worker_id: this.id, failures }) })).results), co);
  }

  /** HTTP requests the worker's completions and failures took. @internal */
  get outcomeRequests(): { complete: number; fail: number } {
    return { complete: this.completions.requests, fail: this.failures.requests };
  }

  /** Registers the handler of a kind (replacing an earlier one). */
  handle(kind: string, h: Handler): this {
    this.handlers.set(kind, h);
    return this;
  }

  /** Starts fetching and running jobs in the background. */
  start(): this {
    if (this.started) throw new Error("coordd: worker already started");
    this.started = true;
    for (const [q, n] of Object.entries(this.queues)) {
      if (!q || !(n >= 1)) throw new CoorddError({ code: "INVALID_ARGUMENT", reason: "INVALID_ARGUMENT", message: `queue "${q}" with concurrency ${n}` });
      this.free.set(q, n);
      this.loops.push(this.fetchLoop(q), this.watchCancels(q));
    }
    return this;
  }

  /**
   * Stops gracefully: no more fetches (one in flight is cancelled), running
   * handlers may finish for up to timeoutMs, then the attempts still
   * running are handed back (their signals aborted, each failed retryable
   * with "worker shutdown", so the job is due again after its backoff).
   * Resolves to the number of attempts handed back.
   */
  async stop(o: { timeoutMs?: number } = {}): Promise<number> {
    if (this.stopping) return 0;
    this.stopping = true;
    this.fetchAC.abort();
    for (const w of this.wake.values()) w();
    await Promise.all(this.loops);
    let handedBack = 0;
    const finished = Promise.all([...this.running]).then(() => true);
    const timeout = new Promise<boolean>((r) => setTimeout(() => r(false), o.timeoutMs ?? this.shutdownTimeout).unref());
    if (!(await Promise.race([finished, timeout]))) {
      for (const cl of [...this.claims]) {
        if (cl.state !== "running") continue;
        handedBack++;
        this.handBack(cl);
      }
    }
    await Promise.all([...this.outcomes]);
    for (const cl of [...this.claims]) this.over(cl, shutdownError("worker stopped"));
    clearTimeout(this.hbFlush);
    return handedBack;
  }

  private async fetchLoop(queue: string): Promise<void> {
    let delay = 100;
    while (!this.stopping) {
      const n = this.free.get(queue)!;
      if (n <= 0) {
        await new Promise<void>((r) => this.wake.set(queue, r));
        continue;
      }
      let sent = now();
      let r: any;
      try {
        r = decode(await this.t.call("POST", "/v1/queue/fetch", {
          idempotent: false, signal: this.fetchAC.signal,
          body: req("v1QueueFetchRequest", { queues: [queue], max: Math.min(n, 1000), wait: duration(this.pollWait), worker_id: this.id }),
          attemptTimeoutMs: this.pollWait + 5000, callTimeoutMs: this.pollWait + 10000,
          onSend: () => { sent = now(); },
        }));
      } catch (e) {
        if (this.stopping) return;
        this.onError(e);
        await sleep(delay * (0.75 + Math.random() / 2), this.fetchAC.signal);
        delay = Math.min(delay * 2, 5000);
        continue;
      }
      delay = 100;
      for (const cj of r.jobs ?? []) {
        const job: Job = { ...cj.job, attempt: cj.attempt?.number };
        const cl = new Claim(job, job.visibility_timeout || DEFAULT_VISIBILITY_MS, sent, cj.attempt?.run_until as any, cj.attempt?.started_at as any);
        this.free.set(queue, this.free.get(queue)! - 1);
        this.register(cl, sent);
        if (this.stopping) {
          this.handBack(cl); // granted as stop began
          continue;
        }
        if (now() - sent > cl.vt / 4) {
          // After a long poll the send time is long ago: heartbeat before starting.
          this.heartbeatNow(cl);
          void this.outcome(this.startAfterHeartbeat(cl, queue));
        } else {
          this.run(cl, queue);
        }
      }
    }
  }

  /**
   * Holds one watch (GET /v1/watch, JSON lines) on the queue's jobs cancelled
   * during an attempt handed to this worker (filtered by the server:
   * job_states CANCELLED, job_worker_id) and ends those claims at once, so a
   * cancel reaches the handler within about a second instead of at its next
   * heartbeat. A broken stream resumes where it stopped, on the next node;
   * the heartbeats still end what it misses.
   */
  private async watchCancels(queue: string): Promise<void> {
    let resume: [string, string] | undefined;
    let i = 0;
    while (!this.stopping) {
      const q = new URLSearchParams({ prefix: `${queue}/`, families: "WATCH_FAMILY_QUEUE_JOB", job_states: "JOB_STATE_CANCELLED", job_worker_id: this.id });
      if (resume) { q.set("start_index", resume[0]); q.set("start_position", resume[1]); }
      const ep = this.t.endpoints[i++ % this.t.endpoints.length];
      try {
        await this.t.stream(ep, `/v1/watch?${q}`, (line) => {
          const res = JSON.parse(line).result;
          if (!res) return;
          if (res.resume_index !== undefined) resume = [String(res.resume_index), String(res.resume_position ?? 0)];
          for (const e of res.events ?? []) this.cancelled(queue, e.queue_job);
        }, this.fetchAC.signal);
      } catch (e) {
        if (this.stopping) return;
        this.onError(e);
      }
      if (!this.stopping) await sleep(200, this.fetchAC.signal);
    }
  }

  private cancelled(queue: string, j: any): void {
    const short = (v: unknown, p: string) => String(v ?? "").replace(p, "");
    const a = j?.attempt_log?.at(-1);
    if (j?.queue !== queue || short(j.state, "JOB_STATE_") !== "CANCELLED" || !a) return;
    if (a.worker_id !== this.id || short(a.outcome, "ATTEMPT_OUTCOME_") !== "CANCELLED") return;
    for (const cl of this.claims) {
      if (String(cl.job.id) === String(j.id) && cl.job.attempt === a.number && cl.state === "running") {
        this.over(cl, new CoorddError({ code: "FAILED_PRECONDITION", reason: "JOB_CANCELLED",
          message: `job ${j.id} attempt ${a.number} was cancelled: ${a.error ?? ""}` }));
      }
    }
  }

  private register(cl: Claim, sent: number): void {
    this.claims.add(cl);
    this.armDeadline(cl);
    this.scheduleHeartbeat(cl, sent);
  }

  private async startAfterHeartbeat(cl: Claim, queue: string): Promise<void> {
    await this.flushHeartbeats();
    if (cl.state === "running" && !cl.ac.signal.aborted) this.run(cl, queue);
    else this.release(queue);
  }

  private release(queue: string): void {
    this.free.set(queue, this.free.get(queue)! + 1);
    this.wake.get(queue)?.();
    this.wake.delete(queue);
  }

  private run(cl: Claim, queue: string): void {
    const ctx: JobContext = {
      token: cl.token, signal: cl.ac.signal,
      fencedCommit: async (resource, key, payload, opts) => {
        try {
          return await this.commit({ resource, token: cl.token, idempotency_key: key, payload }, opts);
        } catch (e) {
          if (isReason(e, ...ATTEMPT_OVER)) this.over(cl, claimLost(`fenced commit refused: ${(e as Error).message}`, e));
          throw e;
        }
      },
    };
    const p = (async () => {
      let result: unknown, err: unknown, failed = false;
      const h = this.handlers.get(cl.job.kind);
      // With @opentelemetry/api installed: the attempt's span, the child of the job's trace context (src/tracing.ts).
      const otel = await loadOtel();
      const tr: AttemptTrace | undefined = startAttempt(otel, cl.job, this.id, cl.token);
      cl.traceparent = tr?.traceparent;
      try {
        if (!h) throw new Error(`no handler for kind "${cl.job.kind}" on worker ${this.id}`);
        result = await (tr ? otel.context.with(tr.context, () => h(cl.job, ctx)) : h(cl.job, ctx));
      } catch (e) {
        failed = true;
        err = e;
      }
      endAttempt(otel, tr, failed ? err : undefined);
      this.release(queue);
      if (cl.state !== "running" || !this.checkDeadline(cl)) return; // lost or handed back: the outcome is dropped
      cl.state = "reporting";
      void this.outcome(failed ? this.fail(cl, errorText(err), !(err as any)?.coorddPermanent) : this.complete(cl, result));
    })();
    this.running.add(p);
    void p.finally(() => this.running.delete(p));
  }

  private outcome(p: Promise<void>): Promise<void> {
    const q = p.catch((e) => this.onError(e));
    this.outcomes.add(q);
    void q.finally(() => this.outcomes.delete(q));
    return q;
  }

  private async complete(cl: Claim, result: unknown): Promise<void> {
    try {
      const item = { job_id: String(cl.job.id), attempt: cl.job.attempt, result: result ?? null, traceparent: cl.traceparent };
      await this.completions.add(item, jsonSize(item));
    } finally {
      this.over(cl);
    }
  }

  private async fail(cl: Claim, error: string, retryable: boolean): Promise<void> {
    try {
      const item = { job_id: String(cl.job.id), attempt: cl.job.attempt, error, retryable, traceparent: cl.traceparent };
      await this.failures.add(item, jsonSize(item));
    } finally {
      this.over(cl);
    }
  }

  private handBack(cl: Claim): void {
    cl.state = "reporting";
    cl.ac.abort(shutdownError(`job ${cl.job.id} attempt ${cl.job.attempt} handed back`));
    void this.outcome(this.fail(cl, "worker shutdown", true));
  }

  /** The claim ends: timers stop, its signal aborts (with err, if given). */
  private over(cl: Claim, err?: CoorddError): void {
    if (cl.state === "running") cl.state = "over";
    if (err) cl.state = "over";
    clearTimeout(cl.deadlineTimer);
    clearTimeout(cl.hbTimer);
    this.hbDue.delete(cl);
    this.claims.delete(cl);
    if (!cl.ac.signal.aborted) cl.ac.abort(err ?? claimLost("attempt ended"));
  }

  private armDeadline(cl: Claim): void {
    clearTimeout(cl.deadlineTimer);
    cl.deadlineTimer = setTimeout(() => this.checkDeadline(cl), Math.max(0, cl.deadlineAt - now()));
  }

  /** False (and the claim lost) when its local deadline passed. */
  private checkDeadline(cl: Claim): boolean {
    if (now() < cl.deadlineAt) {
      if (this.claims.has(cl)) this.armDeadline(cl);
      return true;
    }
    if (cl.state === "running" && cl.runEnd !== undefined && cl.deadlineAt >= cl.runEnd) {
      this.over(cl, claimLost(`job ${cl.job.id} attempt ${cl.job.attempt}: max_run exceeded: the server ends the attempt now`, undefined, "MAX_RUN_EXCEEDED"));
    } else if (cl.state === "running") {
      this.over(cl, claimLost(`job ${cl.job.id} attempt ${cl.job.attempt}: no heartbeat acknowledged before the local deadline`));
    }
    return false;
  }

  private scheduleHeartbeat(cl: Claim, lastSend: number): void {
    clearTimeout(cl.hbTimer);
    const due = lastSend + cl.vt / 3;
    cl.hbTimer = setTimeout(() => this.heartbeatNow(cl), Math.max(0, due - now()));
  }

  /** Queues a heartbeat of cl; the due ones leave together a few ms later. */
  private heartbeatNow(cl: Claim): void {
    if (!this.claims.has(cl) || cl.state !== "running") return;
    this.hbDue.add(cl);
    this.hbFlush ??= setTimeout(() => void this.flushHeartbeats(), 5);
  }

  private async flushHeartbeats(): Promise<void> {
    clearTimeout(this.hbFlush);
    this.hbFlush = undefined;
    const batch = [...this.hbDue].filter((c) => c.state === "running");
    this.hbDue = new Set();
    if (batch.length === 0) return;
    let sent = now();
    let results: any[];
    try {
      const r = decode(await this.t.call("POST", "/v1/queue/heartbeat", {
        idempotent: true, onSend: () => { sent = now(); },
        attemptTimeoutMs: Math.min(...batch.map((c) => c.vt / 3), 5000),
        callTimeoutMs: Math.max(1, Math.min(...batch.map((c) => c.deadlineAt - now()))),
        body: req("v1QueueHeartbeatRequest",
          { worker_id: this.id, attempts: batch.map((c) => ({ job_id: String(c.job.id), attempt: c.job.attempt })) }),
      }));
      results = r.results ?? [];
    } catch (e) {
      if (batch.length === 1 && isReason(e, ...ATTEMPT_OVER)) {
        this.over(batch[0], claimLost(`heartbeat refused: ${(e as Error).message}`, e));
        return;
      }
      this.onError(e);
      for (const cl of batch) if (this.checkDeadline(cl)) this.scheduleHeartbeat(cl, now() - cl.vt / 3 + 200);
      return;
    }
    batch.forEach((cl, i) => {
      const res = results[i];
      if (res?.error) {
        this.over(cl, claimLost(`heartbeat refused: ${res.error.reason}: ${res.error.message}`,
          new CoorddError({ code: "FAILED_PRECONDITION", ...res.error })));
        return;
      }
      const d = cl.bounded(sent + cl.vt - marginFor(cl.vt));
      if (d > cl.deadlineAt) cl.deadlineAt = d;
      this.armDeadline(cl);
      this.scheduleHeartbeat(cl, sent);
    });
  }
}

/** A complete/fail answer's results, one per item: a refused item (stale token, attempt expired, ...) is that item's error. */
function itemResults(results: any[] | undefined): ItemResult<any>[] {
  return (results ?? []).map((r) => r?.error
    ? { err: new CoorddError({ code: "FAILED_PRECONDITION", ...r.error, message: `job ${r.job_id} attempt ${r.attempt}: ${r.error.message ?? ""}` }) }
    : { ok: r });
}

function jsonSize(v: unknown): number {
  return JSON.stringify(v)?.length ?? 0;
}

function errorText(e: unknown): string {
  const s = e instanceof Error ? `${e.message}${e.stack ? "\n\n" + e.stack : ""}` : String(e);
  return s.slice(0, MAX_ERROR_TEXT);
}

function claimLost(message: string, cause?: unknown, reason = "CLAIM_LOST"): CoorddError {
  const c = cause instanceof CoorddError ? cause : undefined;
  return new CoorddError({ code: c?.code ?? "FAILED_PRECONDITION", reason, message, metadata: c?.metadata, cause });
}

function shutdownError(message: string): CoorddError {
  return new CoorddError({ code: "CANCELLED", reason: "WORKER_SHUTDOWN", message });
}
