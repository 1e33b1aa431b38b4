"""Books made to hurt: each refused with the error (and the limit) it must get, in a few
milliseconds (the ceiling here is 1 s, far above what each needs: a blow-up, not a speed
target; `python -m loadtest.bench_books` prints the times). Random and mangled books never
raise anything but the book's own error."""

from __future__ import annotations

import contextlib
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loadtest._hostile_books import HostileBook, epub, hostile, xhtml
from speechd.books import read_book
from speechd.errors import BadBook, BookTooLarge
from tests.books._epubs import epub2, epub3

CASES = hostile()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_each_hostile_book_is_refused_quickly_with_its_error(case: HostileBook) -> None:
    started = time.process_time()
    with pytest.raises(BadBook) as caught:
        read_book(case.data, case.kind)
    spent = time.process_time() - started
    assert type(caught.value) is case.error, caught.value.message
    if case.error is BookTooLarge:
        assert caught.value.limit == case.limit, caught.value.message
    assert spent < 1.0, f"{case.name}: {spent:.3f} s of CPU"


def test_the_fuzz_set_covers_what_it_must() -> None:
    limits = {c.limit for c in CASES}
    assert {"max_member_bytes", "max_members", "max_total_bytes", "max_depth", "max_tags",
            "max_chapters", "max_chars", "max_chapter_chars", "max_marks"} <= limits  # fmt: skip
    names = " ".join(c.name for c in CASES)
    for kind in ("bomb", "2 GB member declared as 1 KiB", "laughs", "external entity",
                 "out of the root", "10,000 empty chapters", "10,000 files"):  # fmt: skip
        assert kind in names


def _read(data: bytes, kind: str) -> None:
    try:
        book = read_book(data, kind)
    except BadBook:
        return
    assert book.chapters and all(c.text.strip() and c.title for c in book.chapters)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=4000), st.sampled_from(["epub", "markdown", "text"]))
def test_random_bytes_are_a_book_or_a_bad_book(data: bytes, kind: str) -> None:
    _read(data, kind)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_mangled_epubs_are_a_book_or_a_bad_book(data: st.DataObject) -> None:
    """Valid EPUBs with bytes changed, cut or removed: the archive, its XML, its sizes."""
    source = bytearray(data.draw(st.sampled_from([epub2(), epub3()])))
    for _ in range(data.draw(st.integers(1, 6))):
        at = data.draw(st.integers(0, len(source) - 1))
        action = data.draw(st.sampled_from(["flip", "cut", "drop"]))
        if action == "flip":
            source[at] = data.draw(st.integers(0, 255))
        elif action == "cut":
            del source[at:]
            if not source:
                break
        else:
            del source[at : at + data.draw(st.integers(1, 64))]
            if not source:
                break
    _read(bytes(source), "epub")


_MARKUP = st.sampled_from([
    "<p>", "</p>", "<div>", "</div>", "<br/>", "<h1>", "</h1>", "<table><tr><td>", "</td>",
    "<a href='#n1'>", "</a>", "<!--", "-->", "<![CDATA[", "]]>", "<?pi x?>", "<!DOCTYPE x>",
    "<!DOCTYPE x [", "<!ENTITY e 'x'>", "&amp;", "&nbsp;", "&e;", "&#0;", "&#x110000;", "&",
    "<", ">", "'", '"', "<script>", "</script>", "<span epub:type='pagebreak'>", "</span>",
    "<img alt='x'/>", "<p a='1' a='2'>", "<x:y z:w='1'>", "</x:y>", "word ", "\n", " ",
])  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(st.lists(_MARKUP, max_size=60), st.booleans())
def test_random_markup_in_a_chapter_is_a_book_or_a_bad_book(parts: list[str], alt: bool) -> None:
    data = epub({"one.xhtml": xhtml("One", "".join(parts)), "two.xhtml": "".join(parts)})
    with contextlib.suppress(BadBook):
        read_book(data, "epub", alt_text=alt)


_LINES = st.sampled_from([
    "# ", "## ", "#", "Title", "===", "---", "```", "~~~", "    code", "Chapter 1", "CHAPTER IV.",
    "Part of it", "Prologue", "", "   ", "word words", "- item", "> quote", "\t", "---\ntitle: x",
])  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(st.lists(_LINES, max_size=80), st.sampled_from(["markdown", "text"]))
def test_random_documents_are_a_book_or_a_bad_book(lines: list[str], kind: str) -> None:
    _read("\n".join(lines).encode(), kind)
