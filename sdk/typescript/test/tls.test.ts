// Mutual TLS: a node started with coordctl's development certificates. The
// SDK connects with the CA and a client certificate (the variables
// coordctl reads); no certificate, or one from another CA, is a typed
// UNAUTHENTICATED error, not retried.
import { after, before, it } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { ChildProcess } from "node:child_process";
import { coorddBinary, poll, repoRoot, spawnLogged } from "./cluster.js";
import { Client, CoorddError, isReason, optionsFromEnv } from "../src/index.js";

const ACL = `rules:
  - name: nodes
    identities: [node*]
    node_certificates: true
    ops: [admin]
  - name: admins
    identities: [admin]
    ops: [lease, window, fence, read, job, work, admin]
  - name: billing
    identities: [billing-a]
    ops: [lease, read]
    prefixes: [billing/]
`;

let dir: string;
let node: ChildProcess;
let http: string;

function coordctl(): string {
  const bin = process.env.COORDCTL_BIN ?? join(repoRoot, "bin", "coordctl");
  if (!existsSync(bin)) execFileSync("go", ["build", "-o", "bin/", "./cmd/coordctl"], { cwd: repoRoot, stdio: "inherit" });
  return bin;
}

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "coordd-tssdk-tls-"));
  const ctl = coordctl();
  execFileSync(ctl, ["certs", "dev", "--dir", join(dir, "certs"), "--nodes", "node1", "--clients", "admin,billing-a"]);
  execFileSync(ctl, ["certs", "dev", "--dir", join(dir, "other"), "--nodes", "node1", "--clients", "admin"]);
  writeFileSync(join(dir, "acl.yaml"), ACL);
  const c = (f: string) => join(dir, "certs", f);
  node = spawnLogged(coorddBinary(), ["--id", "node1", "--data-dir", join(dir, "node1"), "--grpc-addr", "127.0.0.1:0",
    "--raft-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--log-level", "warn",
    "--tls-cert", c("node1.pem"), "--tls-key", c("node1-key.pem"), "--tls-ca", c("ca.pem"), "--acl-file", join(dir, "acl.yaml")], join(dir, "node1.log"));
  http = (await poll("addresses.json", 30000, () => {
    const f = join(dir, "node1", "addresses.json");
    return existsSync(f) ? JSON.parse(readFileSync(f, "utf8")) : undefined;
  })).http;
});

after(() => {
  if (node?.pid && node.exitCode === null) process.kill(node.pid, "SIGKILL");
  rmSync(dir, { recursive: true, force: true });
});

it("tls_identities", async () => {
  const env = { COORD_HTTP_ENDPOINTS: http, COORD_TLS_CA: join(dir, "certs", "ca.pem"),
    COORD_TLS_CERT: join(dir, "certs", "admin.pem"), COORD_TLS_KEY: join(dir, "certs", "admin-key.pem") };
  const o = optionsFromEnv(env);
  assert.deepEqual(o.endpoints, [http]);
  const c = new Client(o);
  try {
    const lease = await poll("a lease over mutual TLS", 20000, () => c.acquire("tls/lease", { ttl: 5000 }), 100);
    assert.equal((await c.getLease("tls/lease")).identity, "admin", "the lease is bound to the certificate's identity");
    // The ACL: billing-a may hold billing/ leases only, and not release admin's.
    const billing = new Client({ endpoints: [http], owner: "billing", callTimeoutMs: 3000,
      tls: { ca: env.COORD_TLS_CA, cert: join(dir, "certs", "billing-a.pem"), key: join(dir, "certs", "billing-a-key.pem") } });
    try {
      const b = await billing.acquire("billing/close", { ttl: 5000 });
      assert.equal((await c.getLease("billing/close")).identity, "billing-a");
      await assert.rejects(c.transport.call("POST", "/v1/leases/billing/close/release", { idempotent: true,
        body: { owner: b.owner, generation: String(b.generation) } }), (e) => isReason(e, "IDENTITY_MISMATCH") && e.status === 403);
      await b.release();
      await assert.rejects(billing.acquire("payroll/close", { ttl: 5000 }),
        (e) => isReason(e, "PERMISSION_DENIED") && e.status === 403 && e.metadata.identity === "billing-a");
    } finally {
      billing.close();
    }
    await lease.release();
  } finally {
    c.close();
  }
  const noCert = new Client({ endpoints: [http], tls: { ca: env.COORD_TLS_CA } });
  await assert.rejects(noCert.getLease("tls/lease"), (e) => e instanceof CoorddError && e.code === "UNAUTHENTICATED" && e.status === 401);
  noCert.close();
  const other = join(dir, "other");
  const foreign = new Client({ endpoints: [http], tls: { ca: env.COORD_TLS_CA, cert: join(other, "admin.pem"), key: join(other, "admin-key.pem") },
    callTimeoutMs: 3000 });
  const t0 = Date.now();
  await assert.rejects(foreign.getLease("tls/lease"), (e) => e instanceof CoorddError && e.code === "UNAUTHENTICATED");
  assert.ok(Date.now() - t0 < 2000, "a refused identity is final, not retried");
  foreign.close();
  const untrusted = new Client({ endpoints: [http], callTimeoutMs: 3000,
    tls: { ca: join(other, "ca.pem"), cert: env.COORD_TLS_CERT, key: env.COORD_TLS_KEY } });
  await assert.rejects(untrusted.getLease("tls/lease"), (e) => e instanceof CoorddError && e.code === "UNAUTHENTICATED",
    "a server this CA did not sign");
  untrusted.close();
});
