"""The connection's reader as `wyoming.event.async_read_event` sees it: its parts bounded.

The reference decoder reads an event with `readline()` (the header, bounded by the stream's
own limit) and `readexactly(n)` for its data and payload, with whatever `n` the header says.
`BoundedReader` refuses an `n` that is not a whole number of bytes up to `MAX_PART_BYTES`
before anything is buffered, so an absurd `data_length` costs nothing; the decoder reads the
refusal as a malformed event (it returns None), and `refused` says why.
"""

from __future__ import annotations

import asyncio

from ._bounds import MAX_PART_BYTES

__all__ = ["BoundedReader"]


class BoundedReader:
    """`reader`'s `readline` and `readexactly`, each part at most `max_part` bytes."""

    def __init__(self, reader: asyncio.StreamReader, *, max_part: int = MAX_PART_BYTES) -> None:
        self._reader = reader
        self._max_part = max_part
        self.refused: str | None = None
        """Why the last event was refused unread (None: it was not)."""

    async def readline(self) -> bytes:
        self.refused = None
        return await self._reader.readline()

    async def readexactly(self, n: object) -> bytes:
        if isinstance(n, bool) or not isinstance(n, int) or n > self._max_part:
            self.refused = (
                f"An event's data or payload is at most {self._max_part} bytes; "
                f"this one claimed {str(n)[:40]}."
            )
            raise ValueError(self.refused)  # the reference decoder reads it as malformed
        return await self._reader.readexactly(n)

    def at_eof(self) -> bool:
        return self._reader.at_eof()
