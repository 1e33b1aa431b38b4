"""The words-load section's clients, a process of their own (`python -m
loadtest._words_clients URL PATH`): `WORDS_CLIENTS` clients ask for PATH (`/v1/casts/<id>/words`,
or `/healthz` as the control: what the clients themselves cost the CPU) over and over while
the parent says `go` on stdin, idle after `pause`, and end at `stop` (or
when stdin closes), then print their answers' statuses as one JSON line (status -> count; 0:
no answer).

Commands come as lines on a pipe, read by one thread: nothing is polled across processes (a
multiprocessing manager's proxies, asked by sixty clients, kept two processes busy on both
cores, and the harness never finished).
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from collections import Counter

import httpx

WORDS_CLIENTS = 60


def main(url: str, path: str) -> None:
    asking = threading.Event()
    done = threading.Event()

    def listen() -> None:
        for line in sys.stdin:
            command = line.strip()
            if command == "go":
                asking.set()
            elif command == "pause":
                asking.clear()
            elif command == "stop":
                break
        done.set()

    async def ask_all() -> Counter[int]:
        seen: Counter[int] = Counter()
        limits = httpx.Limits(max_connections=WORDS_CLIENTS + 4)
        async with httpx.AsyncClient(timeout=60, limits=limits) as client:

            async def ask() -> None:
                while not done.is_set():
                    if not asking.is_set():
                        await asyncio.sleep(0.1)
                        continue
                    try:
                        answer = await client.get(url + path)
                        seen[answer.status_code] += 1
                    except httpx.HTTPError:
                        seen[0] += 1

            await asyncio.gather(*(ask() for _ in range(WORDS_CLIENTS)))
        return seen

    threading.Thread(target=listen, daemon=True).start()
    seen = asyncio.run(ask_all())
    print(json.dumps({str(status): n for status, n in sorted(seen.items())}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
