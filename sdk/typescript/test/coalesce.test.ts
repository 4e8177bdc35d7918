// submit_coalesced (sdk/CONFORMANCE.md): concurrent submits of one client
// share requests, each caller with its own answer; a worker's concurrent
// completions share requests. Against a real 3-node cluster.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { Cluster, poll } from "./cluster.js";
import { Client, isReason, type ClientOptions } from "../src/index.js";

let cluster: Cluster;
const clients: Client[] = [];

before(async () => {
  cluster = await Cluster.start(3);
});

after(() => {
  for (const c of clients) c.close();
  cluster?.stop();
});

/** A client whose submit requests are counted (with the number of jobs each carried). */
function counted(o: ClientOptions = {}): { c: Client; sizes: number[]; hold: (p: Promise<void> | undefined) => void } {
  const c = new Client({ endpoints: cluster.endpoints(), owner: "coalesce", ...o });
  clients.push(c);
  const sizes: number[] = [];
  let gate: Promise<void> | undefined;
  const call = c.transport.call.bind(c.transport);
  c.transport.call = async (method, path, co) => {
    if (method === "POST" && path === "/v1/queue/jobs") {
      sizes.push((co.body as any).jobs.length);
      await gate; // a test holds the request before it leaves
    }
    return call(method, path, co);
  };
  return { c, sizes, hold: (p) => { gate = p; } };
}

const turn = () => new Promise((r) => setImmediate(r));

describe("conformance", () => {
  it("submit_coalesced", async (t) => {
    await t.test("the server answers two jobs of one unique key in one request as two calls would", async () => {
      const { c } = counted();
      const [a, b] = await c.jobs.submitBatch([{ kind: "k", queue: "co-key", uniqueKey: "same" }, { kind: "k", queue: "co-key", uniqueKey: "same" }]);
      assert.deepEqual([a.duplicate, b.duplicate, b.id], [false, true, a.id]);
    });

    await t.test("concurrent submits share requests, each caller gets its own job", async () => {
      const { c, sizes } = counted();
      const n = 64;
      const subs = await Promise.all(Array.from({ length: n }, (_, i) => c.jobs.submit("k", { i }, { queue: "co-many" })));
      assert.equal(new Set(subs.map((s) => s.id)).size, n, "one job per caller");
      assert.equal(sizes.reduce((a, b) => a + b, 0), n);
      assert.deepEqual(sizes, [1, n - 1], "the first alone (nothing was in flight), the others in the next request");
      for (const [i, s] of subs.entries()) assert.deepEqual((await c.jobs.get(s.id)).args, { i }, `caller ${i}'s job`);
    });

    await t.test("each job of a shared request keeps its own traceparent", async () => {
      const { c, sizes } = counted();
      const tp = (i: number) => `00-${String(i + 1).padStart(32, "0")}-${String(i + 1).padStart(16, "0")}-01`;
      const subs = await Promise.all([0, 1, 2].map((i) => c.jobs.submit("k", null, { queue: "co-trace", traceparent: tp(i) })));
      assert.deepEqual(sizes, [1, 2]);
      for (const [i, s] of subs.entries()) assert.equal((await c.jobs.get(s.id)).traceparent, tp(i));
    });

    await t.test("a lone submit goes out at once, alone", async () => {
      const { c, sizes } = counted();
      await c.jobs.submit("k", null, { queue: "co-lone" }); // loads the tracing module once
      sizes.length = 0;
      const p = c.jobs.submit("k", null, { queue: "co-lone" });
      await turn();
      assert.deepEqual(sizes, [1], "sent before any answer came");
      assert.equal((await p).duplicate, false);
    });

    await t.test("one invalid job among valid ones: its own INVALID_ARGUMENT, the others submitted", async () => {
      const { c, sizes } = counted();
      const calls = Array.from({ length: 12 }, (_, i) => c.jobs.submit("k", { i }, { queue: "co-bad", priority: i === 9 ? 1000 : undefined }));
      const res = await Promise.allSettled(calls);
      res.forEach((r, i) => {
        if (i !== 9) return assert.equal(r.status, "fulfilled", `caller ${i}: ${(r as any).reason}`);
        assert.equal(r.status, "rejected");
        const e = (r as PromiseRejectedResult).reason;
        assert.ok(isReason(e, "INVALID_ARGUMENT") && e.status === 400 && !e.outcomeUnknown, String(e));
        assert.equal(e.metadata.field, "priority");
        assert.equal(e.metadata.index, "0", "the error it would get alone");
      });
      assert.deepEqual(sizes, [1, 11, 1, 10], "the first alone; the others refused together, then the bad one alone and the rest");
    });

    await t.test("two concurrent callers with one unique key: one created, the other its duplicate", async () => {
      const { c, sizes } = counted();
      const calls = Array.from({ length: 8 }, (_, i) => c.jobs.submit("k", { i }, { queue: "co-dup", uniqueKey: i >= 6 ? "twice" : undefined }));
      const subs = await Promise.all(calls);
      assert.equal(subs[6].id, subs[7].id);
      assert.deepEqual([subs[6].duplicate, subs[7].duplicate], [false, true]);
      assert.equal(subs.filter((s) => s.duplicate).length, 1);
      assert.deepEqual(sizes, [1, 7]);
    });

    await t.test("an aborted caller ends its own wait; the others are submitted", async () => {
      const { c } = counted();
      const ac = new AbortController();
      const calls = Array.from({ length: 10 }, (_, i) => c.jobs.submit("k", { i }, { queue: "co-abort", uniqueKey: `abort-${i}`,
        signal: i === 9 ? ac.signal : undefined }));
      ac.abort();
      const res = await Promise.allSettled(calls);
      const e = (res[9] as PromiseRejectedResult).reason;
      assert.ok(isReason(e, "CANCELLED") && !e.outcomeUnknown, `waiting, not sent: ${e}`);
      assert.ok(res.slice(0, 9).every((r) => r.status === "fulfilled"), JSON.stringify(res.slice(0, 9)));
      assert.equal((await c.jobs.submit("k", null, { queue: "co-abort", uniqueKey: "abort-9" })).duplicate, false, "nothing was submitted for it");
    });

    await t.test("a caller aborted while its shared request is in flight: outcome unknown; the others get their jobs", async () => {
      const { c, sizes, hold } = counted({ coalesce: { maxInFlight: 1 } });
      const held = () => { let release!: () => void; hold(new Promise<void>((r) => { release = r; })); return release; };
      const release1 = held();
      const first = c.jobs.submit("k", null, { queue: "co-abort2" }); // alone: nothing was in flight
      const ac = new AbortController();
      const calls = [0, 1, 2].map((i) => c.jobs.submit("k", { i }, { queue: "co-abort2", uniqueKey: `abort2-${i}`, signal: i === 1 ? ac.signal : undefined }));
      await poll("the first request", 5000, () => sizes.length === 1 || undefined, 5);
      const release = held();
      release1();
      await first;
      await poll("the shared request is in flight", 5000, () => sizes.length === 2 || undefined, 5);
      assert.deepEqual(sizes, [1, 3], "the three waited and share the next request");
      ac.abort();
      const e = await calls[1].then(() => undefined, (err) => err);
      assert.ok(isReason(e, "CANCELLED") && e.outcomeUnknown, `in flight: ${e}`);
      release();
      hold(undefined);
      const [a, b] = [await calls[0], await calls[2]];
      assert.deepEqual([a.duplicate, b.duplicate], [false, false]);
      assert.equal((await c.jobs.submit("k", null, { queue: "co-abort2", uniqueKey: "abort2-1" })).duplicate, true, "the request went on: it was submitted");
    });

    await t.test("coalescing off: one request per call", async () => {
      const { c, sizes } = counted({ coalesce: false });
      await Promise.all(Array.from({ length: 16 }, () => c.jobs.submit("k", null, { queue: "co-off" })));
      assert.deepEqual(sizes, Array(16).fill(1));
    });

    await t.test("a worker's concurrent completions share requests; every job succeeds once", async () => {
      const { c } = counted();
      const queue = "co-worker", n = 200;
      const subs = await Promise.all(Array.from({ length: n }, (_, i) => c.jobs.submit("w", { i }, { queue })));
      const runs = new Map<number, number>();
      const w = c.worker({ id: "co-worker", queues: { [queue]: 32 }, pollWaitMs: 500 });
      w.handle("w", async (job) => { runs.set(job.id, (runs.get(job.id) ?? 0) + 1); return { i: (job.args as any).i }; });
      w.start();
      try {
        await poll("every job succeeded", 30000, async () =>
          (await c.jobs.list({ queue, state: "SUCCEEDED", pageSize: 1000 })).jobs.length >= n || undefined, 100);
      } finally {
        await w.stop();
      }
      for (const s of subs) {
        const j = await c.jobs.get(s.id);
        assert.deepEqual([j.state, j.attempts, j.attempt_log?.at(-1)?.result], ["SUCCEEDED", 1, j.args]);
        assert.equal(runs.get(s.id), 1, `job ${s.id} ran once`);
      }
      const { complete } = w.outcomeRequests;
      assert.ok(complete < n / 2, `${complete} complete requests for ${n} jobs`);
    });
  });
});
