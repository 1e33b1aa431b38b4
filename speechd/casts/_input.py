"""A live cast's input: the private stream `input/<id>`
(`docs/design/index.md#serving-a-cast`).

Layout (persisted, so keep it stable):

    seq 0 .. n-1   pieces: header `e` = piece and `c` = the input's characters so far (this
                   piece's included); the body is the piece's text in UTF-8, exactly as its
                   writer sent it (never stripped: a lone space between two words matters)
    seq n          at most one end record: `e` = end, the body JSON `InputEnd` (why the input
                   closed, and its totals); nothing follows it

A piece's seq is the number of pieces before it, so a writer that counts the pieces it sent
(`seq`) gets the store's `match_seq_num` semantics. Every append is conditional at the tail its
writer read, so the api (pieces, `done`, an idle close it notices) and the worker (an idle
close as it follows, the end of a cast that failed) never interleave: the first end record
wins, and a piece that lost the race to it is refused as coming after the end.

**Idle.** An input whose last record (or, with none yet, the cast itself) is older than the
recipe's `idle_s` counts as closed. Whoever notices first appends the end record (reason
`idle`) at the tail it read: the worker as it follows the input, the api on the next append.
Both read the same records and the same recipe, so the rule survives restarts of either.
"""

from __future__ import annotations

from typing import Final, Literal

import msgspec

from speechd.durable import AppendRecord, Record, SeqMismatch, Store
from speechd.errors import (
    CastFailed,
    InputClosed,
    InputConflict,
    InputSeqMismatch,
    InputTooLong,
)

from ._playable import read_head
from ._records import H_CHARS, H_EVENT, decode, encode
from ._streams import input_stream

__all__ = [
    "InputEnd",
    "InputState",
    "append_input",
    "close_input",
    "end_record",
    "idle_expired",
    "input_event",
    "piece_record",
    "read_input_state",
]

PIECE: Final = b"piece"
END: Final = b"end"
_APPEND_TRIES = 8

EndReason = Literal["done", "idle", "abandoned"]


class InputEnd(msgspec.Struct, frozen=True):
    """The end record's body. `reason`: `done` (its writer said so), `idle` (nothing came for
    the recipe's `idle_s`) or `abandoned` (the cast failed: its writer is answered with the
    cast's error)."""

    reason: str
    pieces: int
    chars: int


class InputState(msgspec.Struct, frozen=True):
    """Where an input stands, from its last record: `pieces` and `chars` taken so far, its
    `end` once closed, `last_ms` the last record's timestamp (0: none yet), `tail` its next
    seq."""

    pieces: int
    chars: int
    end: InputEnd | None
    last_ms: int
    tail: int

    @property
    def closed(self) -> bool:
        return self.end is not None


def piece_record(text: str, chars: int) -> AppendRecord:
    return AppendRecord(text.encode(), ((H_EVENT, PIECE), (H_CHARS, str(chars).encode())))


def end_record(end: InputEnd) -> AppendRecord:
    return AppendRecord(encode(end), ((H_EVENT, END),))


def input_event(record: Record) -> str | InputEnd:
    """A record of the input: a piece's text, or the end."""
    if record.header(H_EVENT) == END:
        return decode(record.body, InputEnd)
    return record.body.decode()


async def read_input_state(store: Store, cast_id: str) -> InputState:
    """The input's state from its last record (one read, whatever its length)."""
    stream = input_stream(cast_id)
    tail = await store.check_tail(stream)
    if tail == 0:
        return InputState(0, 0, None, 0, 0)
    batch = await store.read(stream, tail - 1, max_records=1)
    if not batch.records:  # deleted meanwhile (retention): as good as never written
        return InputState(0, 0, None, 0, 0)
    last = batch.records[-1]
    tail = last.seq_num + 1
    event = input_event(last)
    if isinstance(event, InputEnd):
        return InputState(event.pieces, event.chars, event, last.timestamp, tail)
    chars = int(last.header(H_CHARS) or b"0")
    return InputState(tail, chars, None, last.timestamp, tail)


def idle_expired(state: InputState, *, opened_ms: int, idle_s: float, now_ms: int) -> bool:
    """Whether an open input has been idle past `idle_s` (since its last record, or since
    `opened_ms` when it has none); `idle_s` 0 never expires."""
    if state.closed or idle_s <= 0:
        return False
    return now_ms - (state.last_ms or opened_ms) >= idle_s * 1000


async def close_input(store: Store, cast_id: str, state: InputState, reason: EndReason) -> bool:
    """Append the end record at `state`'s tail; False if the input moved on first (a piece
    or another end landed: read it again)."""
    end = InputEnd(reason, state.pieces, state.chars)
    try:
        await store.append(input_stream(cast_id), [end_record(end)], match_seq_num=state.tail)
    except SeqMismatch:
        return False
    return True


async def append_input(
    store: Store,
    cast_id: str,
    text: str,
    *,
    done: bool,
    seq: int | None,
    opened_ms: int,
    idle_s: float,
    now_ms: int,
    max_chars: int,
    max_pieces: int,
) -> InputState:
    """Append the piece `text` (if any) and, with `done`, the end record, in one conditional
    append; returns the input's state after it.

    Raises `CastFailed` with the cast's own error once the cast has failed (the worker
    closes a failed live cast's input, `abandoned`), `InputClosed` (text after the end; the
    input went idle past `idle_s`, which this call then records), `InputSeqMismatch` (`seq`
    is not the number of pieces held) and `InputTooLong` (past `max_chars` characters or
    `max_pieces` pieces). A bare `done` on an input closed otherwise is answered with its
    state: the retry of a `done` that was taken.
    """
    for _ in range(_APPEND_TRIES):
        state = await read_input_state(store, cast_id)
        if state.end is not None and state.end.reason == "abandoned":
            raise await _failed(store, cast_id)
        if state.end is not None:
            if not text and done:
                return state
            raise InputClosed(_closed_message(state.end), seq=state.pieces)
        if idle_expired(state, opened_ms=opened_ms, idle_s=idle_s, now_ms=now_ms):
            await close_input(store, cast_id, state, "idle")
            continue  # the next read shows the end (ours, or whoever's came first)
        if seq is not None and seq != state.pieces:
            raise InputSeqMismatch(
                f"seq {seq} does not match the input, which holds {state.pieces} pieces: "
                f"send seq {state.pieces} (a piece you are retrying may have been taken).",
                seq=state.pieces,
                param="seq",
            )
        chars = state.chars + len(text)
        if chars > max_chars:
            raise InputTooLong(
                f"The input would be {chars} characters; a live cast takes {max_chars}.",
                param="text",
            )
        if text and state.pieces + 1 > max_pieces:
            raise InputTooLong(
                f"The input holds {state.pieces} pieces already; a live cast takes "
                f"{max_pieces} (send longer pieces).",
                param="text",
            )
        records = [piece_record(text, chars)] if text else []
        pieces = state.pieces + (1 if text else 0)
        end = InputEnd("done", pieces, chars) if done else None
        if end is not None:
            records.append(end_record(end))
        if not records:
            return state
        stream = input_stream(cast_id)
        try:
            ack = await store.append(stream, records, match_seq_num=state.tail)
        except SeqMismatch:
            continue  # someone appended first: judge this request against the new tail
        return InputState(pieces, chars, end, ack.timestamp, ack.next_seq)
    raise InputConflict("The input is being written by another request; try again.")


async def _failed(store: Store, cast_id: str) -> CastFailed:
    """The error of a cast that failed (what its audio answers)."""
    head = await read_head(store, cast_id)
    message = head.failure.message if head.failure is not None else "unknown"
    return CastFailed(f"The cast could not be synthesized: {message}")


def _closed_message(end: InputEnd) -> str:
    why = {
        "done": "its writer said it was done",
        "idle": "nothing came for longer than its idle timeout",
        "abandoned": "the cast ended before it",
    }.get(end.reason, end.reason)
    return f"The live cast's input is closed ({why}): nothing more can be added."
