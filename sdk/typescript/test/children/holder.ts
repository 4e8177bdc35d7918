// A lease holder that is frozen by its parent (SIGSTOP, or its own event
// loop blocked on the parent's command) past its TTL, then wakes and sends
// the fenced write it was about to send.
import { Client, CoorddError } from "../../src/index.js";
import { commands, emit } from "../child.js";

const a = JSON.parse(process.argv[2]);
const c = new Client({ endpoints: a.endpoints, owner: "frozen-holder" });
const lease = await c.acquire(a.name, { ttl: a.ttl });
lease.signal.addEventListener("abort", () => {
  const r = lease.signal.reason as CoorddError;
  emit("aborted", { at: Date.now(), reason: r.reason, deadline: lease.deadline.getTime() });
});
emit("acquired", { generation: lease.generation, token: lease.token });
const first = await lease.fencedCommit(a.resource, `${a.resource}-1`, { by: "holder", step: 1 });
// Taken before the parent can see wrote1 (and freeze us), so a freeze
// anywhere from here on shows as a gap.
const wroteAt = Date.now();
emit("wrote1", { accepted: first.accepted });

async function writeAfterWake(frozenMs: number): Promise<void> {
  const abortedAtWake = lease.signal.aborted;
  const write = lease.fencedCommit(a.resource, `${a.resource}-2`, { by: "holder", step: 2 });
  const abortedBeforeSend = lease.signal.aborted; // fencedCommit checks the deadline before it sends
  emit("woke", { frozenMs, abortedAtWake, abortedBeforeSend });
  try {
    const r = await write;
    emit("wrote2", { accepted: r.accepted });
  } catch (e) {
    emit("wrote2", { reason: (e as CoorddError).reason, code: (e as CoorddError).code });
  }
}

if (a.mode === "block") {
  for await (const line of commands()) {
    const cmd = JSON.parse(line);
    const t0 = Date.now();
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, cmd.blockMs); // the event loop stops
    await writeAfterWake(Date.now() - t0);
    break;
  }
} else {
  // Work in small steps until a step takes far longer than it should: a freeze (SIGSTOP).
  for (let last = wroteAt; ; ) {
    await new Promise((r) => setTimeout(r, 20));
    const gap = Date.now() - last;
    if (gap > a.ttl / 2) {
      await writeAfterWake(gap);
      break;
    }
    last += gap;
  }
}
c.close();
process.exit(0);
