"""What speechd's log lines may hold: never a cast id, never a store's credentials.

A cast id is the capability to read the cast (its link), so no log line holds one, at any
level: not the access log's paths (`/c/<id>`, `/v1/casts/<id>/words`, a live cast's input
URL), not the worker's lines about a cast, not a store error naming `pub/casts/<id>`.
`MaskIds` rewrites a record (its message, and a traceback's text): a cast id becomes its
first four characters and `…` (enough to tell a few casts apart in one log, nothing to read
one with), and `scheme://user:password@` in a URL loses the credentials. It sits on
speechd's own loggers (`LOGGERS`, from the moment `speechd` is imported), so their records
are masked as they are made, for every handler, one an embedding program adds included; and
on every handler speechd's processes write through (`mask_handlers`), so a line from a
library (uvicorn's access log, Litestar's) is masked as it is written.

A cast id is 22 characters of `A-Z a-z 0-9 - _` (`speechd.casts.is_cast_id`); any run of
exactly 22 of them standing alone is masked, which may mask some other token of that shape
too (better than leaking an id). The patterns have fixed lengths and no nested repetition:
one linear scan per line.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterable
from typing import Final

__all__ = [
    "LOGGERS",
    "MaskIds",
    "configure_logging",
    "mask_handlers",
    "mask_ids",
    "mask_loggers",
    "mask_url",
]

_ID: Final = re.compile(r"(?<![A-Za-z0-9_-])([A-Za-z0-9_-]{4})[A-Za-z0-9_-]{18}(?![A-Za-z0-9_-])")
_CREDENTIALS: Final = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]{0,31}://)[^\s/@]{1,1024}@")

FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"
"""The line format of `speechd serve`, `api` and `worker`."""

UVICORN_LOGGERS: Final = ("uvicorn", "uvicorn.error", "uvicorn.access")
"""The loggers uvicorn gives handlers of their own (its access log among them)."""

LOGGERS: Final = (
    "speechd",
    "speechd.api",
    "speechd.casts",
    "speechd.durable",
    "speechd.engine",
    "speechd.service",
    "speechd.telemetry",
    "speechd.text",
    "speechd.worker",
    "speechd.wyoming",
)
"""speechd's loggers (a logger's filters see only the records made on it, not its
children's: each is named)."""


def mask_url(text: str) -> str:
    """`text` with the credentials of any `scheme://user:password@` in it replaced by `***`."""
    return _CREDENTIALS.sub(r"\1***@", text)


def mask_ids(text: str) -> str:
    """`text` with every cast id in it masked (its first four characters and `…`), and any
    URL's credentials."""
    return mask_url(_ID.sub("\\1\u2026", text))


class MaskIds(logging.Filter):
    """A handler filter: each record's line (message, traceback, stack) masked by `mask_ids`."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = mask_ids(message)
        if masked != message:
            self._mask_message(record, masked)
        if record.exc_info and not record.exc_text:
            # The formatter reuses `exc_text` once it is set: the masked text is what is written.
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = mask_ids(record.exc_text)
        if record.stack_info:
            record.stack_info = mask_ids(record.stack_info)
        return True


    @staticmethod
    def _mask_message(record: logging.LogRecord, masked: str) -> None:
        """Mask `record`'s message, keeping its arguments' shape where masking each one does
        it (a formatter may read them: uvicorn's access log unpacks five); else the masked
        message alone."""
        if isinstance(record.args, tuple) and isinstance(record.msg, str):
            args = tuple(_masked_arg(arg) for arg in record.args)
            with contextlib.suppress(TypeError, ValueError):
                if mask_ids(record.msg) % args == masked:
                    record.msg, record.args = mask_ids(record.msg), args
                    return
        record.msg, record.args = masked, ()


def _masked_arg(arg: object) -> object:
    """A log argument masked: a string masked, a number as it is, anything else as the
    masked text `%s` would write (unchanged when it holds nothing to mask)."""
    if isinstance(arg, str):
        return mask_ids(arg)
    if arg is None or isinstance(arg, int | float):
        return arg
    text = str(arg)
    masked = mask_ids(text)
    return arg if masked == text else masked


def mask_loggers(loggers: Iterable[str] = LOGGERS) -> None:
    """Give each of `loggers` a `MaskIds`, once: their records are masked as they are made."""
    for name in loggers:
        logger = logging.getLogger(name)
        if not any(isinstance(f, MaskIds) for f in logger.filters):
            logger.addFilter(MaskIds())


def mask_handlers(loggers: Iterable[str] = ("", *UVICORN_LOGGERS)) -> None:
    """Give every handler of `loggers` (the root logger is "") a `MaskIds`, once."""
    for name in loggers:
        for handler in logging.getLogger(name).handlers:
            if not any(isinstance(f, MaskIds) for f in handler.filters):
                handler.addFilter(MaskIds())


def configure_logging(level: str | int, fmt: str = FORMAT) -> None:
    """Log to stderr at `level` in `fmt`, every line masked (`mask_handlers`)."""
    logging.basicConfig(level=level.upper() if isinstance(level, str) else level, format=fmt)
    mask_handlers()
