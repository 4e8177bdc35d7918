// Schedules (coord.v1.Schedules over HTTP): recurring jobs the cluster's
// leader materialises, one job per occurrence.
import { invalidArgument } from "./errors.js";
import type { Transport } from "./transport.js";
import { decode, duration, req, type Schemas } from "./wire.js";
import type { Schedule } from "./types.js";

export interface ScheduleSpec {
  /** 1 to 128 bytes of [A-Za-z0-9._:-]. */
  name: string;
  /** Cron ("5 0 * * *"), "@every 30s", or an instant ("@at 2026-09-25T23:55:00Z"); see proto/coord/v1/schedules.proto. */
  schedule: string;
  timeZone?: string;
  job: { queue?: string; kind: string; args?: unknown; priority?: number; maxAttempts?: number;
    backoff?: { initial?: number; max?: number; factor?: number }; visibilityTimeout?: number; labels?: Record<string, string> };
  windowLayout?: string;
  windowShiftDays?: number;
  /** ms */
  startingDeadline?: number;
  catchUp?: number;
  completeWithin?: number;
  overlap?: "FORBID" | "ALLOW" | "REPLACE";
  dstPolicy?: "WALL_TIME" | "CADENCE";
}

const ms = (v: number | undefined) => (v === undefined ? undefined : duration(v));

export function specBody(s: ScheduleSpec): Schemas["v1ScheduleSpec"] {
  if (!s.name) throw invalidArgument("name", "required");
  const j = s.job;
  return {
    name: s.name, schedule: s.schedule, time_zone: s.timeZone,
    job: j && { queue: j.queue, kind: j.kind, args: j.args, priority: j.priority, max_attempts: j.maxAttempts,
      backoff_initial: ms(j.backoff?.initial), backoff_max: ms(j.backoff?.max), backoff_factor: j.backoff?.factor,
      visibility_timeout: ms(j.visibilityTimeout), labels: j.labels },
    window_layout: s.windowLayout, window_shift_days: s.windowShiftDays,
    starting_deadline: ms(s.startingDeadline), catch_up: ms(s.catchUp), complete_within: ms(s.completeWithin),
    overlap: s.overlap, dst_policy: s.dstPolicy,
  };
}

const path = (name: string) => `/v1/schedules/${encodeURIComponent(name)}`;

export class Schedules {
  constructor(private readonly t: Transport) {}

  /**
   * Upserts a schedule by name (every replica of a service may put the
   * same spec). createOnly: another definition under the name is
   * SCHEDULE_EXISTS; expectedRevision: a changed one is
   * SCHEDULE_REVISION_MISMATCH.
   */
  async put(spec: ScheduleSpec, o: { createOnly?: boolean; expectedRevision?: number } = {}):
    Promise<{ schedule: Schedule; created: boolean; changed: boolean }> {
    const r = decode(await this.t.call("POST", "/v1/schedules", { idempotent: true, body: specBody(spec),
      query: { create_only: o.createOnly, expected_revision: o.expectedRevision } }));
    return { schedule: r.schedule, created: !!r.created, changed: !!r.changed };
  }

  /** The schedule, its next occurrences (next of them) and the recent ones with their jobs' states. */
  async get(name: string, o: { next?: number } = {}): Promise<{ schedule: Schedule; next: any[]; recent: any[]; skipped: any[] }> {
    const r = decode(await this.t.call("GET", path(name), { idempotent: true, query: { next: o.next } }));
    return { schedule: r.schedule, next: r.next ?? [], recent: r.recent ?? [], skipped: r.skipped ?? [] };
  }

  async list(o: { prefix?: string; pageSize?: number; pageToken?: string; showDeleted?: boolean } = {}):
    Promise<{ schedules: Schedule[]; next_page_token: string }> {
    const r = decode(await this.t.call("GET", "/v1/schedules", { idempotent: true,
      query: { prefix: o.prefix, page_size: o.pageSize, page_token: o.pageToken, show_deleted: o.showDeleted } }));
    return { schedules: r.schedules ?? [], next_page_token: r.next_page_token ?? "" };
  }

  /** Pauses (idempotent: changed=false when it was paused). */
  async pause(name: string): Promise<{ schedule: Schedule; changed: boolean }> {
    const r = decode(await this.t.call("POST", `${path(name)}/pause`, { idempotent: true, body: req("SchedulesPauseScheduleBody", {}) }));
    return { schedule: r.schedule, changed: !!r.changed };
  }

  /** Resumes without a burst: the paused occurrences are recorded as skipped. */
  async resume(name: string): Promise<{ schedule: Schedule; changed: boolean }> {
    const r = decode(await this.t.call("POST", `${path(name)}/resume`, { idempotent: true, body: req("SchedulesResumeScheduleBody", {}) }));
    return { schedule: r.schedule, changed: !!r.changed };
  }

  /** An extra occurrence now (not retried once sent: it would make another). */
  async trigger(name: string): Promise<any> {
    return decode(await this.t.call("POST", `${path(name)}/trigger`, { idempotent: false, body: req("SchedulesTriggerScheduleBody", {}) }));
  }

  async delete(name: string): Promise<{ changed: boolean }> {
    const r = decode(await this.t.call("DELETE", path(name), { idempotent: true }));
    return { changed: !!r.changed };
  }
}
