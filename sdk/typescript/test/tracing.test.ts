// Trace context on jobs (src/tracing.ts, docs/tracing.md), without a
// cluster: the traceparent round-trips through a submit's body and into a
// worker's attempt context, with @opentelemetry/api (a dev dependency here,
// an optional peer dependency for users).
import { it } from "node:test";
import assert from "node:assert/strict";
import * as api from "@opentelemetry/api";
import { formatTraceparent, parseTraceparent } from "../src/index.js";
import { newJobBody } from "../src/jobs.js";
import { activeTraceparent, loadOtel, startAttempt, endAttempt } from "../src/tracing.js";

const TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

it("traceparent_parse_format", () => {
  const p = parseTraceparent(TP);
  assert.deepEqual(p, { traceId: "4bf92f3577b34da6a3ce929d0e0e4736", spanId: "00f067aa0ba902b7", traceFlags: 1 });
  assert.equal(formatTraceparent(p!), TP);
  assert.equal(formatTraceparent({ ...p!, traceFlags: 0 }).slice(-2), "00");
  assert.ok(parseTraceparent("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future"), "a later version reads as 00");
  for (const bad of ["", "garbage", TP.toUpperCase(), TP + "-x", "ff" + TP.slice(2),
    "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"]) {
    assert.equal(parseTraceparent(bad), undefined, bad);
  }
});

it("traceparent_in_submit_body", () => {
  const b = newJobBody({ kind: "k", traceparent: TP, tracestate: "vendor=x" });
  assert.equal(b.traceparent, TP);
  assert.equal(b.tracestate, "vendor=x");
  assert.equal(newJobBody({ kind: "k" }).traceparent, undefined);
});

it("traceparent_with_opentelemetry_api", async () => {
  const otel = await loadOtel();
  assert.ok(otel, "@opentelemetry/api loads when installed");
  // A worker's attempt continues the job's context (the API alone: a
  // non-recording span carrying the parent's ids, so nothing is reported).
  const tr = startAttempt(otel, { id: 7, kind: "k", queue: "q", attempt: 2, traceparent: TP }, "w1", "job:7:2");
  assert.ok(tr);
  const sc = api.trace.getSpanContext(tr!.context as api.Context)!;
  assert.equal(sc.traceId, "4bf92f3577b34da6a3ce929d0e0e4736");
  assert.equal(sc.spanId, "00f067aa0ba902b7");
  assert.equal(tr!.traceparent, undefined, "a span that does not record is not sent with the outcome");
  endAttempt(otel, tr, new Error("boom"));
  // A submit takes the active span's context (a context manager is the
  // application's: a synchronous one here).
  const stack: api.Context[] = [];
  api.context.setGlobalContextManager({
    active: () => stack.at(-1) ?? api.ROOT_CONTEXT,
    with: (ctx: api.Context, fn: any, thisArg?: any, ...args: any[]) => {
      stack.push(ctx);
      try {
        return fn.call(thisArg, ...args);
      } finally {
        stack.pop();
      }
    },
    bind: (_ctx: api.Context, target: any) => target,
    enable() { return this; },
    disable() { return this; },
  } as api.ContextManager);
  try {
    assert.equal(activeTraceparent(otel), undefined, "no active span");
    const ctx = api.trace.setSpanContext(api.ROOT_CONTEXT, { ...parseTraceparent(TP)!, isRemote: true });
    assert.deepEqual(api.context.with(ctx, () => activeTraceparent(otel)), { traceparent: TP, tracestate: undefined });
  } finally {
    api.context.disable();
  }
  assert.equal(startAttempt(null, { id: 1, kind: "k", attempt: 1, traceparent: TP }, "w", "job:1:1"), undefined, "no API: no span");
});
