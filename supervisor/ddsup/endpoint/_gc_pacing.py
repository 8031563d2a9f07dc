"""Paced garbage collection for the endpoint process: short young-generation pauses.

CPython starts a young collection when allocations minus deallocations pass a
threshold. Under steady load old objects die as fast as new ones are born (answers from
a second ago are freed while new requests arrive), so that count stays low while
thousands of live young objects pile up; the collection that finally comes walks all of
them. At 4× overload (``bench/endpoint_overload.py``) such collections walk tens of
thousands of objects, and every 429 answered during one waits for it: the pauses set
the 429s' p99.

The endpoint's request paths create no reference cycles
(``tests/endpoint/test_endpoint_garbage.py`` checks it), so refcounting frees their
objects and the collector only has to catch rare cycles. So: freeze what start-up
allocated (modules, classes: never garbage), turn the automatic trigger off, collect the
young generation on a short timer (its size is then bounded by what ``YOUNG_EVERY``
seconds allocate), and everything once a minute.
"""

from __future__ import annotations

import gc

import trio

YOUNG_EVERY = 0.05  # seconds between young-generation collections
FULL_EVERY = 60.0  # seconds between full collections (rare cycles from error paths)


async def pace_garbage_collection() -> None:
    """Run for the server's lifetime; restores automatic collection when cancelled."""
    gc.freeze()
    gc.disable()
    try:
        next_full = trio.current_time() + FULL_EVERY
        while True:
            await trio.sleep(YOUNG_EVERY)
            if trio.current_time() >= next_full:
                gc.collect()
                next_full = trio.current_time() + FULL_EVERY
            else:
                gc.collect(0)
    finally:
        gc.enable()
        gc.unfreeze()
