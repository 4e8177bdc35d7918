// A worker's completions, coalescing off and on: --jobs jobs are submitted
// (in batches), then one Worker with --concurrency slots runs them with a
// handler that returns at once; reports jobs/s from the worker's start to
// the last SUCCEEDED, complete requests per job and CPU per job (this
// process, and the coordd processes from /proc/PID/stat). Starts a 3-node
// cluster of its own (bin/coordd).
//   node dist/bench/worker.js --jobs 5000 --concurrency 64
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { Client } from "../src/index.js";
import { Cluster, poll } from "../test/cluster.js";

const { values } = parseArgs({ options: { jobs: { type: "string", default: "5000" }, concurrency: { type: "string", default: "64" } } });
const n = Number(values.jobs), conc = Number(values.concurrency);
const cluster = await Cluster.start(3);
const pids = cluster.nodes.map((nd) => nd.proc!.pid!);
const serverCPU = () => pids.reduce((t, pid) => {
  const f = readFileSync(`/proc/${pid}/stat`, "utf8");
  const x = f.slice(f.lastIndexOf(")") + 2).split(" ");
  return t + (Number(x[11]) + Number(x[12])) / 100;
}, 0);

for (const coalesce of [false, true]) {
  const c = new Client({ endpoints: cluster.endpoints(), owner: "bench" });
  const queue = `bench-worker-${coalesce}`;
  for (let i = 0; i < n; i += 1000) await c.jobs.submitBatch(Array.from({ length: Math.min(1000, n - i) }, () => ({ kind: "w", queue })));
  const w = c.worker({ id: `bench-${coalesce}`, queues: { [queue]: conc }, pollWaitMs: 1000, coalesce });
  let done = 0;
  w.handle("w", async () => { done++; return null; });
  const [cpu0, srv0, t0] = [process.cpuUsage(), serverCPU(), performance.now()];
  w.start();
  await poll("every job ran", 600_000, () => done >= n || undefined, 5);
  await poll("every job succeeded", 600_000, async () => Number((await c.jobs.stats(queue))[0]?.succeeded ?? 0) >= n || undefined, 20);
  const secs = (performance.now() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0), srv = serverCPU() - srv0;
  await w.stop();
  console.log(JSON.stringify({ sdk: "typescript", workload: "worker", jobs: n, concurrency: conc, coalesce,
    jobs_per_s: Math.round(n / secs), complete_requests_per_job: +(w.outcomeRequests.complete / n).toFixed(3),
    sdk_cpu_us_per_job: Math.round((cpu.user + cpu.system) / n), coordd_cpu_us_per_job: Math.round((srv * 1e6) / n) }));
  c.close();
}
cluster.stop();
