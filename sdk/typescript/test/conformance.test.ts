// The SDK conformance scenarios (sdk/CONFORMANCE.md) against a real
// 3-node cluster this file starts (test/cluster.ts). Test names are the
// scenario ids. The leader is killed in the last scenario.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { Cluster, poll } from "./cluster.js";
import { Child } from "./child.js";
import { readFileSync } from "node:fs";
import { Proxy } from "./proxy.js";
import { Client, CoorddError, LeaseLostError, NotAcquiredError, isReason, permanent } from "../src/index.js";
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

  it("held_lease_wait", async () => {
    const name = "conf/wait";
    const holder = await c.acquire(name, { ttl: 5000, owner: "holder" });
    await assert.rejects(c.acquire(name, { ttl: 5000, owner: "other" }),
      (e) => e instanceof NotAcquiredError && e.holder === "holder" && e.generation === holder.generation && e.remainingMs > 0);
    setTimeout(() => void holder.release(), 500);
    const t0 = Date.now();
    const waiter = await c.acquire(name, { ttl: 5000, owner: "other", wait: true });
    assert.equal(waiter.generation, holder.generation + 1);
    assert.ok(Date.now() - t0 < 3000, "granted at the release, not at the TTL");
    await waiter.release();
  });

  it("lost_before_regrant", async () => {
    // A running holder cut off from every node (a partition, not a freeze):
    // its signal fires before the successor's grant, in real time.
    const name = "conf/partitioned";
    const proxies = await Promise.all(cluster.endpoints().map((ep) => Proxy.start(ep)));
    const cut = new Client({ endpoints: proxies.map((p) => p.address), owner: "partitioned" });
    try {
      const lease = await cut.acquire(name, { ttl: 2000 });
      let abortedAt = 0;
      lease.signal.addEventListener("abort", () => { abortedAt = Date.now(); });
      await sleep(300);
      for (const p of proxies) p.blackhole = true; // nothing reaches the nodes any more, nothing comes back
      const succ = await c.acquire(name, { ttl: 5000, wait: true, owner: "successor" });
      const granted = (await c.getLease(name)).acquired_at as Date;
      assert.equal(succ.generation, lease.generation + 1);
      assert.ok(abortedAt > 0, "the holder's signal fired");
      assert.ok(abortedAt < granted.getTime(), `aborted at ${new Date(abortedAt).toISOString()}, granted at ${granted.toISOString()}`);
      assert.equal(lease.lost?.reason, "LOCAL_DEADLINE");
      assert.throws(() => lease.check(), (e) => e instanceof LeaseLostError);
      await succ.release();
    } finally {
      cut.close();
      for (const p of proxies) p.close();
    }
  });

  it("outcome_unknown", async () => {
    // Answers lost after the node applied the call: what a repeat cannot
    // apply twice is repeated and answers the first outcome; the rest is
    // an error with outcomeUnknown.
    const p = await Proxy.start((await cluster.leader()).http);
    const u = new Client({ endpoints: [p.address], owner: "unlucky", callTimeoutMs: 10000 });
    try {
      await u.listLeases({ prefix: "conf/unknown" }); // finds the leader before any answer is cut
      const name = "conf/unknown/lease", res = "conf/unknown/ledger", queue = "conf-unknown";
      p.cutAnswers(1);
      const lease = await u.acquire(name, { ttl: 30000 }); // the first renewal is 10 s away
      assert.deepEqual([p.cutDone, lease.generation, (await c.getLease(name)).generation], [1, 1, 1], "one grant");
      p.cutAnswers(1);
      assert.equal((await lease.fencedCommit(res, "key-1", { n: 1 })).duplicate, true, "the repeat learned the first outcome");
      assert.equal((await c.getResource(res)).commits, 1);
      p.cutAnswers(1);
      const job = await u.jobs.submit("k", { n: 1 }, { queue });
      assert.equal(job.duplicate, true);
      assert.deepEqual((await c.jobs.list({ queue })).jobs.map((j) => j.id), [job.id]);
      p.cutAnswers(1);
      await assert.rejects(u.fencedCommit(res, lease.token, undefined, { n: 2 }),
        (e) => e instanceof CoorddError && e.outcomeUnknown, "no key: not repeated");
      assert.equal((await c.getResource(res)).commits, 2, "it was applied");
      await c.jobs.cancel(job.id);
      p.cutAnswers(1);
      await assert.rejects(u.jobs.retry(job.id), (e) => e instanceof CoorddError && e.outcomeUnknown);
      assert.equal((await c.jobs.get(job.id)).state, "AVAILABLE");
      assert.equal(p.cutDone, 5);
      await lease.release();
    } finally {
      u.close();
      p.close();
    }
  });

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

  it("worker_lifecycle", async () => {
    const queue = "conf-lifecycle";
    const ok = await c.jobs.submit("ok", { x: 2 }, { queue });
    const bad = await c.jobs.submit("bad", null, { queue, maxAttempts: 2, backoff: { initial: 50, max: 100 } });
    const never = await c.jobs.submit("permanent", null, { queue, maxAttempts: 5 });
    const w = c.worker({ id: "lifecycle", queues: { [queue]: 2 }, pollWaitMs: 500 });
    let slowStarted = false;
    w.handle("ok", async (job, { token }) => {
      assert.equal(token, `job:${job.id}:${job.attempt}`);
      return { doubled: (job.args as { x: number }).x * 2 };
    });
    w.handle("bad", async () => { throw new Error("the ledger is closed"); });
    w.handle("permanent", async () => { throw permanent(new Error("no such store")); });
    w.handle("slow", async () => { slowStarted = true; await sleep(500); return "finished"; });
    w.handle("hang", async (_job, { signal }) => {
      await new Promise((r) => signal.addEventListener("abort", r)); // until handed back
      return "too late";
    });
    w.start();
    const final = (id: number) => poll(`job ${id} final`, 10000, async () => {
      const j = await c.jobs.get(id);
      return j.state === "SUCCEEDED" || j.state === "DEAD" ? j : undefined;
    }, 50);
    const [j1, j2, j3] = [await final(ok.id), await final(bad.id), await final(never.id)];
    assert.deepEqual([j1.state, j1.attempt_log?.at(-1)?.result], ["SUCCEEDED", { doubled: 4 }]);
    assert.deepEqual([j2.state, j2.attempts], ["DEAD", 2]);
    assert.match(j2.attempt_log?.at(-1)?.error ?? "", /the ledger is closed/);
    assert.deepEqual([j3.state, j3.attempts], ["DEAD", 1]);
    const slow = await c.jobs.submit("slow", null, { queue });
    await poll("the slow handler", 10000, () => slowStarted || undefined);
    assert.equal(await w.stop({ timeoutMs: 5000 }), 0, "stop waits for the running handler");
    assert.equal((await c.jobs.get(slow.id)).state, "SUCCEEDED");
    // A handler still running when stop gives up is handed back: failed, retryable.
    const w2 = c.worker({ id: "lifecycle-2", queues: { [queue]: 1 }, pollWaitMs: 500 });
    let started = false;
    w2.handle("hang", async (_job, { signal }) => {
      started = true;
      await new Promise((r) => signal.addEventListener("abort", r));
      return "too late";
    });
    w2.start();
    const hang = await c.jobs.submit("hang", null, { queue, backoff: { initial: 60000, max: 60000 } });
    await poll("the hanging handler", 10000, () => started || undefined);
    assert.equal(await w2.stop({ timeoutMs: 200 }), 1);
    const hb = await c.jobs.get(hang.id);
    assert.deepEqual([hb.state, hb.attempt_log?.at(-1)?.error], ["RETRYABLE", "worker shutdown"]);
    await c.jobs.cancel(hang.id);
  });

  it("cancel_reaches_handler", async () => {
    const queue = "conf-cancel";
    const w = c.worker({ id: "canceller", queues: { [queue]: 1 }, pollWaitMs: 500 });
    let started = false, endedAt = 0, reason = "";
    w.handle("long", async (_job, { signal }) => {
      started = true;
      await new Promise((r) => signal.addEventListener("abort", r)); // the first heartbeat is 10 s away
      endedAt = Date.now();
      reason = (signal.reason as CoorddError)?.reason ?? "";
      return "too late";
    });
    w.start();
    const sub = await c.jobs.submit("long", null, { queue, visibilityTimeout: 30000 });
    await poll("the handler", 10000, () => started || undefined, 20);
    const sent = Date.now();
    await c.jobs.cancel(sub.id);
    await poll("the handler's abort at the cancel", 5000, () => endedAt || undefined, 20);
    assert.ok(endedAt - sent < 2000, `aborted ${endedAt - sent} ms after the cancel`);
    assert.equal(reason, "JOB_CANCELLED");
    await w.stop({ timeoutMs: 2000 });
  });

  it("max_run_ends_handler", async () => {
    const queue = "conf-maxrun";
    const w = c.worker({ id: "maxrun", queues: { [queue]: 1 }, pollWaitMs: 500 });
    let startedAt = 0, endedAt = 0, reason = "";
    w.handle("long", async (_job, { signal }) => {
      startedAt = Date.now();
      await new Promise((r) => signal.addEventListener("abort", r)); // heartbeaten by the worker, runs on
      endedAt = Date.now();
      reason = (signal.reason as CoorddError)?.reason ?? "";
      return "too late";
    });
    w.start();
    const sub = await c.jobs.submit("long", null, { queue, maxRun: 1500, visibilityTimeout: 30000, maxAttempts: 1 });
    await poll("the handler's abort at max_run", 10000, () => endedAt || undefined, 20);
    assert.ok(endedAt - startedAt < 2000, `aborted ${endedAt - startedAt} ms after its start`);
    assert.equal(reason, "MAX_RUN_EXCEEDED");
    const j = await poll("the job dead", 10000, async () => {
      const g = await c.jobs.get(sub.id);
      return g.state === "DEAD" ? g : undefined;
    }, 50);
    assert.equal(j.attempt_log?.at(-1)?.outcome, "LAPSED");
    assert.match(j.attempt_log?.at(-1)?.error ?? "", /max_run exceeded/);
    await w.stop({ timeoutMs: 2000 });
  });

  it("jobs_and_schedules", async () => {
    const queue = "conf-jobs";
    const now = await c.jobs.submit("k", { when: "now" }, { queue });
    const at = await c.jobs.submit("k", null, { queue, runAt: new Date(Date.now() + 3600_000) });
    const later = await c.jobs.submit("k", null, { queue, after: 600_000 });
    const batch = await c.jobs.submitBatch([0, 1, 2].map((i) => ({ kind: "k", args: i, queue })));
    assert.equal(now.state, "AVAILABLE");
    assert.deepEqual([at.state, later.state], ["SCHEDULED", "SCHEDULED"]);
    assert.ok(Math.abs((at.run_at!.getTime() - now.run_at!.getTime()) / 1000 - 3600) < 5);
    assert.ok(Math.abs((later.run_at!.getTime() - now.run_at!.getTime()) / 1000 - 600) < 5);
    assert.equal(new Set(batch.map((b) => b.id)).size, 3);
    const got = await c.jobs.get(now.id);
    assert.deepEqual([got.queue, got.kind, got.args, got.state, got.visibility_timeout], [queue, "k", { when: "now" }, "AVAILABLE", 30000]);
    assert.deepEqual(new Set((await c.jobs.list({ queue, state: "scheduled" })).jobs.map((j) => j.id)), new Set([at.id, later.id]));
    assert.equal((await c.jobs.cancel(later.id)).job.state, "CANCELLED");
    assert.equal((await c.jobs.retry(later.id)).job.state, "AVAILABLE");
    await assert.rejects(c.jobs.get(10 ** 12), (e) => isReason(e, "JOB_NOT_FOUND"));
    const name = "conf-schedule";
    const put = await c.schedules.put({ name, schedule: "5 0 * * *", timeZone: "America/Sao_Paulo", overlap: "FORBID",
      job: { queue, kind: "close", args: { a: 1 } } });
    assert.deepEqual([put.created, put.schedule.revision, put.schedule.paused], [true, 1, false]);
    assert.ok(put.schedule.next_due instanceof Date, `next_due ${put.schedule.next_due}`);
    assert.equal((await c.schedules.pause(name)).schedule.paused, true);
    assert.equal((await c.schedules.resume(name)).schedule.paused, false);
    assert.ok((await c.schedules.list()).schedules.some((x) => x.spec.name === name));
    const g = await c.schedules.get(name, { next: 2 });
    assert.deepEqual([g.schedule.spec.schedule, (g.schedule.spec.job as any).args, g.next.length], ["5 0 * * *", { a: 1 }, 2]);
    await assert.rejects(c.schedules.pause("no-such-schedule"), (e) => isReason(e, "SCHEDULE_NOT_FOUND"));
    await assert.rejects(c.schedules.put({ name, schedule: "6 0 * * *", job: { queue, kind: "close" } }, { createOnly: true }),
      (e) => isReason(e, "SCHEDULE_EXISTS"));
    await c.schedules.delete(name);
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

  it("readme_daily_close_is_the_example", () => {
    const readme = readFileSync(new URL("../../README.md", import.meta.url), "utf8");
    const shown = readme.split("```ts\nconst c = new Client(")[1].split("```")[0].trimEnd().split("\n").slice(1);
    const src = readFileSync(new URL("../../examples/daily-close.ts", import.meta.url), "utf8").split("\n");
    const from = src.findIndex((l) => l.includes("--- the README's example: from here")) + 1;
    const to = src.findIndex((l) => l.includes("--- to here ---"));
    assert.deepEqual(shown, src.slice(from, to).map((l) => l.slice(2)));
    assert.equal(shown.length + 1, 11, "the README's count: these lines and `new Client`");
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
