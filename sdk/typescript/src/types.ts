// The records the SDK returns: the API's messages as src/wire.ts decodes
// them (field names as in the protos; 64-bit integers as numbers,
// durations as ms, instants as Date, payloads as JSON values, enums as
// short names). The wire shapes are the OpenAPI document's (src/gen/coordd.ts).

export interface LeaseInfo {
  name: string;
  owner: string;
  generation: number;
  ttl: number;
  expires_in: number;
  held: number;
  released: boolean;
  expired: boolean;
  renewals: number;
  identity: string;
  value: unknown;
  [field: string]: unknown;
}

export interface Window {
  job: string;
  window: string;
  state: string; // CLAIMED, COMPLETED
  owner: string;
  generation: number;
  attempts: number;
  lease_name: string;
  result: unknown;
  [field: string]: unknown;
}

export interface WindowClaim {
  /** False when the window was already completed: `window` holds what completed it. */
  claimed: boolean;
  attempts: number;
  window: Window;
}

export interface Commit {
  accepted: boolean;
  /** The idempotency key was accepted before: payload and generation are the first commit's. */
  duplicate: boolean;
  generation: number;
  max_generation: number;
  payload: unknown;
  lease_name: string;
  dry_run: boolean;
}

export interface CommitOptions {
  /** Only check: nothing is recorded (retried like a read). */
  dryRun?: boolean;
  signal?: AbortSignal;
}

export interface Resource {
  resource: string;
  lease_name: string;
  max_generation: number;
  last_idempotency_key: string;
  commits: number;
  [field: string]: unknown;
}

export interface JobAttempt {
  number: number;
  worker_id: string;
  token: string;
  error: string;
  result: unknown;
  outcome: string;
  [field: string]: unknown;
}

export interface QueueJob {
  id: number;
  queue: string;
  kind: string;
  args: unknown;
  state: string; // SCHEDULED, AVAILABLE, RUNNING, RETRYABLE, SUCCEEDED, CANCELLED, DEAD
  attempts: number;
  max_attempts: number;
  unique_key: string;
  visibility_timeout: number;
  run_at?: Date;
  labels: Record<string, string>;
  attempt_log?: JobAttempt[];
  [field: string]: unknown;
}

export interface SubmittedJob {
  id: number;
  state: string;
  run_at?: Date;
  /** The unique key was used before: this is the first job. */
  duplicate: boolean;
  [field: string]: unknown;
}

export interface Schedule {
  spec: Record<string, unknown>;
  revision: number;
  paused: boolean;
  deleted: boolean;
  [field: string]: unknown;
}
