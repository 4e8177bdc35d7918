// Single submits per second, closed loop: --clients async callers of one
// Client each loop jobs.submit for --duration seconds (after a 1 s
// warm-up), with coalescing off and on (each --in-flight bound). Reports
// jobs/s, HTTP submit requests per job and CPU per job: this process's
// (process.cpuUsage) and the coordd processes' (utime+stime of
// /proc/PID/stat), so it starts a 3-node cluster of its own (bin/coordd).
//   node dist/bench/submit.js --clients 4,64 --duration 10 --in-flight 1,2,4   (in flight: default 1,2)
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { Client } from "../src/index.js";
import { Cluster } from "../test/cluster.js";

const { values } = parseArgs({ options: { clients: { type: "string", default: "4,64" }, duration: { type: "string", default: "10" },
  "in-flight": { type: "string", default: "1,2" } } });
const durationMs = Number(values.duration) * 1000;
const cluster = await Cluster.start(3);
const pids = cluster.nodes.map((n) => n.proc!.pid!);
const TICK = 100; // USER_HZ on Linux

/** The coordd processes' CPU seconds so far. */
function serverCPU(): number {
  let ticks = 0;
  for (const pid of pids) {
    const f = readFileSync(`/proc/${pid}/stat`, "utf8");
    const fields = f.slice(f.lastIndexOf(")") + 2).split(" "); // fields from the 3rd (state) on
    ticks += Number(fields[11]) + Number(fields[12]); // utime, stime: the 14th and 15th
  }
  return ticks / TICK;
}

async function run(c: Client, clients: number, queue: string, ms: number, lat: number[]): Promise<number> {
  let jobs = 0;
  const end = performance.now() + ms;
  await Promise.all(Array.from({ length: clients }, async () => {
    while (performance.now() < end) {
      const t0 = performance.now();
      await c.jobs.submit("bench", { n: jobs }, { queue });
      lat.push(performance.now() - t0);
      jobs++;
    }
  }));
  return jobs;
}

const pct = (xs: number[], p: number) => xs[Math.min(xs.length - 1, Math.floor(xs.length * p))];

const modes: { name: string; coalesce: false | { maxInFlight: number } }[] = [{ name: "off", coalesce: false },
  ...values["in-flight"]!.split(",").map((k) => ({ name: `on (${k} in flight)`, coalesce: { maxInFlight: Number(k) } }))];
for (const clients of values.clients!.split(",").map(Number)) {
  for (const m of modes) {
    const c = new Client({ endpoints: cluster.endpoints(), owner: "bench", coalesce: m.coalesce });
    let requests = 0;
    const call = c.transport.call.bind(c.transport);
    c.transport.call = (method, path, o) => {
      if (path === "/v1/queue/jobs") requests++;
      return call(method, path, o);
    };
    const queue = `bench-${clients}-${m.name.replace(/\W+/g, "")}`;
    await run(c, clients, queue, 1000, []);
    requests = 0;
    const lat: number[] = [];
    const [cpu0, srv0] = [process.cpuUsage(), serverCPU()];
    const jobs = await run(c, clients, queue, durationMs, lat);
    const cpu = process.cpuUsage(cpu0);
    const srv = serverCPU() - srv0;
    lat.sort((a, b) => a - b);
    console.log(JSON.stringify({ sdk: "typescript", workload: "submit", clients, coalesce: m.name,
      jobs_per_s: Math.round(jobs / (durationMs / 1000)), requests_per_job: +(requests / jobs).toFixed(3),
      sdk_cpu_us_per_job: Math.round((cpu.user + cpu.system) / jobs), coordd_cpu_us_per_job: Math.round((srv * 1e6) / jobs),
      p50_ms: +pct(lat, 0.5).toFixed(1), p99_ms: +pct(lat, 0.99).toFixed(1) }));
    c.close();
  }
}
cluster.stop();
