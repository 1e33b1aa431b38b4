"""The NATS backend's layout: where a speechd stream lives in JetStream. Persisted, so keep it
stable: every name, subject and field below is read by processes of other versions, and by
this one from data written long ago (each JetStream stream's metadata says `speechd.layout`).

    JetStream stream  speechd_<ns>_<k>, k < shards; a name goes to shard crc32(name) % shards.
                      Subjects `speechd.<ns>.<k>.>`, file storage, max 1 message per subject,
                      atomic batches and direct gets allowed, heads republished (below).
    head              speechd.<ns>.<k>.h.<X>       one message: msgpack [gen, next seq,
                                                    timestamp ms, append token, first seq]
    record seq n      speechd.<ns>.<k>.r.<X>.<gen>.<n>   msgpack [timestamp ms, headers, body]
    wake-up           speechd-wake.<ns>.h.<X>      core NATS: the server republishes each new
                                                    head here; a delete publishes a notice
                                                    carrying `Speechd-Deleted`
    probe             speechd.<ns>.0.p             never stored: an atomic-batch message
                                                    numbered past any limit, whose refusal
                                                    tells the server's batch size (`_nats`)

`<X>` is the stream name with `/` as `.` and `.` inside a segment as `~` (names never hold
`~`, so the escape is unambiguous); `<gen>` names one life of the stream (12 random hex
digits), so records of a deleted life never mix with a new one. The head's `first` (added
with trim; absent, it reads as 0) is the first readable seq: records below it are trimmed,
and their messages purged or on their way.

Record messages are sized here too (`frame_overhead`): the server refuses, and drops the
connection of, a message over its `max_payload`, counting its NATS headers and body.
"""

from __future__ import annotations

import asyncio
import zlib
from typing import Any, Final

import msgspec

from ._contract import MAX_NAME_BYTES, DurableError
from ._nats_retry import retrying
from ._nats_wire import ERR_STREAM_NAME_IN_USE, ERR_STREAM_NOT_FOUND, ApiError, JetStream

__all__ = [
    "H_DELETED",
    "LAYOUT_VERSION",
    "NATS_HEADERS_RESERVE",
    "Frame",
    "Head",
    "Layout",
    "ensure_streams",
    "frame_overhead",
]

LAYOUT_VERSION: Final = "1"
H_DELETED: Final[str] = "Speechd-Deleted"
"""On a wake-up notice published by `delete`: the stream sequence of the head it removed."""

DEFAULT_SHARDS: Final = 4

# The NATS headers one record message may carry, at most: the batch id and sequence, the
# commit flag, and on the first, the condition on the head (whose subject holds the escaped
# name): 212 bytes and the head subject, 810 in all for a 512-byte name and a 64-character
# namespace.
NATS_HEADERS_RESERVE: Final = 512 + MAX_NAME_BYTES


class Head(msgspec.Struct, array_like=True, frozen=True):
    """A stream's head message (persisted: fields only ever appended, with defaults)."""

    gen: str
    next: int
    ts: int
    token: str
    first: int = 0


class Frame(msgspec.Struct, array_like=True, frozen=True):
    """A record message's body (persisted: fields only ever appended, with defaults)."""

    ts: int
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes


def frame_overhead(headers: int) -> int:
    """The most a `Frame` adds to its record's `record_size`, for `headers` header pairs:
    the array and timestamp (18 bytes at most) and 8 bytes a pair (msgpack bin lengths)."""
    return 18 + 8 * headers


def _escape(name: str) -> str:
    return ".".join(segment.replace(".", "~") for segment in name.split("/"))


def _unescape(tokens: str) -> str:
    return "/".join(token.replace("~", ".") for token in tokens.split("."))


class Layout:
    """Where a name's head, records and wake-ups live (see the module docstring)."""

    def __init__(self, namespace: str, shards: int) -> None:
        self.namespace = namespace
        self.shards = shards
        self.wake_root = f"speechd-wake.{namespace}.h"

    def stream(self, shard: int) -> str:
        return f"speechd_{self.namespace}_{shard}"

    def root(self, shard: int) -> str:
        return f"speechd.{self.namespace}.{shard}"

    def shard(self, name: str) -> int:
        return zlib.crc32(name.encode()) % self.shards

    def stream_of(self, name: str) -> str:
        """The JetStream stream that holds `name`."""
        return self.stream(self.shard(name))

    def head_subject(self, name: str) -> str:
        return f"{self.root(self.shard(name))}.h.{_escape(name)}"

    def record_subject(self, name: str, gen: str, seq: int) -> str:
        return f"{self.root(self.shard(name))}.r.{_escape(name)}.{gen}.{seq}"

    def records_filter(self, name: str, gen: str) -> str:
        return f"{self.root(self.shard(name))}.r.{_escape(name)}.{gen}.*"

    def wake_subject(self, name: str) -> str:
        return f"{self.wake_root}.{_escape(name)}"

    def probe_subject(self) -> str:
        return f"{self.root(0)}.p"

    def heads_filter(self, shard: int, complete: str) -> str:
        """Head subjects of shard `shard` under the complete name segments `complete`."""
        root = self.root(shard)
        return f"{root}.h.{_escape(complete)}.>" if complete else f"{root}.h.>"

    def name_of_head(self, shard: int, subject: str) -> str:
        return _unescape(subject[len(self.root(shard)) + 3 :])

    def config(self, shard: int, replicas: int) -> dict[str, Any]:
        root = self.root(shard)
        return {
            "name": self.stream(shard),
            "subjects": [f"{root}.>"],
            "retention": "limits",
            "storage": "file",
            "num_replicas": replicas,
            "max_msgs": -1,
            "max_bytes": -1,
            "max_age": 0,
            "max_msgs_per_subject": 1,
            "discard": "old",
            "allow_direct": True,
            "allow_atomic": True,
            "republish": {"src": f"{root}.h.>", "dest": f"{self.wake_root}.>"},
            "metadata": {"speechd.layout": LAYOUT_VERSION, "speechd.shards": str(self.shards)},
        }


# -- making and checking the JetStream streams ---------------------------------------------


async def ensure_streams(
    js: JetStream, namespace: str, wanted: int | None, replicas: int, retry_s: float
) -> Layout:
    """Make (or check) the JetStream streams of `namespace`; the layout in use.

    The shard count is the first opener's (`wanted`, else `DEFAULT_SHARDS`); later openers
    adopt it, and one that asks for another is refused.
    """
    probe = Layout(namespace, 1)
    existing = await _stream_config(js, probe.stream(0), retry_s)
    if existing is not None:
        shards = int((existing.get("metadata") or {}).get("speechd.shards", "0") or 0)
        if shards <= 0:
            raise DurableError(f"JetStream stream {probe.stream(0)} is not a speechd store")
        if wanted is not None and wanted != shards:
            raise DurableError(
                f"the store in namespace {namespace!r} has {shards} shards, not {wanted}"
            )
    else:
        shards = wanted or DEFAULT_SHARDS
    layout = Layout(namespace, shards)
    await asyncio.gather(
        *(_ensure_stream(js, layout, shard, replicas, retry_s) for shard in range(shards))
    )
    return layout


async def _stream_config(js: JetStream, name: str, retry_s: float) -> dict[str, Any] | None:
    async def info() -> dict[str, Any] | None:
        try:
            return (await js.api(f"STREAM.INFO.{name}"))["config"]
        except ApiError as exc:
            if exc.err_code == ERR_STREAM_NOT_FOUND:
                return None
            raise

    return await retrying(f"looking up JetStream stream {name}", info, retry_s)


async def _ensure_stream(
    js: JetStream, layout: Layout, shard: int, replicas: int, retry_s: float
) -> None:
    name = layout.stream(shard)
    wanted = layout.config(shard, replicas)
    config = await _stream_config(js, name, retry_s)
    if config is None:

        async def create() -> dict[str, Any] | None:
            try:
                return (await js.api(f"STREAM.CREATE.{name}", wanted))["config"]
            except ApiError as exc:
                if exc.err_code == ERR_STREAM_NAME_IN_USE:  # someone else made it first
                    return None
                raise

        config = await retrying(f"creating JetStream stream {name}", create, retry_s)
        if config is None:
            config = await _stream_config(js, name, retry_s)
    if config is None:
        raise DurableError(f"JetStream stream {name} vanished while being made")
    for key in ("subjects", "max_msgs_per_subject", "allow_direct", "allow_atomic"):
        if config.get(key) != wanted[key]:
            raise DurableError(
                f"JetStream stream {name} has {key}={config.get(key)!r}, not"
                f" {wanted[key]!r}: it was not made by this speechd layout"
            )
    if (config.get("metadata") or {}).get("speechd.layout") != LAYOUT_VERSION:
        raise DurableError(f"JetStream stream {name} has another speechd layout version")
