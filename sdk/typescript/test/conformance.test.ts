// The SDK conformance scenarios (sdk/CONFORMANCE.md) against a real
// 3-node cluster this file starts (test/cluster.ts). Test names are the
// scenario ids. The leader is killed in the last scenario.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { Cluster, poll } from "./cluster.js";
import { Child } from "./child.js";
import { Client, CoorddError, LeaseLostError, NotAcquiredError, isReason } from "../src/index.js";
import { dailyClose } from "../examples/daily-close.js";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let cluster: Cluster;
let c: Client;
const children: Child[] = [];

before(async () => {
  cluster = await Cluster.start(3);
  c = new Client({ endpoints: cluster.endpoints(), owner: "conformance" });
});

after(async () => {
  for (const ch of children) await ch.kill();
  c?.close();
  cluster?.stop();
});

function child(script: string, args: Record<string, unknown>): Child {
  const ch = new Child(script, { endpoints: cluster.endpoints(), ...args });
  children.push(ch);
  return ch;
}

describe("conformance", () => {
  it("acquire_renew_release", async () => {
    const ttl = 1500;
    const lease = await c.acquire("conf/arr", { ttl });
    assert.equal(lease.token, `conf/arr:${lease.generation}`);
    await sleep(ttl * 2.5); // more than two TTLs: only renewals keep it
    assert.equal(lease.signal.aborted, false, "the lease was kept");
    assert.ok(lease.renewals >= 5, `renewals every TTL/3: ${lease.renewals} in 2.5 TTLs`);
    const info = await c.getLease("conf/arr");
    assert.equal(info.generation, lease.generation);
    assert.equal(info.owner, "conformance");
    assert.equal(info.ttl, ttl);
    assert.ok(info.expires_in > 0 && info.expires_in <= ttl, `expires_in ${info.expires_in}`);
    await assert.rejects(c.acquire("conf/arr", { ttl, owner: "other" }), (e) => e instanceof NotAcquiredError && e.holder === "conformance");
    await lease.release();
    assert.equal(lease.signal.aborted, true, "release aborts the signal");
    assert.equal((await c.getLease("conf/arr")).released, true);
    const again = await c.acquire("conf/arr", { ttl, owner: "other" });
    assert.equal(again.generation, lease.generation + 1);
    await again.release();
  });

  for (const mode of ["sigstop", "block"] as const) {
    it(`frozen_holder_is_fenced (${mode === "sigstop" ? "SIGSTOP" : "event loop blocked"})`, async () => {
      const ttl = 1500, name = `conf/frozen-${mode}`, resource = `conf/frozen-${mode}/res`;
      const h = child("holder.js", { name, ttl, resource, mode });
      const acquired = await h.next("acquired");
      assert.equal((await h.next("wrote1")).accepted, true);
      if (mode === "sigstop") h.signal("SIGSTOP");
      else h.send({ blockMs: ttl * 3 });
      // The successor waits for the lease: granted when the holder's TTL runs out on the server.
      const succ = await c.acquire(name, { ttl: 5000, wait: true, owner: "successor" });
      assert.equal(succ.generation, acquired.generation + 1);
      const granted = (await c.getLease(name)).acquired_at as Date;
      assert.ok(granted instanceof Date, `acquired_at ${granted}`);
      if (mode === "sigstop") h.signal("SIGCONT");
      const woke = await h.next("woke");
      const aborted = await h.next("aborted");
      const wrote2 = await h.next("wrote2");
      assert.equal(aborted.reason, "LOCAL_DEADLINE");
      assert.ok(aborted.deadline < granted.getTime(),
        `the holder's local deadline (${new Date(aborted.deadline).toISOString()}) precedes the successor's grant (${granted.toISOString()})`);
      assert.equal(woke.abortedBeforeSend, true, "the signal fired before the holder's write left");
      assert.equal(wrote2.reason, "STALE_TOKEN", `the holder's write after waking: ${JSON.stringify(wrote2)}`);
      // The successor's write is accepted; the stale holder's first write stays the only other one.
      const mine = await succ.fencedCommit(resource, `${resource}-succ`, { by: "successor" });
      assert.equal(mine.accepted, true);
      assert.equal((await c.getResource(resource)).commits, 2);
      await succ.release();
      await h.kill();
    });
  }

  it("idempotency_key_replays", async () => {
    const lease = await c.acquire("conf/idem", { ttl: 5000 });
    const first = await lease.fencedCommit("conf/idem/res", "idem-key-1", { total: 12 });
    assert.deepEqual([first.accepted, first.duplicate, first.payload], [true, false, { total: 12 }]);
    const again = await c.fencedCommit("conf/idem/res", lease.token, "idem-key-1", { total: 99 });
    assert.deepEqual([again.accepted, again.duplicate, again.payload, again.generation], [true, true, { total: 12 }, lease.generation]);
    assert.equal((await c.getResource("conf/idem/res")).commits, 1);
    // The same request id returns the same grant; the same unique key the same job.
    const rid = "conf-idem-request";
    const a1 = await c.acquire("conf/idem-rid", { ttl: 5000, requestId: rid });
    const a2 = await c.acquire("conf/idem-rid", { ttl: 5000, requestId: rid });
    assert.equal(a2.generation, a1.generation);
    const j1 = await c.jobs.submit("noop", { n: 1 }, { queue: "conf-idem", uniqueKey: "conf-idem-job" });
    const j2 = await c.jobs.submit("noop", { n: 2 }, { queue: "conf-idem", uniqueKey: "conf-idem-job" });
    assert.deepEqual([j2.id, j2.duplicate, j1.duplicate], [j1.id, true, false]);
    assert.deepEqual((await c.jobs.get(j1.id)).args, { n: 1 });
    await a2.release();
    await a1.release().catch(() => {});
    await lease.release();
  });

  it("worker_killed_mid_job", async () => {
    const queue = "conf-killed";
    const w = child("worker.js", { queue });
    await w.next("started");
    const sub = await c.jobs.submit("effect", { invoice: 44 }, { queue, visibilityTimeout: 2000, maxAttempts: 5,
      backoff: { initial: 100, max: 200 } });
    const first = await w.next("committed");
    assert.deepEqual([first.id, first.attempt, first.duplicate], [sub.id, 1, false]);
    await w.kill(); // SIGKILL mid-job: no complete, no fail, no more heartbeats
    const survivor = c.worker({ id: "survivor", queues: { [queue]: 2 }, pollWaitMs: 1000 });
    const runs: number[] = [];
    survivor.handle("effect", async (job, { fencedCommit, signal }) => {
      runs.push(job.attempt);
      const r = await fencedCommit(`effects/${job.id}`, `effect-${job.id}`, { by: "survivor", attempt: job.attempt });
      assert.equal(signal.aborted, false);
      return { duplicate: r.duplicate };
    });
    survivor.start();
    try {
      const done = await poll("the job re-run and succeeded", 20000, async () => {
        const j = await c.jobs.get(sub.id);
        return j.state === "SUCCEEDED" ? j : undefined;
      }, 100);
      assert.deepEqual(runs, [2], "run again, as attempt 2");
      assert.equal(done.attempts, 2);
      const log = done.attempt_log ?? [];
      assert.equal(log.length, 2);
      assert.equal(log[0].worker_id, "doomed-worker");
      assert.equal(log[1].worker_id, "survivor");
      assert.deepEqual(log[1].result, { duplicate: true }, "the second attempt found the effect recorded");
      const effect = await c.getResource(`effects/${sub.id}`);
      assert.equal(effect.commits, 1, "the effect counted once");
    } finally {
      assert.equal(await survivor.stop({ timeoutMs: 2000 }), 0);
    }
  });

  it("bad_input_typed_error", async () => {
    // Found locally, before any call:
    await assert.rejects(c.acquire("conf/bad", { ttl: 0 }), (e) => isReason(e, "INVALID_ARGUMENT") && e.metadata.field === "ttl");
    assert.throws(() => c.fencedCommit("conf/bad/res", "no-generation", "k"), (e) => isReason(e, "INVALID_TOKEN") && e.code === "INVALID_ARGUMENT");
    // Refused by the server: a TTL below the cluster's minimum, a priority out of range.
    await assert.rejects(c.acquire("conf/bad", { ttl: 10 }), (e) => {
      assert.ok(e instanceof CoorddError);
      assert.deepEqual([e.code, e.reason, e.status, e.outcomeUnknown], ["INVALID_ARGUMENT", "INVALID_ARGUMENT", 400, false]);
      assert.match(e.metadata.field ?? "", /ttl/);
      return true;
    });
    await assert.rejects(c.jobs.submit("k", null, { priority: 1000 }), (e) => isReason(e, "INVALID_ARGUMENT") && e.status === 400);
    // An unknown field: the one error body, typed.
    await assert.rejects(c.transport.call("POST", "/v1/fence/commit", { idempotent: true, body: { resource: "r", bogus: 1 } }),
      (e) => e instanceof CoorddError && e.code === "INVALID_ARGUMENT" && e.status === 400);
    // A stale token, a lost lease, a missing job: refusals with their reasons.
    const l = await c.acquire("conf/bad-stale", { ttl: 5000 });
    await l.release();
    await assert.rejects(c.fencedCommit("conf/bad-stale/res", `conf/bad-stale:${l.generation}`, "k1"),
      (e) => isReason(e, "LEASE_RELEASED", "STALE_TOKEN") && e.code === "FAILED_PRECONDITION" && e.status === 409);
    await assert.rejects(c.jobs.get(987654321), (e) => isReason(e, "JOB_NOT_FOUND") && e.status === 404);
    await assert.rejects(c.withLease("conf/bad-stale", { ttl: 5000 }, async () => { throw new Error("work failed"); }), /work failed/);
    assert.equal((await c.getLease("conf/bad-stale")).released, true, "withLease released after the work threw");
  });

  it("daily_close_example", async () => {
    const stores = [1, 2, 3, 4, 5, 6];
    const ran = await dailyClose(c, "2026-09-25", stores, (s) => ({ store: s, commission: 42 }));
    assert.equal(ran, true);
    for (const s of stores) {
      const r = await c.getResource(`commissions/store-${s}`);
      assert.deepEqual([r.commits, r.last_idempotency_key], [1, `close-2026-09-25-store-${s}`]);
    }
    assert.equal((await c.getWindow("daily-close", "2026-09-25")).state, "COMPLETED");
    assert.equal(await dailyClose(c, "2026-09-25", stores, () => null), false, "a second run finds the window completed");
    assert.equal((await c.getResource("commissions/store-1")).commits, 1);
  });

  it("leader_killed_lease_kept", async () => {
    const lease = await c.acquire("conf/failover", { ttl: 4000 });
    await sleep(500);
    const leader = await cluster.leader();
    const before = lease.renewals;
    await cluster.kill(leader);
    const next = await cluster.leader(15000);
    assert.notEqual(next.id, leader.id);
    await poll("renewals on the new leader", 10000, () => lease.renewals >= before + 3 || undefined, 50);
    assert.equal(lease.signal.aborted, false, `the lease was kept: ${lease.lost?.message}`);
    const info = await c.getLease("conf/failover");
    assert.deepEqual([info.generation, info.owner, info.released], [lease.generation, "conformance", false]);
    const w = await lease.fencedCommit("conf/failover/res", "failover-1", { after: "failover" });
    assert.equal(w.accepted, true);
    await lease.release();
    assert.ok(!(lease.lost instanceof LeaseLostError));
  });
});
