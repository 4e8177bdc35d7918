// A queue worker whose handler records its effect (a fenced commit with a
// key per job), says so, and then hangs until its parent kills it.
import { Client } from "../../src/index.js";
import { emit } from "../child.js";

const a = JSON.parse(process.argv[2]);
const c = new Client({ endpoints: a.endpoints });
const w = c.worker({ id: "doomed-worker", queues: { [a.queue]: 1 }, pollWaitMs: 1000 });
w.handle("effect", async (job, { fencedCommit }) => {
  const r = await fencedCommit(`effects/${job.id}`, `effect-${job.id}`, { by: "doomed-worker", attempt: job.attempt });
  emit("committed", { id: job.id, attempt: job.attempt, duplicate: r.duplicate });
  await new Promise(() => {}); // mid-job when killed
});
w.start();
emit("started");
