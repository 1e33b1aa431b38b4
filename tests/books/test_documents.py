"""Markdown and plain-text books: their headings make the chapters, by the rules the modules
state (`speechd.books._markdown`, `_plain`)."""

from __future__ import annotations

import pytest

from speechd.books import Book, BookLimits, read_book
from speechd.errors import BadBook, BookTooLarge

MARKDOWN = """---
title: "Sea Stories"
author: Jo March
lang: en-US
---
# Sea Stories

A short preface.

## The Storm ##

Waves *rose*.

```
# not a heading: this is code
```

### A part of the storm

More.

The Calm
--------

Still water.

##

~~~~
## nor this
~~~~
"""


def chapters(book: Book) -> list[tuple[str, str]]:
    return [(c.title, c.id) for c in book.chapters]


def test_markdown_chapters_at_the_second_level_under_a_title() -> None:
    book = read_book(MARKDOWN.encode(), "markdown")
    assert (book.kind, book.title, book.author, book.language) == (
        "markdown",
        "Sea Stories",
        "Jo March",
        "en-US",
    )
    # The one `#` heading starts the book and the first chapter; `##` and a setext `---`
    # start the others; `###` stays inside; fenced lines are code; the empty `##` heading
    # starts nothing that has words, so it is left out as a chapter of its own.
    assert chapters(book) == [
        ("Sea Stories", "line-6"),
        ("The Storm", "line-10"),
        ("The Calm", "line-22"),
    ]
    storm = book.chapters[1].text
    assert storm.startswith("## The Storm ##\n\nWaves *rose*.")  # Markdown, as written
    assert "# not a heading" in storm and "### A part of the storm" in storm
    assert book.chapters[2].text.startswith("The Calm\n--------\n\nStill water.")
    assert "## nor this" in book.chapters[2].text


def test_markdown_chapters_at_the_first_level_when_there_are_several() -> None:
    text = (
        "Front matter.\n\n# One\n\nA.\n\n## One point one\n\nB.\n\n# Two\n\nC.\n\n"
        "Title\n===\n\nD.\n"
    )
    book = read_book(text.encode(), "markdown")
    assert chapters(book) == [
        ("Front matter.", "line-1"),
        ("One", "line-3"),
        ("Two", "line-11"),
        ("Title", "line-15"),
    ]
    assert book.title == ""


def test_markdown_without_headings_is_one_chapter() -> None:
    book = read_book(b"Just a paragraph.\n\nAnd another one.\n", "markdown")
    assert [(c.title, c.text) for c in book.chapters] == [
        ("Just a paragraph.", "Just a paragraph.\n\nAnd another one.")
    ]


def test_a_rule_is_not_a_heading() -> None:
    book = read_book(b"# A\n\nText.\n\n---\n\nMore.\n\n- item\n---\n", "markdown")
    assert chapters(book) == [("A", "line-1")]


PLAIN = """The Project Gutenberg eBook of Tales

Produced by volunteers.

CHAPTER I.
THE BEGINNING

It was a dark night. Part of the reason was the storm.

Part of the reason is a sentence, not a heading.

Chapter 2: The Middle

More text here.
Chapter 3 is mentioned inside a paragraph.

  chapter twenty-one

Indented, any case, a number word.

EPILOGUE

The end.
"""


def test_plain_text_chapter_lines() -> None:
    book = read_book(PLAIN.encode(), "text")
    assert chapters(book) == [
        ("The Project Gutenberg eBook of Tales", "line-1"),
        ("CHAPTER I. THE BEGINNING", "line-5"),
        ("Chapter 2: The Middle", "line-12"),
        ("chapter twenty-one", "line-17"),
        ("EPILOGUE", "line-21"),
    ]
    assert book.chapters[1].text.startswith("CHAPTER I.\nTHE BEGINNING\n\nIt was a dark night.")
    assert "Part of the reason is a sentence" in book.chapters[1].text
    assert "Chapter 3 is mentioned" in book.chapters[2].text
    assert (book.title, book.author, book.language) == ("", "", "")


def test_plain_text_without_chapter_lines_is_one_chapter() -> None:
    book = read_book("Über alles.\r\n\r\nZweite Zeile.\r\n".encode("utf-16"), "text")
    assert [(c.title, c.text) for c in book.chapters] == [
        ("Über alles.", "Über alles.\n\nZweite Zeile.")
    ]


@pytest.mark.parametrize("kind", ["markdown", "text"])
def test_a_document_without_words_is_refused(kind: str) -> None:
    with pytest.raises(BadBook, match="no text"):
        read_book(b"\n\n   \n", kind)
    with pytest.raises(BadBook, match="no text"):
        read_book(b"#\n\n#\n", "markdown")


def test_text_limits() -> None:
    text = b"".join(b"Chapter %d\n\nWords.\n\n" % i for i in range(1, 6))
    assert len(read_book(text, "text").chapters) == 5
    with pytest.raises(BookTooLarge) as caught:
        read_book(text, "text", limits=BookLimits(max_chapters=4))
    assert caught.value.limit == "max_chapters"
    with pytest.raises(BookTooLarge) as caught:
        read_book(b"# A\n\n" + b"word " * 100, "markdown", limits=BookLimits(max_chapter_chars=50))
    assert caught.value.limit == "max_chapter_chars" and "line 1" in caught.value.message
