"""XML, tokenized safely: the part of the SSML reader that knows no SSML.

`XmlReader` reads one document a token at a time (`_step`): runs of text, start and end tags,
comments (skipped), CDATA (text). It refuses what could make reading anything but linear or
make text out of nothing: a DTD or any other `<!` declaration, processing instructions but the
XML declaration at the very start, entities but XML's five escapes and character references
(`_refs`), names over `MAX_NAME` characters, more than `MAX_ATTRS` attributes, attribute
values over `MAX_ATTR_CHARS`. Every token is found with `str.find` (bounded where the token
is) or an anchored pattern whose quantifiers are bounded or stop at a character the next
part cannot start with, and the position only moves forward. A subclass says what tokens
mean: `_element` (a start tag, or an empty one), `_end_tag`, `_text_run`.
"""

from __future__ import annotations

import re
from typing import Final

from ._mapped import Mapped

__all__ = ["MAX_ATTRS", "MAX_ATTR_CHARS", "MAX_NAME", "SsmlError", "XmlReader"]

MAX_NAME: Final = 64
MAX_ATTRS: Final = 16
MAX_ATTR_CHARS: Final = 1024

_NAME_CHARS = r"(?:[^\W\d]|:)[\w.:-]{0,%d}" % (MAX_NAME - 1)  # noqa: UP031
_NAME = re.compile(_NAME_CHARS)
#: A whole start tag of plain attributes, in one match (each part's quantifier is bounded or
#: stops at a character the next part cannot start with, so a failed match is linear); what
#: it does not match is read by the careful path, which says what is wrong.
_VALUE = rf"(?:\"[^\"<&]{{0,{MAX_ATTR_CHARS}}}\"|'[^'<&]{{0,{MAX_ATTR_CHARS}}}')"
_FAST_TAG = re.compile(
    rf"<({_NAME_CHARS})((?:\s+{_NAME_CHARS}\s*=\s*{_VALUE}){{0,{MAX_ATTRS}}})\s*(/?)>"
)
_FAST_ATTR = re.compile(rf"({_NAME_CHARS})\s*=\s*(?:\"([^\"]*)\"|'([^']*)')")
_FAST_CLOSE = re.compile(rf"</({_NAME_CHARS})\s*>")
_ATTR = re.compile(rf"\s+({_NAME_CHARS})\s*=\s*([\"'])")
_TAG_END = re.compile(r"\s*(/?)>")
_REF = re.compile(r"&(?:(amp|lt|gt|quot|apos)|#([0-9]{1,7})|#[xX]([0-9a-fA-F]{1,6}));")
_BAD_AMP = re.compile(r"&(?!(?:amp|lt|gt|quot|apos|#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6});)")
_ESCAPES: Final = {"amp": "&", "lt": "<", "gt": ">", "quot": '"', "apos": "'"}
_SPACE = re.compile(r"\s+")


class SsmlError(ValueError):
    """The document is not SSML this reader takes (malformed, refused, out of bounds)."""



class XmlReader:
    """Tokens of one XML document (see the module docstring)."""

    def __init__(self, text: str) -> None:
        self._text = text
        self._pos = 0
        self._lead = len(text) - len(text.lstrip())  # where an XML declaration may be
        # False: the map of decoded text is not needed (a check reads faster without it).
        self._keep = True

    def _element(self, name: str, start: int, attrs: dict[str, str], *, empty: bool) -> None:
        raise NotImplementedError

    def _end_tag(self, name: str, lt: int, gt: int) -> None:
        raise NotImplementedError

    def _text_run(self, a: int, b: int, *, raw: bool = False) -> None:
        raise NotImplementedError

    def _fail(self, message: str, at: int | None = None) -> SsmlError:
        where = self._pos if at is None else at
        return SsmlError(f"{message} (at character {where} of the SSML)")

    def _step(self) -> None:
        """Read the next token: a run of text, or one piece of markup."""
        text = self._text
        lt = text.find("<", self._pos)
        if lt < 0:
            lt = len(text)
        if lt > self._pos:
            self._text_run(self._pos, lt)
            self._pos = lt
        else:
            self._markup(lt)

    def _markup(self, lt: int) -> None:
        text = self._text
        kind = text[lt + 1 : lt + 2]
        if kind == "/":
            self._close(lt)
        elif kind not in ("!", "?"):
            self._open(lt)
        elif text.startswith("<!--", lt):
            end = text.find("-->", lt + 4)
            if end < 0:
                raise self._fail("A comment is not closed", lt)
            self._pos = end + 3
        elif text.startswith("<![CDATA[", lt):
            end = text.find("]]>", lt + 9)
            if end < 0:
                raise self._fail("A CDATA section is not closed", lt)
            self._text_run(lt + 9, end, raw=True)
            self._pos = end + 3
        elif text.startswith("<!", lt):
            raise self._fail(
                "A DTD or declaration is refused: SSML here takes no DTD and no entities", lt
            )
        elif text.startswith("<?", lt):
            end = text.find("?>", lt + 2)
            if end < 0 or lt != self._lead or not text.startswith("<?xml", lt):
                raise self._fail("Only the XML declaration may be a processing instruction", lt)
            self._pos = end + 2

    def _name(self, at: int) -> tuple[str, int]:
        m = _NAME.match(self._text, at)
        if m is None:
            raise self._fail("A tag without a valid name", at)
        if _NAME.match(self._text, m.end()) and self._text[m.end() : m.end() + 1].strip():
            raise self._fail(f"An element name is longer than {MAX_NAME} characters", at)
        return m.group(), m.end()

    def _open(self, lt: int) -> None:
        fast = _FAST_TAG.match(self._text, lt)
        if fast is not None:
            attrs: dict[str, str] = {}
            if fast.group(2):
                for key, double, single in _FAST_ATTR.findall(fast.group(2)):
                    if key in attrs:
                        raise self._fail(f"<{fast.group(1)}> repeats the attribute {key}", lt)
                    attrs[key] = _SPACE.sub(" ", double or single).strip()
                if len(attrs) > MAX_ATTRS:
                    raise self._fail(f"<{fast.group(1)}> has more than {MAX_ATTRS} attributes", lt)
            self._pos = fast.end()
            self._element(fast.group(1), lt, attrs, empty=bool(fast.group(3)))
            return
        name, pos = self._name(lt + 1)
        attrs: dict[str, str] = {}
        text = self._text
        while True:
            end = _TAG_END.match(text, pos)
            if end is not None:
                break
            m = _ATTR.match(text, pos)
            if m is None:
                raise self._fail(f"<{name}> is not a well-formed tag", lt)
            if len(attrs) >= MAX_ATTRS:
                raise self._fail(f"<{name}> has more than {MAX_ATTRS} attributes", lt)
            quote = m.group(2)
            close = text.find(quote, m.end(), m.end() + MAX_ATTR_CHARS + 1)
            if close < 0:
                if m.end() + MAX_ATTR_CHARS < len(text):
                    raise self._fail(f"An attribute is longer than {MAX_ATTR_CHARS} characters", lt)
                raise self._fail(f"<{name}> has an attribute that is not closed", lt)
            value = text[m.end() : close]
            if "<" in value:
                raise self._fail(f"<{name}> has '<' in an attribute", lt)
            key = m.group(1)
            if key in attrs:
                raise self._fail(f"<{name}> repeats the attribute {key}", lt)
            attrs[key] = _SPACE.sub(" ", self._decode(value, m.end())).strip()
            pos = close + 1
        self._pos = end.end()
        self._element(name, lt, attrs, empty=bool(end.group(1)))

    def _close(self, lt: int) -> None:
        end = _FAST_CLOSE.match(self._text, lt)
        if end is None:
            name, _ = self._name(lt + 2)
            raise self._fail(f"</{name}> is not a well-formed tag", lt)
        self._pos = end.end()
        self._end_tag(end.group(1), lt, end.end())

    def _decode(self, raw: str, at: int) -> str:
        if "&" not in raw:
            return raw
        return self._refs(Mapped.of(raw, at)).text

    def _refs(self, text: Mapped) -> Mapped:
        """XML's escapes and character references decoded; any other `&` refused."""
        bad = _BAD_AMP.search(text.text)
        if bad is not None:
            raise self._fail(
                "An entity other than XML's five escapes (&amp; &lt; &gt; &quot; &apos;) and "
                "&#N; is refused",
                text.begin(bad.start()),
            )
        if not self._keep:  # the map is not needed
            return Mapped.of(_REF.sub(self._ref, text.text), text.point(0))
        return text.sub(_REF, self._ref)

    def _ref(self, m: re.Match[str]) -> str:
        if m.group(1):
            return _ESCAPES[m.group(1)]
        code = int(m.group(2)) if m.group(2) else int(m.group(3), 16)
        if code in (9, 10, 13) or 0x20 <= code <= 0xD7FF or 0xE000 <= code <= 0x10FFFF:
            return chr(code)
        raise SsmlError(f"The character reference {m.group(0)} is not an XML character")
