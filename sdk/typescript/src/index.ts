// @coordd/client: the TypeScript/Node.js SDK of coordd, over its HTTP/JSON API.
export { Client, optionsFromEnv, parseToken, type ClientOptions, type AcquireOptions } from "./client.js";
export { Lease, marginFor } from "./lease.js";
export { Jobs, AUTO_KEY_PREFIX, type JobOptions, type SubmitOptions, type NewJob, type Target } from "./jobs.js";
export { Schedules, type ScheduleSpec } from "./schedules.js";
export { Worker, permanent, type WorkerOptions, type Job, type JobContext, type Handler } from "./worker.js";
export { CoorddError, NotAcquiredError, LeaseLostError, isReason, LEASE_ENDED, type Reason, type ErrorBody } from "./errors.js";
export { verifyDelivery, deliveryHandler, deliveryStatus, signDelivery, parseSecret, SignatureInvalidError, DeliveryInvalidError,
  DELIVERY_TOLERANCE_SECONDS, type Delivery, type DeliveryContext, type DeliveryFn, type DeliveryHandlerOptions, type VerifyOptions,
  type HeaderSource } from "./delivery.js";
export { parseTraceparent, formatTraceparent, type TraceParent } from "./tracing.js";
export type { TLSFiles } from "./transport.js";
export type * from "./types.js";
