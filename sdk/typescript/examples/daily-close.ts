// The seed's daily close (README.md, "The Go client"), in TypeScript: hold
// the lease, claim the occurrence's window, write each store's commission
// under the lease's token with a key per store and day, complete the
// window. A second run finds the window completed and does nothing; a
// replica paused past its TTL gets STALE_TOKEN for its next write.
//   COORD_HTTP_ENDPOINTS=127.0.0.1:7411,127.0.0.1:7421,127.0.0.1:7431 node dist/examples/daily-close.js 2026-09-25
import { Client } from "../src/index.js";

export async function dailyClose(c: Client, day: string, stores: number[], payload: (store: number) => unknown): Promise<boolean> {
  // --- the README's example: from here ---
  const closed = await c.withLease("daily-close", { ttl: 30_000 }, async (lease) => {
    const claim = await lease.claimWindow("daily-close", day);          // the occurrence's business day
    if (!claim.claimed) return false;                                    // completed already: nothing to do
    for (const store of stores) {                                        // STALE_TOKEN after a pause past the TTL
      await lease.fencedCommit(`commissions/store-${store}`, `close-${day}-store-${store}`, payload(store));
    }
    await lease.completeWindow("daily-close", day);
    return true;
  });
  // NotAcquiredError: another replica holds the lease. lease.signal aborts the moment the lease is lost.
  // --- to here ---
  return closed;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const c = new Client();
  const day = process.argv[2] ?? new Date().toISOString().slice(0, 10);
  const ran = await dailyClose(c, day, [1, 2, 3, 4, 5, 6], (s) => ({ store: s, commission: 42 }));
  console.log(ran ? `closed ${day}` : `${day} was closed already`);
  c.close();
}
