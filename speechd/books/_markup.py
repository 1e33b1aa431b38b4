"""The XML of a book (container, package, NCX, XHTML), read by the SSML front end's tokenizer.

`XmlReader` (`speechd.text`, from its `_xml`) is linear: every token is found
with `str.find` or an anchored pattern with bounded quantifiers, and the position only moves
forward; names, attribute counts and attribute lengths are bounded. `read_xml` runs it over one
document with a book's rules on top, feeding a `Handler`:

* a `<!DOCTYPE ...>` without an internal subset is skipped (EPUB 2's XHTML 1.1 documents all
  carry one; nothing it points at is ever fetched); one with an internal subset (`[`, where
  entities are declared: billion laughs, external entities) is refused, as is any other `<!`
  declaration; processing instructions (`<?xml-stylesheet?>`) are skipped;
* references are decoded from a fixed table: XML's five escapes, character references, and
  the names XHTML 1.x's DTD declares (`&nbsp;`, `&mdash;`: `html.entities.name2codepoint`),
  each one character; any other `&name;` stays as it is written, and nothing is expanded twice;
* tags are counted against `max_tags` before the document is read, and elements' nesting
  against `max_depth` as they open; an end tag
  closes the nearest open element of its name (elements left open are closed for it), and one
  that matches none is ignored;
* names are given without their prefix, lowercased (`epub:switch` is `switch`); attributes
  keep theirs (`epub:type`).

A document's bytes are decoded by its byte order mark or XML declaration (UTF-8, UTF-16; Latin-1
and Windows-1252 as some EPUB 2 files declare). Anything refused or malformed is a BadBook that
names the document.
"""

from __future__ import annotations

import codecs
import re
from html.entities import name2codepoint
from typing import Final, Protocol

from speechd.errors import BadBook
from speechd.text import SsmlError, XmlReader

from ._limits import Budget, too_large

__all__ = ["Handler", "decode_xml", "read_xml"]

_DOCTYPE_CHARS: Final = 2048
_ENTITIES: Final = {**{k: chr(v) for k, v in name2codepoint.items()}, "apos": "'"}
_REF = re.compile(r"&(?:#([0-9]{1,7})|#[xX]([0-9a-fA-F]{1,6})|([A-Za-z][A-Za-z0-9]{0,31}));")
_ENCODING = re.compile(rb"""^<\?xml[^>]{0,200}?encoding\s{0,8}=\s{0,8}["']([A-Za-z0-9._-]{1,40})""")
_ALLOWED = frozenset({"utf-8", "utf-16", "latin-1", "iso8859-1", "cp1252", "ascii"})


class Handler(Protocol):
    def start(self, name: str, attrs: dict[str, str]) -> None: ...

    def end(self, name: str) -> None: ...

    def text(self, text: str) -> None: ...


def _ref(m: re.Match[str]) -> str:
    if m.group(3) is not None:
        return _ENTITIES.get(m.group(3), m.group(0))
    code = int(m.group(1)) if m.group(1) else int(m.group(2), 16)
    if code in (9, 10, 13) or 0x20 <= code <= 0xD7FF or 0xE000 <= code <= 0x10FFFF:
        return chr(code)
    return ""  # not an XML character: nothing to say


def _refs(text: str) -> str:
    return _REF.sub(_ref, text) if "&" in text else text


def decode_xml(raw: bytes, where: str) -> str:
    """The text of an XML document (see the module docstring), its byte order mark dropped."""
    if raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        codec = "utf-16"
    elif raw.startswith(codecs.BOM_UTF8):
        codec, raw = "utf-8", raw[3:]
    else:
        found = _ENCODING.match(raw[:256])
        codec = "utf-8"
        if found is not None:
            try:
                codec = codecs.lookup(found.group(1).decode("ascii")).name
            except LookupError:
                codec = "unknown"
            if codec not in _ALLOWED:
                raise BadBook(f"{where} is in the encoding {found.group(1).decode()!r}.")
    try:
        return raw.decode(codec)
    except UnicodeDecodeError as exc:
        raise BadBook(f"{where} is not valid {codec} text.") from exc


class _Reader(XmlReader):
    def __init__(self, text: str, where: str, handler: Handler, budget: Budget) -> None:
        super().__init__(text)
        self._keep = False
        self._where = where
        self._handler = handler
        self._budget = budget
        self._stack: list[str] = []
        self._root = False

    def run(self) -> None:
        end = len(self._text)
        while self._pos < end:
            self._step()
        while self._stack:
            self._handler.end(self._stack.pop())

    def _fail(self, message: str, at: int | None = None) -> SsmlError:
        where = self._pos if at is None else at
        return SsmlError(f"{message} (at character {where} of {self._where})")

    def _markup(self, lt: int) -> None:
        text = self._text
        kind = text[lt + 1 : lt + 2]
        if kind == "/":
            self._close(lt)
        elif kind not in ("!", "?"):
            self._open(lt)
        elif kind == "?":
            end = text.find("?>", lt + 2)
            if end < 0:
                raise self._fail("A processing instruction is not closed", lt)
            self._pos = end + 2
        elif text.startswith(("<!DOCTYPE", "<!doctype"), lt):
            end = text.find(">", lt, lt + _DOCTYPE_CHARS)
            if end < 0:
                raise self._fail(f"A DOCTYPE is longer than {_DOCTYPE_CHARS} characters", lt)
            if "[" in text[lt:end] or self._root:
                raise self._fail("A DTD that declares entities of its own is refused", lt)
            self._pos = end + 1
        elif text.startswith("<!", lt) and not text.startswith(("<!--", "<![CDATA["), lt):
            raise self._fail("A declaration (<!ENTITY, <!ELEMENT, ...) is refused", lt)
        else:
            super()._markup(lt)

    def _decode(self, raw: str, at: int) -> str:
        return _refs(raw)

    def _element(self, name: str, start: int, attrs: dict[str, str], *, empty: bool) -> None:
        self._root = True
        local = name.rpartition(":")[2].lower()
        self._handler.start(local, attrs)
        if empty:
            self._handler.end(local)
            return
        self._stack.append(local)
        if len(self._stack) > self._budget.limits.max_depth:
            raise too_large(
                "max_depth",
                f"{self._where} nests elements more than {self._budget.limits.max_depth} deep",
            )

    def _end_tag(self, name: str, lt: int, gt: int) -> None:
        local = name.rpartition(":")[2].lower()
        if local not in self._stack:
            return
        while True:
            closed = self._stack.pop()
            self._handler.end(closed)
            if closed == local:
                return

    def _text_run(self, a: int, b: int, *, raw: bool = False) -> None:
        chunk = self._text[a:b]
        self._handler.text(chunk if raw else _refs(chunk))


def read_xml(raw: bytes, where: str, handler: Handler, budget: Budget) -> None:
    """Read one XML document (`where` names it in errors) into `handler`."""
    budget.xml(where, raw)
    text = decode_xml(raw, where)
    try:
        _Reader(text, where, handler, budget).run()
    except SsmlError as exc:
        raise BadBook(f"The book's XML is refused or malformed: {exc}.") from exc
