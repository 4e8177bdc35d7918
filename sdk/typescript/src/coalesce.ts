// Group commit without a timer: concurrent calls of one client (submits,
// a worker's completions and failures) share one HTTP request. A call goes
// out at once while fewer than maxInFlight requests of its kind are in
// flight; otherwise it waits and joins the next request, which leaves as
// soon as one returns. A lone call therefore never waits; under load the
// requests fill up by themselves.
//
// Each member gets its own answer: its item of a per-item response, or —
// when the server refuses the whole request (all or nothing) — its own
// refusal, learned by sending again: the member the refusal names
// (metadata.index) alone and the others together, or, without an index,
// every member alone. An outcome-unknown error is every member's (the
// transport already retried the request as it would a lone call).
import { CoorddError } from "./errors.js";

/** A member's answer in a response. */
export type ItemResult<R> = { ok: R } | { err: unknown };

export interface CoalescerOptions {
  /** Requests in flight at once before calls queue up (default 1). */
  maxInFlight?: number;
  /** Items per request (the API's 1,000). */
  maxItems?: number;
  /** Sum of the items' sizes per request (the server takes bodies up to 4 MiB). */
  maxBytes?: number;
}

/** The default bound of requests in flight, measured (README, "Performance"). */
export const DEFAULT_MAX_IN_FLIGHT = 1;

interface Member<I, R> {
  item: I;
  size: number;
  /** Send alone (after a refusal of a request it shared). */
  solo: boolean;
  /** In a request whose answer has not come. */
  sent: boolean;
  settled: boolean;
  resolve(r: R): void;
  reject(e: unknown): void;
  done(): void;
}

export class Coalescer<I, R> {
  /** HTTP requests sent (each attempt of the transport counts once: a request). */
  requests = 0;
  private pending: Member<I, R>[] = [];
  private inFlight = 0;
  private readonly maxInFlight: number;
  private readonly maxItems: number;
  private readonly maxBytes: number;

  constructor(private readonly send: (items: I[]) => Promise<ItemResult<R>[]>, o: CoalescerOptions = {}) {
    this.maxInFlight = Math.max(1, o.maxInFlight ?? DEFAULT_MAX_IN_FLIGHT);
    this.maxItems = o.maxItems ?? 1000;
    this.maxBytes = o.maxBytes ?? 1 << 20;
  }

  /**
   * Sends item in the next request. signal ends this caller's wait only:
   * before the request left the item is dropped (CANCELLED, nothing sent);
   * after, the caller gets CANCELLED with outcomeUnknown and the request
   * goes on for the others.
   */
  add(item: I, size: number, signal?: AbortSignal): Promise<R> {
    return new Promise<R>((resolve, reject) => {
      if (signal?.aborted) return reject(cancelled(false));
      const onAbort = () => {
        if (m.settled) return;
        const i = this.pending.indexOf(m);
        if (i >= 0) this.pending.splice(i, 1);
        this.settle(m, { err: cancelled(m.sent) });
      };
      const m: Member<I, R> = { item, size, solo: false, sent: false, settled: false, resolve, reject,
        done: () => signal?.removeEventListener("abort", onAbort) };
      signal?.addEventListener("abort", onAbort, { once: true });
      this.pending.push(m);
      this.pump();
    });
  }

  private pump(): void {
    while (this.inFlight < this.maxInFlight && this.pending.length > 0) void this.flush(this.take());
  }

  /** The next request's members: from the front, up to the bounds; a solo member alone. */
  private take(): Member<I, R>[] {
    const group = [this.pending.shift()!];
    if (group[0].solo) return group;
    let bytes = group[0].size;
    while (group.length < this.maxItems && this.pending.length > 0) {
      const m = this.pending[0];
      if (m.solo || bytes + m.size > this.maxBytes) break;
      group.push(this.pending.shift()!);
      bytes += m.size;
    }
    return group;
  }

  private async flush(group: Member<I, R>[]): Promise<void> {
    this.inFlight++;
    this.requests++;
    for (const m of group) m.sent = true;
    try {
      let results: ItemResult<R>[];
      try {
        results = await this.send(group.map((m) => m.item));
      } catch (e) {
        this.refused(group, e);
        return;
      }
      group.forEach((m, i) => this.settle(m, results[i] ?? { err: new CoorddError({ code: "INTERNAL", reason: "TRANSPORT",
        message: `the answer has ${results.length} items for a request of ${group.length}` }) }));
    } finally {
      this.inFlight--;
      this.pump();
    }
  }

  /** The whole request failed: its error is every member's, unless it was a refusal another request could tell apart. */
  private refused(group: Member<I, R>[], e: unknown): void {
    if (group.length === 1 || !(e instanceof CoorddError) || e.outcomeUnknown || e.reason === "TRANSPORT") {
      for (const m of group) this.settle(m, { err: e });
      return;
    }
    // Refused, so nothing of it was applied: send again, each member to learn its own answer.
    const idx = /^\d+$/.test(e.metadata.index ?? "") ? Number(e.metadata.index) : -1;
    let again: Member<I, R>[];
    if (idx >= 0 && idx < group.length) {
      group[idx].solo = true;
      again = [group[idx], ...group.filter((_, i) => i !== idx)];
    } else {
      for (const m of group) m.solo = true;
      again = group;
    }
    for (const m of again) m.sent = false;
    this.pending.unshift(...again.filter((m) => !m.settled));
  }

  private settle(m: Member<I, R>, r: ItemResult<R>): void {
    if (m.settled) return;
    m.settled = true;
    m.done();
    if ("ok" in r) m.resolve(r.ok);
    else m.reject(r.err);
  }
}

function cancelled(sent: boolean): CoorddError {
  return new CoorddError({ code: "CANCELLED", reason: "CANCELLED", outcomeUnknown: sent,
    message: sent ? "the caller's signal aborted: the request it shares was sent, its outcome is unknown"
      : "the caller's signal aborted before the request was sent: nothing was submitted" });
}
