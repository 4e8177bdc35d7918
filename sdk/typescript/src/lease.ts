// A held lease: renewed over HTTP every TTL/3 (KeepAlive is gRPC only),
// with a local deadline measured from the send time of the last
// acknowledged acquire or renewal (client/DESIGN.md, "Leases and the
// keepalive"): the server applied that call after it was sent, so its
// expiry is later than sent + TTL, and `signal` aborts at
// sent + TTL - margin, before the server could grant the lease to anyone
// else.
import { CoorddError, LeaseLostError, LEASE_ENDED } from "./errors.js";
import { pathName, type Transport } from "./transport.js";
import { decode, duration, req, type Schemas } from "./wire.js";
import type { Commit, CommitOptions, Window, WindowClaim } from "./types.js";

/** Monotonic milliseconds (keeps counting while the process is stopped). */
export const now = (): number => performance.now();

/** The safety margin under the TTL: TTL/10, clamped to [50 ms, 2 s]. */
export function marginFor(ttlMs: number): number {
  return Math.min(Math.max(ttlMs / 10, 50), 2000);
}

export interface LeaseHooks {
  fencedCommit(body: Schemas["v1FencedCommitRequest"], opts?: CommitOptions): Promise<Commit>;
}

export class Lease {
  readonly name: string;
  readonly owner: string;
  readonly generation: number;
  /** The fencing token, "name:generation", for services that receive only a token. */
  readonly token: string;
  readonly ttlMs: number;
  /** Aborted (reason: a LeaseLostError) when the lease is lost or its local deadline passes, or at release. */
  readonly signal: AbortSignal;
  /** Renewals acknowledged so far. */
  renewals = 0;

  private readonly ac = new AbortController();
  private readonly margin: number;
  private deadlineAt: number; // monotonic ms
  private lastSend: number;
  private deadlineTimer?: NodeJS.Timeout;
  private renewTimer?: NodeJS.Timeout;
  private ended = false;
  private lostErr?: LeaseLostError;

  constructor(private readonly t: Transport, private readonly hooks: LeaseHooks,
    name: string, owner: string, generation: number, ttlMs: number, sent: number) {
    this.name = name;
    this.owner = owner;
    this.generation = generation;
    this.token = `${name}:${generation}`;
    this.ttlMs = ttlMs;
    this.signal = this.ac.signal;
    this.margin = marginFor(ttlMs);
    this.lastSend = sent;
    this.deadlineAt = sent + ttlMs - this.margin;
    this.armDeadline();
    this.scheduleRenew();
  }

  /** The local deadline as a wall-clock instant: the lease counts as lost then unless a renewal is acknowledged. */
  get deadline(): Date {
    return new Date(Date.now() + (this.deadlineAt - now()));
  }

  /** Why the lease ended (a LeaseLostError), or undefined while held or after a clean release. */
  get lost(): LeaseLostError | undefined {
    return this.lostErr;
  }

  /**
   * True while the lease is held and its local deadline has not passed.
   * Checks the clock itself, so it is right even when the deadline's timer
   * could not run yet (an event loop blocked, a process resumed after
   * SIGSTOP): it then aborts `signal` at once.
   */
  held(): boolean {
    if (!this.ended && now() >= this.deadlineAt) this.localDeadline();
    return !this.ended;
  }

  /** Throws the loss if the lease is not held (see held()). */
  check(): void {
    if (!this.held()) throw this.lostErr ?? new LeaseLostError("LEASE_RELEASED", `lease "${this.name}" was released`);
  }

  private armDeadline(): void {
    clearTimeout(this.deadlineTimer);
    this.deadlineTimer = setTimeout(() => this.localDeadline(), Math.max(0, this.deadlineAt - now()));
  }

  private localDeadline(): void {
    if (now() < this.deadlineAt) return this.armDeadline(); // extended meanwhile
    this.lose(new LeaseLostError("LOCAL_DEADLINE",
      `no renewal of "${this.name}" generation ${this.generation} acknowledged before the local deadline`));
  }

  private lose(err: LeaseLostError): void {
    if (this.ended) return;
    this.ended = true;
    this.lostErr = err;
    this.stopTimers();
    this.ac.abort(err);
  }

  private stopTimers(): void {
    clearTimeout(this.deadlineTimer);
    clearTimeout(this.renewTimer);
  }

  private scheduleRenew(): void {
    if (this.ended) return;
    const due = this.lastSend + this.ttlMs / 3;
    this.renewTimer = setTimeout(() => void this.renew(), Math.max(0, due - now()));
  }

  /** One renewal, retried on other nodes until it is acknowledged or the local deadline passes. */
  private async renew(): Promise<void> {
    if (!this.held()) return;
    let sent = now();
    try {
      await this.t.call("POST", `/v1/leases/${pathName(this.name)}/renew`, {
        idempotent: true,
        body: req("CoordinatorRenewBody", { owner: this.owner, generation: String(this.generation), ttl: duration(this.ttlMs) }),
        // A renewal unanswered within the stall limit moves on to another node.
        attemptTimeoutMs: Math.min(this.ttlMs / 3, 2000),
        callTimeoutMs: Math.max(1, this.deadlineAt - now()),
        signal: this.signal,
        onSend: () => { sent = now(); },
      });
      this.acked(sent);
    } catch (e) {
      if (this.ended) return;
      if (e instanceof CoorddError && LEASE_ENDED.has(e.reason)) {
        this.lose(new LeaseLostError(e.reason, e.message, e));
        return;
      }
      if (e instanceof CoorddError && !e.outcomeUnknown && e.code !== "UNAVAILABLE" && e.code !== "DEADLINE_EXCEEDED") {
        this.lose(new LeaseLostError(e.reason, `renewal refused: ${e.message}`, e)); // e.g. PERMISSION_DENIED
        return;
      }
      // Out of time: the local deadline decides (its timer, or held()).
      this.held();
      if (!this.ended) { this.lastSend = now() - this.ttlMs / 3 + 50; this.scheduleRenew(); }
    }
  }

  private acked(sent: number): void {
    if (this.ended) return;
    this.renewals++;
    this.lastSend = sent;
    const d = sent + this.ttlMs - this.margin;
    if (d > this.deadlineAt) {
      this.deadlineAt = d;
      this.armDeadline();
    }
    this.scheduleRenew();
  }

  /**
   * A write to resource fenced by this lease's token. With an idempotency
   * key a repeat returns the first outcome (duplicate) and the call is
   * retried after an unknown outcome. A refusal is a CoorddError
   * (STALE_TOKEN, LEASE_EXPIRED, ...). Sent even after the local deadline:
   * the fence decides.
   */
  fencedCommit(resource: string, idempotencyKey: string | undefined, payload?: unknown, opts?: CommitOptions): Promise<Commit> {
    this.held();
    return this.hooks.fencedCommit({ resource, lease_name: this.name, generation: String(this.generation),
      idempotency_key: idempotencyKey, payload }, opts);
  }

  /** Claims the occurrence window of job for this lease; a completed window is claimed=false, not an error. */
  async claimWindow(job: string, window: string): Promise<WindowClaim> {
    this.held();
    const r = decode(await this.t.call("POST", `/v1/windows/${pathName(job)}/${encodeURIComponent(window)}/claim`, {
      idempotent: true, body: req("CoordinatorClaimWindowBody", { lease_name: this.name, owner: this.owner, generation: String(this.generation) }),
    }));
    return { claimed: !!r.claimed, attempts: r.attempts ?? 0, window: r.window };
  }

  /**
   * Completes the claimed window with result (a JSON value), at most once;
   * with release, releases the lease in the same log entry (it stops
   * renewing and `signal` aborts first).
   */
  async completeWindow(job: string, window: string, result?: unknown, opts: { release?: boolean } = {}): Promise<Window> {
    if (opts.release) {
      const lost = this.end();
      if (lost) throw lost;
    } else {
      this.held();
    }
    const r = decode(await this.t.call("POST", `/v1/windows/${pathName(job)}/${encodeURIComponent(window)}/complete`, {
      idempotent: true,
      body: req("CoordinatorCompleteWindowBody",
        { lease_name: this.name, owner: this.owner, generation: String(this.generation), result, release: !!opts.release }),
    }));
    return r.window;
  }

  /** Stops renewing and aborts `signal`; returns the loss already recorded, if any. */
  private end(): LeaseLostError | undefined {
    this.held();
    const lost = this.lostErr;
    if (!this.ended) {
      this.ended = true;
      this.stopTimers();
      this.ac.abort(new LeaseLostError("LEASE_RELEASED", `lease "${this.name}" released by its holder`));
    }
    return lost;
  }

  /**
   * Releases the lease (stops renewing, aborts `signal`, then tells the
   * server). If it had been lost already, throws that loss.
   */
  async release(o: { timeoutMs?: number } = {}): Promise<void> {
    const lost = this.end();
    let err: unknown;
    try {
      await this.t.call("POST", `/v1/leases/${pathName(this.name)}/release`, {
        idempotent: true, callTimeoutMs: o.timeoutMs ?? 5000,
        body: req("CoordinatorReleaseBody", { owner: this.owner, generation: String(this.generation) }),
      });
    } catch (e) {
      err = e;
    }
    if (lost) throw lost;
    if (err && !(err instanceof CoorddError && LEASE_ENDED.has(err.reason))) throw err;
  }
}

