// Acquire+release cycles per second over the HTTP API, closed loop: each
// of --clients loops acquire (a distinct name) then release, for
// --duration seconds after a 1 s warm-up. Without COORD_HTTP_ENDPOINTS it
// starts a 3-node cluster of its own (bin/coordd, as the tests do).
//   node dist/bench/acquire-release.js --clients 1,16,64 --duration 5
// Compare: bin/coordbench --cluster --workload acquire-release --clients 1,16,64 --duration 5s
import { parseArgs } from "node:util";
import { Client, optionsFromEnv } from "../src/index.js";
import { Cluster } from "../test/cluster.js";

const { values } = parseArgs({ options: { clients: { type: "string", default: "1,16,64" }, duration: { type: "string", default: "5" } } });
const durationMs = Number(values.duration) * 1000;
let cluster: Cluster | undefined;
let endpoints = process.env.COORD_HTTP_ENDPOINTS ? optionsFromEnv().endpoints! : undefined;
if (!endpoints) {
  cluster = await Cluster.start(3);
  endpoints = cluster.endpoints();
}
const c = new Client({ endpoints, owner: "bench" });

async function run(clients: number, ms: number, record: number[] | null): Promise<number> {
  let cycles = 0;
  const end = performance.now() + ms;
  await Promise.all(Array.from({ length: clients }, async (_, w) => {
    for (let i = 0; performance.now() < end; i++) {
      const t0 = performance.now();
      const l = await c.acquire(`bench/ts/${w}/${i % 64}`, { ttl: 10_000 });
      await l.release();
      record?.push(performance.now() - t0);
      cycles++;
    }
  }));
  return cycles;
}

const pct = (xs: number[], p: number) => xs[Math.min(xs.length - 1, Math.floor(xs.length * p))];
for (const n of values.clients!.split(",").map(Number)) {
  await run(n, 1000, null);
  const lat: number[] = [];
  const cycles = await run(n, durationMs, lat);
  lat.sort((a, b) => a - b);
  console.log(JSON.stringify({ sdk: "typescript", workload: "acquire-release", clients: n, cycles_per_s: Math.round(cycles / (durationMs / 1000)),
    p50_ms: +pct(lat, 0.5).toFixed(1), p99_ms: +pct(lat, 0.99).toFixed(1) }));
}
c.close();
cluster?.stop();
