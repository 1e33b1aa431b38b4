"""The JetStream wire, thinly: header names, error numbers, API subjects and the requests the
NATS backend makes. Nothing here knows speechd's layout (that is `_nats.py`).

Errors (wire level; `_nats.py` translates them into the store's own tree):

    WireError
    ├── ApiError        JetStream answered with an error (`.err_code`, `.description`)
    └── NoAnswer        no answer in time, no responders, or the connection failed: the
                        outcome of a write is unknown

Requests and what they cost (one round trip each unless said):

    api()               `$JS.API.<verb>` request, JSON in and out (stream info/create, msg
                        get/delete, purge); answered by the stream's leader
    direct_last()       DIRECT.GET last-by-subject: one message, answered by any replica
    direct_multi()      DIRECT.GET `multi_last` over exact subjects: one request, n messages
                        and an end-of-batch status back, from one point-in-time snapshot
    publish()           one message, one PubAck
    publish_atomic()    n messages of one atomic batch: n-1 published without a reply, the
                        commit with one, so one round trip and one PubAck for the batch
    batch_limit()       the server's atomic batch size, from a probe it refuses
    server_varz()       the server's `varz` (how JetStream syncs), where this account may see
                        it; None where it may not
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import secrets
from collections.abc import Sequence
from typing import Any, Final

import msgspec
import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

__all__ = [
    "BATCH_COMMIT",
    "BATCH_ID",
    "BATCH_SEQ",
    "DESCRIPTION",
    "ERR_BATCH_INCOMPLETE",
    "ERR_BATCH_TOO_LARGE",
    "ERR_BATCH_TOO_MANY_INFLIGHT",
    "ERR_CLUSTER_NOT_AVAILABLE",
    "ERR_LAST_SEQ_NOT_READY",
    "ERR_NOT_LEADER",
    "ERR_NO_MESSAGE",
    "ERR_SEQUENCE_NOT_FOUND",
    "ERR_STREAM_NAME_IN_USE",
    "ERR_STREAM_NOT_FOUND",
    "ERR_WRONG_LAST_SEQ",
    "ERR_WRONG_LAST_SEQ_CONSTANT",
    "EXPECTED_LAST_SUBJECT_SEQ",
    "EXPECTED_LAST_SUBJECT_SEQ_SUBJECT",
    "SEQUENCE",
    "STATUS",
    "SUBJECT",
    "TRANSIENT_ERRORS",
    "ApiError",
    "DirectMsg",
    "JetStream",
    "NoAnswer",
    "PubAck",
    "WireError",
]

# -- headers (names are NATS's; case matters to nats-py's parser) ---------------------------

EXPECTED_LAST_SUBJECT_SEQ: Final[str] = "Nats-Expected-Last-Subject-Sequence"
"""Store the message only if the last message on a subject has this stream sequence (0: none)."""

EXPECTED_LAST_SUBJECT_SEQ_SUBJECT: Final[str] = "Nats-Expected-Last-Subject-Sequence-Subject"
"""The subject the check above looks at, instead of the message's own (server 2.11+)."""

BATCH_ID: Final[str] = "Nats-Batch-Id"
"""Names an atomic batch (at most 64 characters): all its messages are stored, or none."""

BATCH_SEQ: Final[str] = "Nats-Batch-Sequence"
"""A message's place in its atomic batch, from 1, without gaps."""

BATCH_COMMIT: Final[str] = "Nats-Batch-Commit"
"""On the last message of an atomic batch ("1"): commit the batch and answer with a PubAck."""

SEQUENCE: Final[str] = "Nats-Sequence"
"""On a direct-get answer or a republished message: its stream sequence."""

SUBJECT: Final[str] = "Nats-Subject"
"""On a direct-get answer or a republished message: the subject it was stored under."""

STATUS: Final[str] = "Status"
"""A status message's code (nats-py puts it among the headers): 404, 408, 204 (end of batch)."""

DESCRIPTION: Final[str] = "Description"
"""A status message's text."""

# -- JetStream error numbers (`err_code`) ----------------------------------------------------

ERR_CLUSTER_NOT_AVAILABLE: Final = 10008
ERR_NOT_LEADER: Final = 10009
ERR_INSUFFICIENT_RESOURCES: Final = 10023
ERR_NO_MESSAGE: Final = 10037
ERR_SEQUENCE_NOT_FOUND: Final = 10043  # a message delete's: no message (any more) at that seq
ERR_STREAM_NAME_IN_USE: Final = 10058  # exists with another configuration
ERR_STREAM_NOT_FOUND: Final = 10059
ERR_WRONG_LAST_SEQ: Final = 10071  # description ends with the actual sequence
ERR_LAST_SEQ_NOT_READY: Final = 10163
ERR_WRONG_LAST_SEQ_CONSTANT: Final = 10164  # clustered: another write to it is in flight
ERR_BATCH_INCOMPLETE: Final = 10176
ERR_BATCH_TOO_LARGE: Final = 10199
ERR_BATCH_TOO_MANY_INFLIGHT: Final = 10210

# Errors that say "not now": the same request may well succeed a moment later.
TRANSIENT_ERRORS: Final = frozenset(
    {
        ERR_CLUSTER_NOT_AVAILABLE,
        ERR_NOT_LEADER,
        ERR_INSUFFICIENT_RESOURCES,
        ERR_LAST_SEQ_NOT_READY,
        ERR_WRONG_LAST_SEQ_CONSTANT,
        ERR_BATCH_TOO_MANY_INFLIGHT,
    }
)

_STATUS_NO_RESULTS = "404"
_STATUS_END_OF_BATCH = "204"
_STATUS_NO_RESPONDERS = "503"


class WireError(Exception):
    """Base of the wire's errors."""


class ApiError(WireError):
    """JetStream refused a request; `err_code` is its error number."""

    def __init__(self, code: int, err_code: int, description: str) -> None:
        super().__init__(f"{description} (JetStream error {err_code}, status {code})")
        self.code = code
        self.err_code = err_code
        self.description = description

    @property
    def transient(self) -> bool:
        return self.err_code in TRANSIENT_ERRORS or self.code == 503

    def actual_seq(self) -> int | None:
        """The number that ends the description: for `ERR_WRONG_LAST_SEQ` the sequence the
        server found, for `ERR_BATCH_TOO_LARGE` the server's batch size."""
        head, _, tail = self.description.rpartition(": ")
        return int(tail) if head and tail.isdigit() else None


class NoAnswer(WireError):
    """No answer came (timeout, no responders, connection trouble): the outcome is unknown."""


class PubAck(msgspec.Struct, frozen=True):
    stream: str
    seq: int
    count: int = 1


class DirectMsg(msgspec.Struct, frozen=True):
    """A stored message as a direct get returns it."""

    subject: str
    seq: int
    data: bytes


class _ApiErrorBody(msgspec.Struct, frozen=True):
    code: int = 0
    err_code: int = 0
    description: str = ""


class _PubAckResponse(msgspec.Struct, frozen=True):
    stream: str = ""
    seq: int = 0
    count: int = 1
    error: _ApiErrorBody | None = None


_pub_ack_decoder = msgspec.json.Decoder(_PubAckResponse)
_PROBE_BATCH_SEQ = 1_000_000


def _pub_ack(msg: Msg) -> PubAck:
    response = _pub_ack_decoder.decode(msg.data)
    if response.error is not None:
        error = response.error
        raise ApiError(error.code, error.err_code, error.description)
    return PubAck(response.stream, response.seq, response.count)


def _check_api(response: dict[str, Any]) -> dict[str, Any]:
    error = response.get("error")
    if error:
        raise ApiError(
            int(error.get("code", 0)), int(error.get("err_code", 0)), error.get("description", "")
        )
    return response


@contextlib.contextmanager
def _no_answer(doing: str) -> Any:
    """nats-py's errors (and a timeout) as `NoAnswer`, chained."""
    try:
        yield
    except (nats.errors.Error, asyncio.TimeoutError, OSError) as exc:
        raise NoAnswer(f"{doing}: {type(exc).__name__} {exc}".rstrip()) from exc


def _direct_msg(msg: Msg) -> DirectMsg:
    headers = msg.headers or {}
    return DirectMsg(headers.get(SUBJECT, ""), int(headers.get(SEQUENCE, "0")), msg.data)


class _Pending:
    """What answers one request: its first message, or (`multi`) every message up to the
    end-of-batch status."""

    __slots__ = ("done", "msgs", "multi")

    def __init__(self, multi: bool) -> None:
        self.multi = multi
        self.msgs: list[Msg] = []
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()


class JetStream:
    """Requests on one nats-py connection, answered on one inbox subscription of our own.

    `abandon()` (on a disconnect) fails every request in flight with `NoAnswer` at once, so
    nobody waits out a timeout for an answer the connection can no longer bring.
    """

    def __init__(self, nc: Client, *, timeout: float) -> None:
        self.nc = nc
        self.timeout = timeout
        self._inbox = nc.new_inbox()
        self._pending: dict[str, _Pending] = {}
        self._inbox_sub: Subscription | None = None

    async def start(self) -> None:
        self._inbox_sub = await self.nc.subscribe(f"{self._inbox}.*", cb=self._on_reply)

    async def _on_reply(self, msg: Msg) -> None:
        pending = self._pending.get(msg.subject[len(self._inbox) + 1 :])
        if pending is None or pending.done.done():
            return
        pending.msgs.append(msg)
        if not pending.multi or (msg.headers or {}).get(STATUS) is not None:
            pending.done.set_result(None)

    def abandon(self, why: str) -> None:
        for pending in self._pending.values():
            if not pending.done.done():
                pending.done.set_exception(NoAnswer(why))

    async def _request(
        self,
        subject: str,
        payload: bytes,
        *,
        headers: dict[str, str] | None = None,
        multi: bool = False,
        doing: str,
    ) -> list[Msg]:
        token = secrets.token_hex(8)
        pending = self._pending[token] = _Pending(multi)
        try:
            with _no_answer(doing):
                await self.nc.publish(
                    subject, payload, reply=f"{self._inbox}.{token}", headers=headers
                )
                await asyncio.wait_for(asyncio.shield(pending.done), self.timeout)
        finally:
            del self._pending[token]
            if not pending.done.done():
                pending.done.cancel()
        last = pending.msgs[-1].headers or {}
        if last.get(STATUS) == _STATUS_NO_RESPONDERS:
            raise NoAnswer(f"{doing}: no responders")
        return pending.msgs

    # -- the JSON API --------------------------------------------------------------------

    async def api(self, subject: str, request: dict[str, Any] | None = None) -> dict[str, Any]:
        """`$JS.API.<subject>`: the JSON answer, or `ApiError` / `NoAnswer`."""
        payload = json.dumps(request).encode() if request is not None else b""
        doing = f"JetStream {subject.rsplit('.', 1)[0]}"
        (msg,) = await self._request(f"$JS.API.{subject}", payload, doing=doing)
        return _check_api(json.loads(msg.data))

    async def msg_get(self, stream: str, last_by_subj: str) -> tuple[int, bytes] | None:
        """The last message on `last_by_subj` from the stream's leader: (seq, data) or None."""
        try:
            response = await self.api(f"STREAM.MSG.GET.{stream}", {"last_by_subj": last_by_subj})
        except ApiError as exc:
            if exc.err_code == ERR_NO_MESSAGE:
                return None
            raise
        message = response["message"]
        return int(message["seq"]), base64.b64decode(message.get("data") or b"")

    async def msg_delete(self, stream: str, seq: int) -> bool:
        """Delete the message at `seq` (without overwriting it); False if there is none."""
        try:
            response = await self.api(f"STREAM.MSG.DELETE.{stream}", {"seq": seq, "no_erase": True})
        except ApiError as exc:
            gone = exc.err_code in (ERR_NO_MESSAGE, ERR_SEQUENCE_NOT_FOUND)
            if gone or "no message found" in exc.description:
                return False
            raise
        return bool(response.get("success"))

    async def purge(
        self, stream: str, subject_filter: str, *, before_seq: int | None = None
    ) -> int:
        """Remove the messages on `subject_filter` (those below stream sequence `before_seq`
        only, if given); how many went."""
        request: dict[str, Any] = {"filter": subject_filter}
        if before_seq is not None:
            request["seq"] = before_seq
        response = await self.api(f"STREAM.PURGE.{stream}", request)
        return int(response.get("purged", 0))

    # -- direct gets ---------------------------------------------------------------------

    async def direct_last(self, stream: str, subject: str) -> DirectMsg | None:
        """The last message stored under `subject` (exact), from whichever replica answers."""
        (msg,) = await self._request(
            f"$JS.API.DIRECT.GET.{stream}.{subject}", b"", doing="JetStream direct get"
        )
        status = (msg.headers or {}).get(STATUS)
        if status == _STATUS_NO_RESULTS:
            return None
        if status is not None:
            raise NoAnswer(f"JetStream direct get: status {status}")
        return _direct_msg(msg)

    async def direct_multi(
        self, stream: str, subjects: Sequence[str], *, max_bytes: int
    ) -> list[DirectMsg]:
        """The last message of each of `subjects` (exact, at most 1024), in stream order,
        from one snapshot; the server stops after the message that crosses `max_bytes`."""
        request = msgspec.json.encode({"multi_last": list(subjects), "max_bytes": max_bytes})
        msgs = await self._request(
            f"$JS.API.DIRECT.GET.{stream}", request, multi=True, doing="JetStream direct get"
        )
        status = (msgs[-1].headers or {}).get(STATUS)
        if status not in (_STATUS_NO_RESULTS, _STATUS_END_OF_BATCH):
            text = (msgs[-1].headers or {}).get(DESCRIPTION, "")
            raise NoAnswer(f"JetStream direct get: status {status} {text}".rstrip())
        return [_direct_msg(msg) for msg in msgs[:-1]]

    # -- publishing ----------------------------------------------------------------------

    async def publish(self, subject: str, data: bytes, headers: dict[str, str]) -> PubAck:
        """Publish one message to a stream and wait for its PubAck (`headers` may carry a
        condition). Raises `ApiError` if it was refused, `NoAnswer` if the outcome is unknown."""
        (msg,) = await self._request(subject, data, headers=headers, doing="JetStream publish")
        return _pub_ack(msg)

    async def publish_atomic(
        self, messages: Sequence[tuple[str, bytes]], condition: dict[str, str]
    ) -> PubAck:
        """Publish `messages` as one atomic batch; `condition` (headers) rides on the first.

        Raises `ApiError` if the batch was refused (nothing of it stored) and `NoAnswer` if
        the outcome is unknown.
        """
        batch_id = secrets.token_urlsafe(16)
        last = len(messages)
        with _no_answer("JetStream atomic publish"):
            for i, (subject, data) in enumerate(messages[:-1], start=1):
                headers = {BATCH_ID: batch_id, BATCH_SEQ: str(i)}
                if i == 1:
                    headers.update(condition)
                await self.nc.publish(subject, data, headers=headers)
        subject, data = messages[-1]
        headers = {BATCH_ID: batch_id, BATCH_SEQ: str(last), BATCH_COMMIT: "1"}
        if last == 1:
            headers.update(condition)
        (msg,) = await self._request(
            subject, data, headers=headers, doing="JetStream atomic publish"
        )
        return _pub_ack(msg)

    async def batch_limit(self, subject: str) -> int | None:
        """The server's atomic batch size, as its refusal of a one-message batch numbered
        past any sane limit says (nothing is stored: a batch must start at 1); None when the
        server's answer does not say."""
        headers = {
            BATCH_ID: secrets.token_urlsafe(16),
            BATCH_SEQ: str(_PROBE_BATCH_SEQ),
            BATCH_COMMIT: "1",
        }
        (msg,) = await self._request(subject, b"", headers=headers, doing="JetStream batch probe")
        try:
            _pub_ack(msg)
        except ApiError as exc:
            if exc.err_code == ERR_BATCH_TOO_LARGE:
                return exc.actual_seq()  # "atomic publish batch is too large: 1000"
            if exc.err_code == ERR_BATCH_INCOMPLETE:
                return _PROBE_BATCH_SEQ  # it takes batches this long: as good as unbounded
            raise
        return None

    async def server_varz(self, timeout: float) -> dict[str, Any] | None:
        """`$SYS.REQ.SERVER.PING.VARZ`, answered only where the operator exports it to this
        account (it belongs to the system account); None when nobody answers."""
        try:
            msg = await self.nc.request("$SYS.REQ.SERVER.PING.VARZ", b"", timeout=timeout)
            varz = json.loads(msg.data)
        except (nats.errors.Error, asyncio.TimeoutError, OSError, ValueError):
            return None
        data = varz.get("data") if isinstance(varz, dict) else None
        return data if isinstance(data, dict) else None

    async def close(self) -> None:
        self.abandon("the store is closing")
        if self._inbox_sub is not None:
            with contextlib.suppress(nats.errors.Error):
                await self._inbox_sub.unsubscribe()
