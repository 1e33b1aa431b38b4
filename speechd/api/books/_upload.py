"""A book's upload as a `BookRequest`: the file as the body (its kind from the Content-Type,
the options in the query string) or `multipart/form-data` with a `file` field and the options
as fields, as OpenAI's upload routes take files.

The body is read whole (the route's size cap is checked by the server before a byte of it is
read, from Content-Length, and again as it arrives); a multipart body is split on a thread
(`split_form`: bytes.find over the boundary, no regex), so neither reading nor parsing holds
the event loop for long.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from speechd.errors import InvalidRequest, UnsupportedMediaType
from speechd.service import BookRequest

__all__ = ["KIND_OF_TYPE", "book_request", "options_request", "split_form"]

KIND_OF_TYPE: Final = {
    "application/epub+zip": "epub",
    "text/markdown": "markdown",
    "text/x-markdown": "markdown",
    "text/plain": "text",
}
"""The media types a book's file may be sent as, and how each is read."""

_SUFFIXES: Final = {".epub": "epub", ".md": "markdown", ".markdown": "markdown", ".txt": "text"}
_MAX_PARTS = 16
_MAX_PART_HEADER = 4096
_MAX_FIELD_BYTES = 4096
_MAX_CHAPTER_SPEC = 1000
_MAX_OVERRIDES = 10_000  # chapters named in all of one override option's entries
_OPTIONS = (
    "voice",
    "speed",
    "format",
    "chapters",
    "alt_text",
    "chapter_voices",
    "chapter_speeds",
)


def media_type(content_type: str | None) -> str:
    return (content_type or "").partition(";")[0].strip().lower()


def book_request(
    body: bytes, content_type: str | None, query: Mapping[str, str], *, scope: str
) -> BookRequest:
    """The request a body sent as one file (`content_type`, options in `query`) makes."""
    kind = KIND_OF_TYPE.get(media_type(content_type))
    if kind is None:
        shown = media_type(content_type)[:80] or "none"
        raise UnsupportedMediaType(
            "Send the book as application/epub+zip, text/markdown or text/plain, or as "
            f"multipart/form-data with a 'file' field (it was {shown})."
        )
    return options_request(body, kind, query, scope=scope)


def options_request(
    data: bytes, kind: str, options: Mapping[str, str], *, scope: str
) -> BookRequest:
    """A `BookRequest` for `data` read as `kind`, with `options` (strings, as a query or a
    form gives them: `voice`, `speed`, `format`, `chapters` like `3,5-7`, `alt_text`)."""
    speed = 1.0
    if "speed" in options:
        try:
            speed = float(options["speed"])
        except ValueError:
            raise InvalidRequest("speed must be a number.", param="speed") from None
    alt = options.get("alt_text", "false").strip().lower()
    if alt not in ("true", "false", "1", "0"):
        raise InvalidRequest("alt_text must be true or false.", param="alt_text")
    return BookRequest(
        data=data,
        kind=kind,
        voice=options.get("voice") or None,
        speed=speed,
        format=options.get("format", "m4b").strip().lower(),
        chapters=parse_chapters(options["chapters"]) if options.get("chapters") else None,
        alt_text=alt in ("true", "1"),
        chapter_voices=parse_overrides(options.get("chapter_voices", ""), "chapter_voices"),
        chapter_speeds={
            n: _number(value, "chapter_speeds")
            for n, value in parse_overrides(
                options.get("chapter_speeds", ""), "chapter_speeds"
            ).items()
        },
        scope=scope,
    )


def _number(value: str, param: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise InvalidRequest(f"{param} holds {value[:20]!r}, not a number.", param=param) from None


def parse_overrides(spec: str, param: str) -> dict[int, str]:
    """`3=am_adam,5-7=bf_emma` -> {3: "am_adam", 5: "bf_emma", 6: ..., 7: ...} (chapters
    from 1, as `parse_chapters` reads them; a later entry for a chapter wins); "" -> {}.
    InvalidRequest for anything else. The values are checked by the service."""
    if len(spec) > _MAX_FIELD_BYTES:
        raise InvalidRequest(f"{param} is too long.", param=param)
    found: dict[int, str] = {}
    named = 0
    for entry in spec.split(",") if spec.strip() else ():
        chapters, equals, value = entry.partition("=")
        value = value.strip()
        if not equals or not value or not chapters.strip():
            raise InvalidRequest(
                f"{param} must be chapters and a value, like 3=am_adam,5-7=bf_emma.", param=param
            )
        try:
            numbers = parse_chapters(chapters)
        except InvalidRequest as exc:
            raise InvalidRequest(exc.message.replace("chapters", param, 1), param=param) from None
        named += len(numbers)
        if named > _MAX_OVERRIDES:
            raise InvalidRequest(f"{param} names too many chapters.", param=param)
        for number in numbers:
            found[number] = value
    return found


def parse_chapters(spec: str) -> list[int]:
    """`3,5-7` -> [3, 5, 6, 7] (chapters from 1); InvalidRequest for anything else."""
    if len(spec) > _MAX_CHAPTER_SPEC:
        raise InvalidRequest("chapters is too long.", param="chapters")
    found: list[int] = []
    for part in spec.split(","):
        first, dash, last = part.strip().partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            raise InvalidRequest(
                "chapters must be numbers and ranges, like 3,5-7.", param="chapters"
            )
        low, high = int(first), int(last) if dash else int(first)
        if high < low or high - low > 10_000 or len(found) > 10_000:
            raise InvalidRequest("chapters holds a range that is not one.", param="chapters")
        found.extend(range(low, high + 1))
    return found


def split_form(body: bytes, content_type: str | None, *, scope: str) -> BookRequest:
    """A `multipart/form-data` body's `BookRequest` (run it on a thread: it copies the file).
    The kind is the file part's Content-Type, else its name's suffix."""
    boundary = _boundary(content_type or "")
    delimiter = b"--" + boundary
    fields: dict[str, str] = {}
    file: tuple[bytes, str, str] | None = None
    at = body.find(delimiter)
    if at < 0:
        raise InvalidRequest("The form holds no parts.", param="file")
    parts = 0
    while True:
        at += len(delimiter)
        if body[at : at + 2] == b"--":
            break
        end = body.find(b"\r\n" + delimiter, at)
        if end < 0:
            raise InvalidRequest("The form's last part is not closed.", param="file")
        parts += 1
        if parts > _MAX_PARTS:
            raise InvalidRequest("The form holds too many parts.", param="file")
        head_end = body.find(b"\r\n\r\n", at, at + _MAX_PART_HEADER)
        if head_end < 0:
            raise InvalidRequest("A part of the form has no headers.", param="file")
        name, filename, part_type = _part_headers(body[at:head_end])
        value_at = head_end + 4
        if name == "file":
            file = (body[value_at:end], filename, part_type)
        elif name in _OPTIONS:
            if end - value_at > _MAX_FIELD_BYTES:
                raise InvalidRequest(f"The form's {name} is too long.", param=name)
            fields[name] = body[value_at:end].decode("utf-8", "replace")
        at = end + 2
    if file is None:
        raise InvalidRequest("The form has no 'file' field.", param="file")
    data, filename, part_type = file
    kind = KIND_OF_TYPE.get(part_type)
    if kind is None:
        suffix = filename[filename.rfind(".") :].lower() if "." in filename else ""
        kind = _SUFFIXES.get(suffix)
    if kind is None:
        raise UnsupportedMediaType(
            "The 'file' must be an EPUB (.epub, application/epub+zip), Markdown (.md) or plain "
            "text (.txt)."
        )
    return options_request(data, kind, fields, scope=scope)


def _boundary(content_type: str) -> bytes:
    for param in content_type.split(";")[1:]:
        key, _, value = param.strip().partition("=")
        if key.strip().lower() == "boundary":
            value = value.strip().strip('"')
            if 0 < len(value) <= 200:
                return value.encode("latin-1", "replace")
    raise InvalidRequest("The multipart form has no boundary.", param="file")


def _part_headers(raw: bytes) -> tuple[str, str, str]:
    """A part's field name, file name and media type."""
    name = filename = part_type = ""
    for line in raw.decode("utf-8", "replace").split("\r\n"):
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key == "content-type":
            part_type = media_type(value)
        elif key == "content-disposition":
            for param in value.split(";")[1:]:
                pkey, _, pvalue = param.strip().partition("=")
                pvalue = pvalue.strip().strip('"')
                if pkey.strip().lower() == "name":
                    name = pvalue
                elif pkey.strip().lower() == "filename":
                    filename = pvalue
    return name, filename, part_type
