"""The seed's daily close in Python: one replica at a time closes the day for
every store; each store's commission is a fenced commit with the key
close-<day>-store-<id>, so a replica that paused past its TTL is refused
(coordd.StaleToken) and a rerun writes nothing twice. The window is the
business day, completed once.

    COORD_HTTP_ENDPOINTS=127.0.0.1:7411,127.0.0.1:7421,127.0.0.1:7431 python3 examples/daily_close.py 2026-09-25
"""

import sys

import coordd


def close_day(client: coordd.Client, day: str, stores: list) -> bool:
    """Runs the close of ``day``; False when another replica holds the lease."""
    # --- the README's example, as it is
    try:
        with client.lease("daily-close", ttl=30) as lease:
            claim = lease.claim_window("daily-close", day)       # the occurrence's business day
            if claim.claimed:                                    # else completed already: nothing to do
                for store in stores:
                    key = f"close-{day}-store-{store}"
                    lease.fenced_commit(f"commissions/store-{store}", key, {"store": store})  # StaleToken after a pause
                claim.complete()
    except coordd.NotAcquired:
        return False                                             # another replica holds the lease
    # --- end of the example
    return True


if __name__ == "__main__":
    ran = close_day(coordd.Client(), sys.argv[1] if len(sys.argv) > 1 else "2026-09-25", list(range(1, 7)))
    print("closed" if ran else "skipped: another replica holds daily-close")
