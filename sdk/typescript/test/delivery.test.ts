// The endpoint's side of HTTP delivery (src/delivery.ts): Standard Webhooks
// signatures on the spec's published vector, tampering, old timestamps,
// wrong secrets and key rotation refused or accepted without a cluster; then
// the delivery_endpoint scenario (sdk/CONFORMANCE.md): a 3-node cluster
// started with delivery on delivers a job to a node:http server built with
// deliveryHandler.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { randomBytes } from "node:crypto";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { AddressInfo } from "node:net";
import { Cluster, poll } from "./cluster.js";
import {
  Client, DeliveryInvalidError, SignatureInvalidError, deliveryHandler, deliveryStatus, parseSecret, permanent, signDelivery,
  verifyDelivery, CoorddError, type Delivery,
} from "../src/index.js";

// The Standard Webhooks repository's published vector (webhook/webhook_test.go's).
const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const wid = "msg_p5jXN8AQM9LWM0D4loKWxJek", ts = 1614265330, body = '{"test": 2432232314}';
const signature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";
const now = ts * 1000;

/** A coordd delivery's headers (as node:http gives them: lower-case) for job 7, attempt 2, signed with sig. */
function headers(sig: string, o: { ts?: number; id?: string } = {}): Record<string, string> {
  return { "webhook-id": o.id ?? "job_7", "webhook-timestamp": String(o.ts ?? ts), "webhook-signature": sig,
    "coordd-job-id": "7", "coordd-attempt": "2", "coordd-fencing-token": "job:7:2", "idempotency-key": "k",
    "coordd-deadline": "2021-02-25T15:03:10.5Z" };
}

describe("signatures", () => {
  it("sign_matches_the_spec_vector", () => {
    assert.equal(signDelivery(secret, wid, ts, body), signature);
    assert.equal(signDelivery(secret.slice("whsec_".length), wid, ts, Buffer.from(body)), signature, "the prefix is optional");
  });

  it("verify_returns_the_delivery", () => {
    const sig = signDelivery(secret, "job_7", ts, body);
    const d = verifyDelivery(secret, headers(sig), body, { now: now + 10_000 });
    assert.deepEqual(d, { jobId: 7, attempt: 2, token: "job:7:2", idempotencyKey: "k", webhookId: "job_7",
      deadline: new Date("2021-02-25T15:03:10.5Z"), args: { test: 2432232314 } });
    // A schedule's job, with fetch's Headers (any case) and an empty body.
    const h = new Headers({ ...headers(signDelivery(secret, "job_7", ts, "")), "Coordd-Window": "2021-02-25",
      "Coordd-Occurrence": "2021-02-25T00:00:00Z" });
    const s = verifyDelivery([secret], h, new Uint8Array(), { now });
    assert.equal(s.args, null);
    assert.equal(s.window, "2021-02-25");
    assert.deepEqual(s.occurrence, new Date("2021-02-25T00:00:00Z"));
  });

  it("key_rotation_two_signatures", () => {
    const old = "whsec_" + Buffer.alloc(32, 7).toString("base64");
    const both = `${signDelivery(old, "job_7", ts, body)} ${signDelivery(secret, "job_7", ts, body)}`;
    // An endpoint that knows either key (or both) accepts the request signed by both.
    for (const keys of [[secret], [old], [old, secret]]) verifyDelivery(keys, headers(both), body, { now });
    // An endpoint already on a new key accepts the old one's signature while it lists both.
    verifyDelivery([secret, old], headers(signDelivery(old, "job_7", ts, body)), body, { now });
    assert.throws(() => verifyDelivery("whsec_" + Buffer.alloc(32, 9).toString("base64"), headers(both), body, { now }), SignatureInvalidError);
  });

  it("refuses_tampering_old_timestamps_and_wrong_secrets", () => {
    const sig = signDelivery(secret, "job_7", ts, body);
    const other = "whsec_" + Buffer.alloc(32, 1).toString("base64");
    const cases: [string, () => unknown][] = [
      ["tampered body", () => verifyDelivery(secret, headers(sig), '{"test": 1}', { now })],
      ["timestamp 301 s old", () => verifyDelivery(secret, headers(sig), body, { now: now + 301_000 })],
      ["timestamp 301 s ahead", () => verifyDelivery(secret, headers(sig), body, { now: now - 301_000 })],
      ["tampered timestamp", () => verifyDelivery(secret, headers(sig, { ts: ts + 1 }), body, { now })],
      ["tampered webhook-id", () => verifyDelivery(secret, headers(sig, { id: "job_8" }), body, { now })],
      ["wrong secret", () => verifyDelivery(other, headers(sig), body, { now })],
      ["v2 only", () => verifyDelivery(secret, headers("v2," + sig.slice(3)), body, { now })],
      ["a truncated signature", () => verifyDelivery(secret, headers(sig.slice(0, -4)), body, { now })],
      ["no signature", () => verifyDelivery(secret, {}, body, { now })],
      ["timestamp not seconds", () => verifyDelivery(secret, { ...headers(sig), "webhook-timestamp": "soon" }, body, { now })],
      ["no secret", () => verifyDelivery([], headers(sig), body, { now })],
      ["a short secret", () => parseSecret("whsec_" + "A".repeat(8))],
      ["a secret not base64", () => parseSecret("whsec_not base64!")],
    ];
    for (const [why, f] of cases) {
      assert.throws(f, (e) => e instanceof SignatureInvalidError && e.reason === "SIGNATURE_INVALID" && deliveryStatus(e) === 401, why);
    }
    // Within the tolerance, and with the check turned off.
    verifyDelivery(secret, headers(sig), body, { now: now + 299_000 });
    verifyDelivery(secret, headers(sig), body, { now: now + 86400_000, toleranceSeconds: 0 });
  });

  it("refuses_headers_the_signature_does_not_bind", () => {
    const sig = signDelivery(secret, "job_7", ts, body);
    const cases: [string, Record<string, string>, string][] = [
      ["Coordd-Job-Id", { "coordd-job-id": "8" }, body],
      ["Coordd-Fencing-Token", { "coordd-fencing-token": "job:8:2" }, body],
      ["Coordd-Fencing-Token", { "coordd-attempt": "3" }, body],
      ["Idempotency-Key", { "idempotency-key": "" }, body],
      ["Coordd-Deadline", { "coordd-deadline": "tomorrow" }, body],
    ];
    for (const [field, change, b] of cases) {
      assert.throws(() => verifyDelivery(secret, { ...headers(sig), ...change }, b, { now }),
        (e) => e instanceof DeliveryInvalidError && e.metadata.field === field && deliveryStatus(e) === 400, JSON.stringify(change));
    }
    const notJSON = signDelivery(secret, "job_7", ts, "{");
    assert.throws(() => verifyDelivery(secret, headers(notJSON), "{", { now }), (e) => e instanceof DeliveryInvalidError && e.metadata.field === "body");
    const notCoordd = signDelivery(secret, wid, ts, body);
    assert.throws(() => verifyDelivery(secret, headers(notCoordd, { id: wid }), body, { now }),
      (e) => e instanceof DeliveryInvalidError && e.metadata.field === "webhook-id");
  });

  it("status_of_errors", () => {
    const refused = (reason: string, code = "FAILED_PRECONDITION") => new CoorddError({ code, reason, status: 409 });
    assert.equal(deliveryStatus(refused("STALE_TOKEN")), 409);
    assert.equal(deliveryStatus(refused("ATTEMPT_EXPIRED")), 409);
    assert.equal(deliveryStatus(refused("UNAVAILABLE", "UNAVAILABLE")), 503);
    assert.equal(deliveryStatus(refused("TIMEOUT", "DEADLINE_EXCEEDED").asUnknown()), 503);
    assert.equal(deliveryStatus(refused("PERMISSION_DENIED", "PERMISSION_DENIED")), 502);
    assert.equal(deliveryStatus(permanent(new Error("no such invoice"))), 400);
    assert.equal(deliveryStatus(new Error("bug")), 500);
  });
});

describe("handler", () => {
  it("handler_refuses_without_running", async () => {
    const c = new Client({ endpoints: ["127.0.0.1:1"] }); // never called
    let ran = 0;
    const statuses: number[] = [];
    const server = createServer(deliveryHandler(c, secret, async () => { ran++; return null; },
      { maxBodyBytes: 64, toleranceSeconds: 0, onError: (_e, st) => statuses.push(st) }));
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
    try {
      const post = async (h: Record<string, string>, b: string) => {
        const r = await fetch(url, { method: "POST", headers: h, body: b });
        return [r.status, ((await r.json()) as { reason: string }).reason];
      };
      const sig = signDelivery(secret, "job_7", ts, body);
      assert.deepEqual(await post(headers(sig), '{"test": 1}'), [401, "SIGNATURE_INVALID"]);
      assert.deepEqual(await post({ ...headers(sig), "coordd-attempt": "3" }, body), [400, "DELIVERY_INVALID"]);
      assert.deepEqual(await post(headers(sig), JSON.stringify({ pad: "x".repeat(100) })), [413, "HANDLER_FAILED"]);
      assert.equal(ran, 0);
      assert.deepEqual(statuses, [401, 400, 413]);
      // A handler that resolves without a commit: 200 with its value as JSON.
      const ok = await fetch(url, { method: "POST", headers: headers(sig), body });
      assert.deepEqual([ok.status, await ok.json(), ran], [200, null, 1]);
    } finally {
      await new Promise((r) => server.close(r));
      c.close();
    }
  });
});

describe("delivery_endpoint", () => {
  let cluster: Cluster;
  let c: Client;
  let server: Server;
  let dir: string;
  const key = "whsec_" + randomBytes(32).toString("base64");
  const seen: { d: Delivery; accepted: boolean; duplicate: boolean }[] = [];
  const refused: number[] = [];
  let url = "";

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), "coordd-tssdk-secrets-"));
    writeFileSync(join(dir, "secrets"), `billing ${key}\n`);
    cluster = await Cluster.start(3, ["--delivery-allow", "127.0.0.1", "--delivery-secrets", join(dir, "secrets")]);
    c = new Client({ endpoints: cluster.endpoints(), owner: "delivery" });
    server = createServer(deliveryHandler(c, key, async (d, { commit }) => {
      const args = d.args as { invoice: number };
      const r = await commit(`invoices/${args.invoice}/charge`, undefined, args);
      seen.push({ d, accepted: r.accepted, duplicate: r.duplicate });
      return { charged: args.invoice, attempt: d.attempt };
    }, { onError: (_e, status) => refused.push(status) }));
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/charge`;
  });

  after(async () => {
    await new Promise((r) => server?.close(r));
    c?.close();
    cluster?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  const finished = (id: number) => poll(`job ${id} finished`, 20000, async () => {
    const j = await c.jobs.get(id);
    return j.state === "SUCCEEDED" || j.state === "DEAD" ? j : undefined;
  }, 50);

  it("delivery_endpoint", async () => {
    const job = await c.jobs.submit("charge", { invoice: 42 }, { queue: "billing", uniqueKey: "charge-42",
      target: { url, secret: "billing", timeout: 5000 } });
    const done = await finished(job.id);
    assert.equal(done.state, "SUCCEEDED");
    assert.deepEqual(done.attempt_log?.at(-1)?.result, { charged: 42, attempt: 1 }, "the handler's result is the job's");
    assert.equal(seen.length, 1);
    const { d, accepted, duplicate } = seen[0];
    assert.deepEqual([d.jobId, d.attempt, d.token, d.idempotencyKey, d.webhookId], [job.id, 1, `job:${job.id}:1`, "charge-42", `job_${job.id}`]);
    assert.deepEqual(d.args, { invoice: 42 });
    assert.ok(d.deadline.getTime() > Date.now() - 60_000, `deadline ${d.deadline.toISOString()}`);
    assert.deepEqual([accepted, duplicate], [true, false]);
    assert.equal((await c.getResource("invoices/42/charge")).commits, 1);

    // The same request again (a repeated delivery): the key makes the commit a duplicate of the first, 200.
    // A token of an attempt the job never gave out, with another key: the commit is refused, 409 (not retried).
    const body = JSON.stringify({ invoice: 42 });
    const t = Math.floor(Date.now() / 1000);
    const send = (attempt: number, key: string, idempotencyKey = "charge-42") => fetch(url, { method: "POST", body, headers: {
      "webhook-id": `job_${job.id}`, "webhook-timestamp": String(t), "webhook-signature": signDelivery(key, `job_${job.id}`, t, body),
      "coordd-job-id": String(job.id), "coordd-attempt": String(attempt), "coordd-fencing-token": `job:${job.id}:${attempt}`,
      "idempotency-key": idempotencyKey, "coordd-deadline": new Date(Date.now() + 5000).toISOString() } });
    const again = await send(1, key);
    assert.equal(again.status, 200);
    assert.deepEqual(await again.json(), { charged: 42, attempt: 1 });
    assert.deepEqual([seen[1].accepted, seen[1].duplicate], [true, true]);
    const stale = await send(2, key, "charge-42-again");
    assert.equal(stale.status, 409);
    assert.equal(((await stale.json()) as { reason: string }).reason, "ATTEMPT_LOST");
    const forged = await send(1, "whsec_" + randomBytes(32).toString("base64"));
    assert.equal(forged.status, 401);
    assert.equal((await c.getResource("invoices/42/charge")).commits, 1, "no second effect");

    // Unsigned (the target names no secret): the endpoint answers 401, which fails the job for good.
    const unsigned = await c.jobs.submit("charge", { invoice: 43 }, { queue: "billing", maxAttempts: 3, target: { url } });
    const dead = await finished(unsigned.id);
    assert.equal(dead.state, "DEAD");
    assert.match(dead.attempt_log?.at(-1)?.error ?? "", /401/);
    assert.equal(dead.attempt_log?.length, 1, "401 is not retried");
    assert.deepEqual(refused, [409, 401, 401]);
  });
});
