"""Books: an EPUB, a Markdown or a plain-text document read into chapters of text, each ready
for the planner, with the book's title, author, language and cover.

    book = read_book(data, "epub", limits=BookLimits(max_chapters=200))
    for chapter in book.chapters:
        print(chapter.title, len(chapter.text))

Reading is bounded before work: every limit in `BookLimits` is checked before what it bounds is
read (sizes and counts an archive declares) or at the first byte or character past it (what a
member really inflates to, the text made); an EPUB's XML gets no DTD, no entity expansion and
no path outside the archive. What is refused raises `speechd.errors.BookTooLarge` (naming the
limit) or `BadBook`: a 400 to a caller. No torch, no I/O.

How each kind becomes chapters: `_epub` (spine, navigation, text extraction in `_xhtml`),
`_markdown` (headings), `_plain` (chapter lines).
"""

from ._book import Book
from ._kinds import read_book
from ._limits import BookLimits

__all__ = ["Book", "BookLimits", "read_book"]

for _name in __all__:
    _obj = globals()[_name]
    if isinstance(_obj, type):
        _obj.__module__ = __name__
del _name, _obj
