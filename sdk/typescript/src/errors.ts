// Typed errors. A refusal from coordd is a CoorddError with the gRPC code
// name, the ErrorReason (without its ERROR_REASON_ prefix), the message and
// the metadata of the one error body; an attempt whose outcome could not be
// known (a timeout, a connection lost after the request was sent, 504,
// LEADERSHIP_LOST) has outcomeUnknown set, so a caller can tell "refused"
// from "may have happened" (retry with the same request id or key).

/** The reasons this SDK reacts to (proto/coord/v1/errors.proto has all). */
export type Reason =
  | "LEASE_LOST" | "LEASE_EXPIRED" | "LEASE_RELEASED" | "LEASE_NOT_FOUND" | "STALE_TOKEN"
  | "RESOURCE_LEASE_MISMATCH" | "WINDOW_COMPLETED" | "WINDOW_NOT_CLAIMED" | "IDENTITY_MISMATCH"
  | "TOO_EARLY" | "NOT_LEADER" | "NO_LEADER" | "LEADERSHIP_LOST" | "TIMEOUT" | "NOT_FOUND"
  | "SHUTTING_DOWN" | "UNAUTHENTICATED" | "PERMISSION_DENIED" | "RATE_LIMITED" | "INVALID_ARGUMENT"
  | "JOB_NOT_FOUND" | "ATTEMPT_LOST" | "ATTEMPT_EXPIRED" | "JOB_CANCELLED" | "JOB_FINISHED" | "JOB_RUNNING"
  | "SCHEDULE_NOT_FOUND" | "SCHEDULE_EXISTS" | "SCHEDULE_REVISION_MISMATCH" | "SCHEDULE_OVERLAP"
  // Client-side reasons (never sent by the server):
  | "NOT_ACQUIRED" | "LOCAL_DEADLINE" | "INVALID_TOKEN" | "TRANSPORT" | "WORKER_SHUTDOWN" | "CLAIM_LOST"
  | "SIGNATURE_INVALID" | "DELIVERY_INVALID"
  | (string & {});

export interface ErrorBody {
  code?: string;
  reason?: string;
  message?: string;
  metadata?: Record<string, string>;
}

export class CoorddError extends Error {
  /** gRPC code name: INVALID_ARGUMENT, FAILED_PRECONDITION, UNAVAILABLE, ... */
  readonly code: string;
  /** ErrorReason without its prefix (STALE_TOKEN, LEASE_LOST, ...), or a client-side reason. */
  readonly reason: Reason;
  readonly metadata: Record<string, string>;
  /** HTTP status of the answer; 0 when none arrived. */
  readonly status: number;
  /** The call may have been applied: retry with the same request id / idempotency key to learn. */
  readonly outcomeUnknown: boolean;

  constructor(b: ErrorBody & { status?: number; outcomeUnknown?: boolean; cause?: unknown }) {
    const reason = b.reason || b.code || "UNKNOWN";
    super(`coordd: ${reason}: ${b.message ?? ""}${b.outcomeUnknown ? " (outcome unknown)" : ""}`,
      b.cause === undefined ? undefined : { cause: b.cause });
    this.name = "CoorddError";
    this.code = b.code || "UNKNOWN";
    this.reason = reason;
    this.metadata = b.metadata ?? {};
    this.status = b.status ?? 0;
    this.outcomeUnknown = b.outcomeUnknown ?? false;
  }

  /** The same error, marked as of unknown outcome. */
  asUnknown(): CoorddError {
    if (this.outcomeUnknown) return this;
    return new CoorddError({ code: this.code, reason: this.reason, message: this.message.replace(/^coordd: [^:]*: /, ""),
      metadata: this.metadata, status: this.status, outcomeUnknown: true, cause: this });
  }
}

/** The reasons that end a lease: the holder must stop writing with its token. */
export const LEASE_ENDED: ReadonlySet<string> = new Set(["LEASE_LOST", "LEASE_EXPIRED", "LEASE_RELEASED", "LEASE_NOT_FOUND", "LOCAL_DEADLINE"]);

/** Someone else holds the lease (acquire without wait). */
export class NotAcquiredError extends CoorddError {
  readonly holder: string;
  readonly generation: number;
  /** How long the holder's lease has left, in ms (on the leader's clock). */
  readonly remainingMs: number;
  constructor(name: string, holder: string, generation: number, remainingMs: number) {
    super({ code: "FAILED_PRECONDITION", reason: "NOT_ACQUIRED",
      message: `lease "${name}" is held by "${holder}" (generation ${generation}) for ${remainingMs} ms more` });
    this.name = "NotAcquiredError";
    this.holder = holder;
    this.generation = generation;
    this.remainingMs = remainingMs;
  }
}

/** The lease ended while held: refused by the server, or its local deadline passed. */
export class LeaseLostError extends CoorddError {
  constructor(reason: Reason, message: string, cause?: CoorddError) {
    super({ code: cause?.code ?? "FAILED_PRECONDITION", reason, message, metadata: cause?.metadata, status: cause?.status, cause });
    this.name = "LeaseLostError";
  }
}

/** isReason(err, "STALE_TOKEN"): err is a CoorddError with one of the reasons. */
export function isReason(err: unknown, ...reasons: Reason[]): err is CoorddError {
  return err instanceof CoorddError && reasons.includes(err.reason);
}

/** A bad argument found before any call (the server's own refusal is a CoorddError too). */
export function invalidArgument(field: string, message: string): CoorddError {
  return new CoorddError({ code: "INVALID_ARGUMENT", reason: "INVALID_ARGUMENT", message: `${field}: ${message}`, metadata: { field } });
}
