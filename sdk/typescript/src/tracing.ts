// W3C trace context on jobs (docs/tracing.md). Every job answer carries
// the job's `traceparent` (and `tracestate`); submit takes one. When the
// application has @opentelemetry/api installed (an optional peer
// dependency: the SDK has no runtime dependencies), it is loaded once by
// dynamic import and used: a submit without a traceparent takes the active
// span's, and the Worker runs each handler in a consumer span, the child
// of the job's context, whose context it reports with the outcome.
// Without it the strings are only passed through.

/** The parts of a traceparent (version 00). */
export interface TraceParent {
  traceId: string;
  spanId: string;
  /** 1: sampled. */
  traceFlags: number;
}

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/;

/** Reads a W3C traceparent; undefined when it is not valid syntax (W3C: ignore it). */
export function parseTraceparent(tp: string | undefined): TraceParent | undefined {
  const m = tp ? TRACEPARENT.exec(tp) : null;
  if (!m || m[1] === "ff" || (m[1] === "00" && m[5] !== undefined)) return undefined;
  if (/^0+$/.test(m[2]) || /^0+$/.test(m[3])) return undefined;
  return { traceId: m[2], spanId: m[3], traceFlags: parseInt(m[4], 16) & 1 };
}

/** Writes a traceparent (version 00). */
export function formatTraceparent(p: TraceParent): string {
  return `00-${p.traceId}-${p.spanId}-${p.traceFlags & 1 ? "01" : "00"}`;
}

// The module, once tried: null when it is not installed.
let otel: any | null | undefined;
const OTEL_MODULE = "@opentelemetry/api"; // a variable: no compile-time dependency

/** @opentelemetry/api if the application has it, else null (tried once). */
export async function loadOtel(): Promise<any | null> {
  if (otel === undefined) {
    try {
      otel = await import(OTEL_MODULE);
    } catch {
      otel = null;
    }
  }
  return otel;
}

/** The active span's trace context, if @opentelemetry/api is loaded and a span is active. */
export function activeTraceparent(api: any | null): { traceparent: string; tracestate?: string } | undefined {
  const sc = api?.trace.getSpanContext(api.context.active());
  if (!sc || !api.trace.isSpanContextValid(sc)) return undefined;
  return { traceparent: formatTraceparent(sc), tracestate: sc.traceState?.serialize() || undefined };
}

/** What a worker needs to trace one attempt. */
export interface AttemptTrace {
  /** The OpenTelemetry context to run the handler in (its active span: the attempt's). */
  context: unknown;
  span: any;
  /** The span's traceparent, sent with the outcome when it records. */
  traceparent?: string;
}

/**
 * Starts the consumer span of one attempt, the child of the job's trace
 * context (a new trace without one). Undefined without @opentelemetry/api.
 */
export function startAttempt(api: any | null, job: { id: number; kind: string; queue?: string; attempt: number;
  traceparent?: string; tracestate?: string }, workerId: string, token: string): AttemptTrace | undefined {
  if (!api) return undefined;
  let ctx = api.context.active();
  const p = parseTraceparent(job.traceparent);
  if (p) {
    ctx = api.trace.setSpanContext(ctx, { ...p, isRemote: true,
      traceState: job.tracestate && api.createTraceState ? api.createTraceState(job.tracestate) : undefined });
  }
  const span = api.trace.getTracer("@coordd/client").startSpan(`coordd.job ${job.kind}`, {
    kind: api.SpanKind.CONSUMER,
    attributes: { "coordd.queue": job.queue ?? "", "coordd.job.kind": job.kind, "coordd.job.id": job.id,
      "coordd.job.attempt": job.attempt, "coordd.fencing_token": token, "coordd.worker_id": workerId },
  }, ctx);
  const sc = span.spanContext();
  return { context: api.trace.setSpan(ctx, span), span, traceparent: span.isRecording() ? formatTraceparent(sc) : undefined };
}

/** Ends an attempt's span with the handler's error, if any. */
export function endAttempt(api: any | null, t: AttemptTrace | undefined, err?: unknown): void {
  if (!api || !t) return;
  if (err !== undefined) {
    t.span.recordException(err instanceof Error ? err : String(err));
    t.span.setStatus({ code: api.SpanStatusCode.ERROR, message: err instanceof Error ? err.message : String(err) });
  }
  t.span.end();
}
