"""EPUB 3 and EPUB 2 books written by the tests (`_epubs`) become chapters with the right
titles, order and text: what a listener should hear, without what they should not."""

from __future__ import annotations

import pytest

from loadtest._hostile_books import epub, opf, xhtml
from speechd.books import Book, BookLimits, read_book
from speechd.errors import BadBook, BookTooLarge
from tests.books._epubs import COVER, epub2, epub3


def titles(book: Book) -> list[str]:
    return [c.title for c in book.chapters]


def test_epub3_chapters_come_in_spine_order_titled_by_the_nav() -> None:
    book = read_book(epub3(), "epub")
    # The cover page (an image) and the navigation document are left out, and so is the
    # non-linear notes document; the second file holds two chapters, split at the nav's ids
    # (the nested "A Section" entry stays inside Chapter Two).
    assert titles(book) == ["Chapter One: The Keeper", "Chapter Two", "Chapter Three"]
    assert [(c.href, c.id) for c in book.chapters] == [
        ("OEBPS/text/ch1.xhtml", "ch1"),
        ("OEBPS/text/ch2 and 3.xhtml#ch2", "ch2"),
        ("OEBPS/text/ch2 and 3.xhtml#ch3", "ch2"),
    ]
    assert book.chapters[1].text == (
        "Chapter Two\n\nShips passed in the night.\n\nA Section\n\nFog came & went."
    )
    assert book.chapters[2].text == "Chapter Three\n\nMorning, at last."


def test_epub3_text_keeps_what_is_read_and_skips_the_rest() -> None:
    text = read_book(epub3(), "epub").chapters[0].text
    assert text.split("\n\n") == [
        "Chapter One",  # the heading, kept
        "The keeper climbed the stairs\u2014all ninety of them.",  # entities; no noteref "1"
        "He lit the lamp.",  # no "2" (doc-noteref), no script
        "Ship, Lights",  # the table: a row a paragraph, cells in order
        "Mary Rose, 3",
        "Hope. none",
        "Line one\nline two.",  # <br/> is a line break
        "The light, drawn by hand.",  # the figure's caption; the image has no words
        "A note on lamps.",  # the footnote's text, without its back-link
    ]
    for absent in ("12", "scripted", "alert", "color", "↩", "Contents", "Start here"):
        assert absent not in text


def test_epub3_metadata_and_cover() -> None:
    book = read_book(epub3(), "epub")
    assert (book.kind, book.title, book.author, book.language) == (
        "epub",
        "The Lighthouse",
        "Ada Keeper",  # the creator whose role is aut; the editor is not an author
        "en-GB",
    )
    assert (book.cover, book.cover_type) == (COVER, "image/png")


def test_images_are_read_by_their_alt_text_only_when_asked() -> None:
    plain = read_book(epub3(), "epub")
    asked = read_book(epub3(), "epub", alt_text=True)
    assert "lighthouse at dusk" not in plain.chapters[0].text
    assert "A lighthouse at dusk\n\nThe light, drawn by hand." in asked.chapters[1].text
    # The cover page has words now: a chapter of its own, titled by its first line.
    assert titles(asked) == ["Cover: a lighthouse", *titles(plain)]


def test_epub2_chapters_come_from_the_ncx() -> None:
    book = read_book(epub2(), "epub")
    # The title page has no NCX entry but a heading; the NCX's nested "The Door" stays
    # inside chapter I; the split file that continues chapter II (no entry, no heading)
    # joins it.
    assert titles(book) == ["The Old House", "I. Arrival", "II. Departure"]
    assert [c.id for c in book.chapters] == ["titlepage", "c1", "c2"]
    assert book.chapters[1].text == (
        "I. Arrival\n\nThey came in the rain. The door was open.\n\nThe Door\n\n"
        "It creaked\u00a0\u2014 as doors do\u2019.\n\nIt always rained."
    ).replace("\u00a0", " ")
    assert book.chapters[2].text.endswith("They left at dawn.\n\nThe road was long, and the "
                                          "house grew small behind them.")  # fmt: skip
    assert (book.title, book.author, book.language) == ("The Old House", "Mary Wren", "en")
    assert (book.cover, book.cover_type) == (COVER, "image/png")


def test_without_a_table_of_contents_headings_and_first_lines_title_the_chapters() -> None:
    data = epub(
        {
            "a.xhtml": xhtml("A", "<h2>The Start</h2><p>Once.</p>"),
            "b.xhtml": xhtml("B", "<p>No heading here. Second sentence.</p><p>More.</p>"),
            "c.xhtml": xhtml("C", "<div><img src='x.png' alt='a picture'/></div>"),
        }
    )
    book = read_book(data, "epub")
    assert titles(book) == ["The Start", "No heading here. Second sentence."]
    assert book.title == "A Book" and book.author == "" and book.cover == b""


def test_a_document_of_many_chapters_is_split_at_each() -> None:
    nav = xhtml(
        "Contents",
        '<nav epub:type="toc"><ol>'
        + "".join(f'<li><a href="all.xhtml#c{i}">Part {i}</a></li>' for i in range(5))
        + "</ol></nav>",
    )
    body = "".join(f'<h2 id="c{i}">Heading {i}</h2><p>Text {i}.</p>' for i in range(5))
    package = opf(
        ["all.xhtml"], extra_items='<item id="n" href="nav.xhtml" '
        'media-type="application/xhtml+xml" properties="nav"/>',
    )  # fmt: skip
    book = read_book(
        epub({"all.xhtml": xhtml("All", body), "nav.xhtml": nav}, package=package), "epub"
    )
    assert titles(book) == [f"Part {i}" for i in range(5)]
    assert [c.text for c in book.chapters] == [f"Heading {i}\n\nText {i}." for i in range(5)]


def test_limits_are_the_callers() -> None:
    with pytest.raises(BookTooLarge) as caught:
        read_book(epub3(), "epub", limits=BookLimits(max_chapters=2))
    assert caught.value.limit == "max_chapters"
    with pytest.raises(BookTooLarge) as caught:
        read_book(epub3(), "epub", limits=BookLimits(max_chapter_chars=100))
    assert caught.value.limit == "max_chapter_chars"
    assert "OEBPS/text/ch1.xhtml" in caught.value.message
    with pytest.raises(BookTooLarge) as caught:
        read_book(epub3(), "epub", limits=BookLimits(max_chars=150))
    assert caught.value.limit == "max_chars"
    # A cover over its limit is left out, not refused.
    assert read_book(epub3(), "epub", limits=BookLimits(max_cover_bytes=10)).cover == b""


def test_the_errors_read_as_400s_naming_the_file() -> None:
    with pytest.raises(BadBook) as caught:
        read_book(b"not a zip at all", "epub")
    error = caught.value
    assert (error.status, error.type, error.code, error.param) == (
        400,
        "invalid_request_error",
        "bad_book",
        "file",
    )
    with pytest.raises(BookTooLarge) as large:
        read_book(epub3(), "epub", limits=BookLimits(max_bytes=100))
    assert (large.value.status, large.value.code, large.value.limit) == (
        400,
        "book_too_large",
        "max_bytes",
    )
    with pytest.raises(BadBook, match="Unknown kind"):
        read_book(b"", "pdf")


def test_malformed_xml_names_the_document() -> None:
    broken = epub({"one.xhtml": xhtml("One", "<p>Fine.</p>"), "two.xhtml": "<p a=>x</p>"})
    with pytest.raises(BadBook, match=r"OEBPS/two\.xhtml"):
        read_book(broken, "epub")
    missing = epub({}, package=opf(["gone.xhtml"]))
    with pytest.raises(BadBook, match="no such file"):
        read_book(missing, "epub")
