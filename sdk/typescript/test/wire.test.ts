// The wire conversions (src/wire.ts), without a cluster.
import { it } from "node:test";
import assert from "node:assert/strict";
import { DURATION_FIELDS, decode, duration, instant } from "../src/wire.js";
import { INT64_FIELDS, TIMESTAMP_FIELDS } from "../src/gen/fields.js";
import { marginFor } from "../src/lease.js";
import { parseToken } from "../src/index.js";

it("wire_conversions", () => {
  assert.equal(duration(30000), "30s");
  assert.equal(duration(500), "0.500s");
  assert.equal(duration(1234.4), "1.234s");
  assert.equal(instant(Date.UTC(2026, 11, 1, 23, 4, 20, 123)), "2026-12-01T23:04:20.123Z");
  const d = decode({
    lease: { name: "a", generation: "3", ttl: "1.500s", expires_in: "0.250s", acquired_at: "2026-12-01T23:04:20.123Z", owner: "5s",
      value: { generation: "7", ttl: "9s" } },
    job: { id: "42", state: "DEAD", kind: "render", args: { id: "42" } },
  });
  assert.deepEqual([d.lease.generation, d.lease.ttl, d.lease.expires_in, d.lease.owner], [3, 1500, 250, "5s"]);
  assert.deepEqual(d.lease.acquired_at, new Date("2026-12-01T23:04:20.123Z"));
  assert.deepEqual(d.lease.value, { generation: "7", ttl: "9s" }, "payloads are the user's, untouched");
  assert.deepEqual([d.job.id, d.job.state, d.job.kind, d.job.args], [42, "DEAD", "render", { id: "42" }]);
  assert.deepEqual([marginFor(1000), marginFor(5000), marginFor(60000)], [100, 500, 2000]);
  assert.deepEqual(parseToken("billing/close:a:7"), { name: "billing/close:a", generation: 7 });
  assert.throws(() => parseToken("close:0"), /malformed/);
});

it("wire_fields_from_openapi", () => {
  // The document says which fields are durations and timestamps (scripts/fields.mjs).
  for (const f of ["ttl", "expires_in", "visibility_timeout", "wait", "delay", "complete_within"]) assert.ok(DURATION_FIELDS.has(f), f);
  for (const f of ["acquired_at", "run_at", "next_due", "created_at"]) assert.ok(TIMESTAMP_FIELDS.has(f), f);
  for (const f of ["generation", "id", "job_id", "commits", "revision"]) assert.ok(INT64_FIELDS.has(f), f);
});
