// A client generated from the node's OpenAPI document (gen/coordd.d.ts,
// by openapi-typescript) with openapi-fetch: acquire a lease, submit a
// job (its args a JSON value), fetch it and complete it, against the node at COORDD_HTTP (run by
// integration/openapi_client_test.go). Prints one JSON line of what it
// saw; exits 1 on any refusal.
import createClient from "openapi-fetch";
import type { paths } from "./gen/coordd.js";

declare const process: { env: Record<string, string | undefined> };

const client = createClient<paths>({ baseUrl: process.env.COORDD_HTTP });

function must<T>(what: string, r: { data?: T; error?: unknown; response: Response }): T {
  if (r.error !== undefined || r.data === undefined) {
    throw new Error(`${what}: ${r.response.status} ${JSON.stringify(r.error)}`);
  }
  return r.data;
}

const lease = must("acquire", await client.POST("/v1/leases/{name}/acquire", {
  params: { path: { name: "ts-close" } },
  body: { owner: "ts-worker", ttl: "10s" },
}));
const submitted = must("submit", await client.POST("/v1/queue/jobs", {
  body: { jobs: [{ queue: "ts", kind: "close", unique_key: "ts-1", args: { invoice: 44 } }] },
}));
const fetched = must("fetch", await client.POST("/v1/queue/fetch", {
  body: { queues: ["ts"], max: 1, wait: "5s", worker_id: "ts-worker" },
}));
const claimed = fetched.jobs?.[0];
const done = must("complete", await client.POST("/v1/queue/complete", {
  body: { worker_id: "ts-worker", completions: [{ job_id: claimed?.job?.id, attempt: claimed?.attempt?.number }] },
}));
// A refusal is the one error body.
const stale = await client.POST("/v1/fence/commit", { body: { resource: "ts/r", token: "ts-close:99" } });
console.log(JSON.stringify({
  acquired: lease.acquired, generation: lease.lease?.generation,
  job: submitted.jobs?.[0]?.id, fetched: claimed?.job?.id, args: claimed?.job?.args, completed: done.results?.[0] !== undefined && !done.results[0].error,
  refused: { status: stale.response.status, reason: stale.error?.reason },
}));
