"""What the `speechd-client` command reads and writes: the text to speak (an argument, a file,
stdin whole or as it arrives), where the audio and captions go, and cast ids or links as
given on the command line. Failures here are the command's own (`CommandError`), one line each.
"""

from __future__ import annotations

import argparse
import asyncio
import codecs
import contextlib
import os
import stat
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import BinaryIO
from urllib.parse import urlsplit

from ._calls import CAPTION_FORMATS
from ._client import AsyncClient
from ._wire import FORMATS, AudioFormat

__all__ = [
    "CommandError",
    "UsageError",
    "captions_format",
    "cast_id_of",
    "check_output",
    "ids_as_operands",
    "output_to",
    "read_text",
    "response_format",
    "stdin_pieces",
    "write_captions",
]


class CommandError(Exception):
    """A failure of the command's own (not the server's): its message, its exit status."""

    status = 1


class UsageError(CommandError):
    """A command line that cannot be carried out."""

    status = 2


def read_text(args: argparse.Namespace) -> str:
    text = _given_text(args)
    if not text.strip():
        raise UsageError("no text to speak: the text is empty")
    return text


def _given_text(args: argparse.Namespace) -> str:
    if args.text is not None and args.file is not None:
        raise UsageError("give the text or --file, not both")
    if args.text is not None:
        return args.text
    if args.file not in (None, "-"):
        try:
            return Path(args.file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read {args.file}: {exc}") from exc
    if args.file is None and sys.stdin.isatty():
        raise UsageError("give the text as an argument, with --file, or on stdin")
    try:
        return sys.stdin.buffer.read().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"stdin is not UTF-8 text: {exc}") from exc


def response_format(args: argparse.Namespace) -> AudioFormat:
    if args.format:
        return args.format
    suffix = Path(args.output or "").suffix.lstrip(".").lower()
    return next((f for f in FORMATS if f == suffix), "mp3")


def check_output(output: str | None) -> None:
    if output in (None, "-") and sys.stdout.isatty():
        raise UsageError("stdout is a terminal: pass -o FILE, or pipe the audio (| mpv -)")


@contextlib.contextmanager
def output_to(output: str | None) -> Iterator[BinaryIO]:
    """Where the audio goes. A file that did not get the whole audio is removed, so no short
    file is left looking whole."""
    if output in (None, "-"):
        yield sys.stdout.buffer
        return
    path = Path(output)
    try:
        sink = path.open("wb", buffering=0)  # each piece reaches the file as it arrives
    except OSError as exc:
        raise UsageError(f"cannot write {output}: {exc.strerror or exc}") from exc
    # Only a regular file is ours to remove: never /dev/null, a FIFO or a terminal.
    removable = stat.S_ISREG(os.fstat(sink.fileno()).st_mode)
    with sink:
        try:
            yield sink
        except BaseException as exc:
            sink.close()
            if removable:
                path.unlink(missing_ok=True)
            if isinstance(exc, OSError):
                raise CommandError(f"cannot write {output}: {exc.strerror or exc}") from exc
            raise


def captions_format(path: str | None) -> str | None:
    """The subtitle format `--captions` asks for (None: not asked), checked before any work."""
    if path is None:
        return None
    if path == "-" or not Path(path).parent.is_dir():
        raise UsageError(f"cannot write captions to {path}: name a file in an existing folder")
    suffix = Path(path).suffix.lstrip(".").lower()
    return suffix if suffix in CAPTION_FORMATS else "vtt"


async def write_captions(client: AsyncClient, cast_id: str | None, path: str, fmt: str) -> None:
    """The cast's subtitles, once its audio is all there, into `path`."""
    if cast_id is None:
        raise CommandError("the server did not say which cast the audio is: no captions")
    _save(path, await client.captions(cast_id, format=fmt))


def _save(path: str, text: str) -> None:
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise CommandError(f"cannot write {path}: {exc.strerror or exc}") from exc


_ID_CHARS = 22  # a cast id: 16 bytes in unpadded base64url
_ID_ALPHABET = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def ids_as_operands(argv: Sequence[str]) -> list[str]:
    """`follow`'s argv with a bare cast id that starts with `-` moved behind `--`.

    One id in 64 starts with `-` (base64url), and argparse would take it for an option. No
    option of this program is 22 characters of the id alphabet, so such a word is the id.
    """
    args = list(argv)
    if "follow" not in args or "--" in args:
        return args
    start = args.index("follow") + 1
    ids = [a for a in args[start:] if a.startswith("-") and _looks_like_id(a)]
    if len(ids) != 1:
        return args
    args.remove(ids[0])
    return [*args, "--", ids[0]]


def _looks_like_id(word: str) -> bool:
    return len(word) == _ID_CHARS and set(word) <= _ID_ALPHABET


def cast_id_of(ref: str) -> str:
    """A cast id from an id or a link (`.../c/<id>`, `.../v1/casts/<id>[/audio]`)."""
    if "/" not in ref:
        return ref
    parts = [p for p in urlsplit(ref).path.split("/") if p]
    for marker in ("c", "casts"):
        if marker in parts[:-1]:
            return parts[parts.index(marker) + 1]
    raise UsageError(f"{ref!r} is neither a cast id nor a cast link")


# Control characters but tab and newlines (an LLM CLI's colours, say): the server refuses
# them, and they are never speech.
_CONTROLS = dict.fromkeys([*range(0x09), 0x0B, 0x0C, *range(0x0E, 0x20), *range(0x7F, 0xA0)])


def stdin_pieces(loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[str | None]) -> None:
    """On a thread: put stdin's text on `queue` as it arrives (whatever has come, at most
    64 KiB at a time), then None at its end."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    stream = sys.stdin.buffer
    try:
        while True:
            data = stream.read1(65536) if hasattr(stream, "read1") else stream.read(4096)
            text = decoder.decode(data, final=not data).translate(_CONTROLS)
            if text:
                loop.call_soon_threadsafe(queue.put_nowait, text)
            if not data:
                return
    finally:
        loop.call_soon_threadsafe(queue.put_nowait, None)
