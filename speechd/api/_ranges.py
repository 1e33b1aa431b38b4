"""A finished file as an HTTP entity: `Content-Length`, a strong `ETag` and byte ranges,
decided before any of its bytes is read. `file_reply` answers a request for a file of known
size and etag (a done cast's audio, a done book's audiobook): 304 for a matching
`If-None-Match`, 416 for a range outside it, else which bytes to send (whole, or a range once
`If-Range` matches). The request's validators are bounded first: one longer than any valid
value of it reads as absent (a stale `If-Range`: the whole file).
"""

from __future__ import annotations

import re
from typing import NamedTuple

import msgspec

from speechd.limits import MAX_IF_HEADER_CHARS, MAX_RANGE_CHARS

from ._errors import error_body

__all__ = ["AudioReply", "ByteRange", "FileSpan", "encode_headers", "file_reply", "parse_range"]


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


class AudioReply(msgspec.Struct, frozen=True):
    """A fixed (non-streaming) reply of the audio route: 304, or 416 (with an OpenAI-shaped
    error body, as every 4xx has)."""

    status: int
    headers: dict[str, str]
    body: bytes = b""


class FileSpan(NamedTuple):
    """The bytes of a done cast's file to send: status, headers, `[start, stop)`."""

    status: int
    headers: dict[str, str]
    start: int
    stop: int


def file_reply(
    size: int,
    etag: str,
    base: dict[str, str],
    range_header: str | None,
    if_none_match: str | None,
    if_range: str | None,
) -> AudioReply | FileSpan:
    """A file of `size` bytes and strong `etag` as its request's validators and range ask for
    it: 304, 416, or which of its bytes to send (200, or 206 for a range) with their headers
    (`base`'s and the entity's)."""
    range_header = _bounded(range_header, MAX_RANGE_CHARS)
    if_none_match = _bounded(if_none_match, MAX_IF_HEADER_CHARS)
    if if_range is not None and len(if_range) > MAX_IF_HEADER_CHARS:
        if_range = ""  # matches no etag: the whole file, as for any stale validator
    headers = {
        **base,
        "etag": etag,
        "accept-ranges": "bytes",
        "cache-control": "public, max-age=86400",
    }
    if if_none_match is not None and _etag_matches(if_none_match, etag):
        return AudioReply(304, {k: v for k, v in headers.items() if k != "content-type"})
    if if_range is not None and if_range.strip() != etag:
        range_header = None
    span = parse_range(range_header, size)
    if span is False:
        error = error_body(
            f"The range is not within the file ({size} bytes).",
            "invalid_request_error",
            param="range",
            code="range_not_satisfiable",
        )
        headers = {**headers, "content-range": f"bytes */{size}"}
        headers["content-type"] = "application/json"
        return AudioReply(416, headers, msgspec.json.encode(error))
    status = 200
    if span is None:
        span_ = (0, size)
    else:
        status = 206
        span_ = (span.start, span.stop)
        headers["content-range"] = f"bytes {span.start}-{span.stop - 1}/{size}"
    headers["content-length"] = str(span_[1] - span_[0])
    return FileSpan(status, headers, *span_)


def _bounded(header: str | None, limit: int) -> str | None:
    """`header`, or None (absent) when it is longer than any valid value of it."""
    return header if header is None or len(header) <= limit else None


def _etag_matches(header: str, etag: str) -> bool:
    tags = [t.strip().removeprefix("W/") for t in header.split(",")]
    return "*" in tags or etag in tags


def encode_headers(headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
    return [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
