"""A cast's audio as one file: live-growing while generating; once done, a seekable entity
served from its layout (`speechd.casts.CastFile`, through the cast service): `Content-Length`,
a strong `ETag` and byte ranges without holding any audio in memory.
"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator
from typing import NamedTuple

from speechd.casts import cast_audio
from speechd.durable import Store
from speechd.errors import CastFailed

from ._streaming import AbortBody

__all__ = ["ByteRange", "live_body", "parse_range"]


class ByteRange(NamedTuple):
    start: int
    stop: int  # exclusive


_RANGE = re.compile(r"bytes=(\d*)-(\d*)")


def parse_range(header: str | None, size: int) -> ByteRange | bool | None:
    """A single byte range of `size` bytes from a `Range` header.

    None: no usable range (absent, malformed or several ranges): serve the whole file.
    False: syntactically fine but unsatisfiable (416).
    """
    if header is None:
        return None
    match = _RANGE.fullmatch(header.strip())
    if match is None:
        return None
    first, last = match.groups()
    if not first and not last:
        return None
    if not first:  # the last N bytes
        suffix = int(last)
        if suffix == 0 or size == 0:
            return False
        return ByteRange(max(0, size - suffix), size)
    start = int(first)
    stop = size if not last else int(last) + 1
    if last and stop <= start:
        return None
    if start >= size:
        return False
    return ByteRange(start, min(stop, size))


async def live_body(store: Store, cast_id: str) -> AsyncGenerator[bytes, None]:
    """A generating cast's audio as it is appended; ends incomplete if the cast fails."""
    try:
        async for data in cast_audio(store, cast_id):
            yield data
    except CastFailed as exc:
        raise AbortBody(str(exc)) from exc
