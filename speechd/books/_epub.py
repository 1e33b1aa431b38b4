"""An EPUB (2 or 3) read into chapters.

`META-INF/container.xml` names the package document (OPF). Its spine gives the reading order:
each linear XHTML document in it, once, is read into text (`_xhtml`); the navigation document
itself, non-linear documents (notes, answers) and documents of other types are left out. The
table of contents (EPUB 3's `nav epub:type="toc"`, else EPUB 2's NCX) titles the chapters:

* a document's title is that of the first entry that points at it (at the document itself, or
  at an element in it: then what comes before that element is a part of its own);
* entries that point at elements further into the same document, at the depth of its first
  entry or above, start chapters of their own there (one file holding several chapters);
* a document (or part) that no entry points at takes its first heading as its title; one with
  no heading either, in a book that has a table of contents, is the rest of the chapter before
  it (a converter's split file) and joins it; without a table of contents its first line is its
  title;
* a document (or part) with no words, no letter or digit (a cover page that holds only an
  image, unless `alt_text` gives it words; a scene break) is left out.

The title, author(s) and language are the package's `dc:title`, `dc:creator` (those with the
role `aut` when any says so) and `dc:language`; the cover is the manifest item marked
`properties="cover-image"` (EPUB 3) or named by `<meta name="cover">` (EPUB 2).
"""

from __future__ import annotations

from dataclasses import dataclass

from speechd.errors import BadBook

from ._book import Book, Chapter
from ._chapters import has_words, short
from ._limits import BookLimits, Budget, too_large
from ._markup import Handler, read_xml
from ._package import Container, Entry, Item, Nav, Ncx, Package
from ._xhtml import Part, extract
from ._zip import Archive, resolve

__all__ = ["read_epub"]

_CONTAINER = "META-INF/container.xml"
_OPF = "application/oebps-package+xml"
_NCX = "application/x-dtbncx+xml"
_CONTENT = frozenset({"application/xhtml+xml", "text/html", "application/html+xml"})
_IMAGE_TYPES = {"image/jpg": "image/jpeg"}


def _split(href: str) -> tuple[str, str]:
    """(path, fragment) of an href; a query is dropped."""
    path, _, fragment = href.partition("#")
    return path.partition("?")[0], fragment


def _folder(path: str) -> str:
    return path.rpartition("/")[0]


class _Reader:
    def __init__(self, data: bytes, limits: BookLimits, alt_text: bool) -> None:
        self.limits = limits
        self.alt_text = alt_text
        self.budget = Budget(limits)
        self.archive = Archive(data, limits)

    def xml(self, path: str, handler: Handler) -> None:
        read_xml(self.archive.read(path), path, handler, self.budget)

    def package(self) -> tuple[str, Package]:
        if "mimetype" in self.archive.members:
            kind = self.archive.read("mimetype").strip()
            if kind != b"application/epub+zip":
                raise BadBook(f"This is not an EPUB: its mimetype is {kind[:60]!r}.")
        if _CONTAINER not in self.archive.members:
            raise BadBook(f"This is not an EPUB: it has no {_CONTAINER}.")
        container = Container()
        self.xml(_CONTAINER, container)
        roots = [p for p, t in container.rootfiles if t == _OPF] or [
            p for p, _ in container.rootfiles
        ]
        path = resolve("", roots[0]) if roots else None
        if path is None:
            raise BadBook(f"The EPUB's {_CONTAINER} names no package document.")
        raw = self.archive.read(path)
        # Each itemref is one or two mentions of the word: refused before the package is read.
        if raw.count(b"itemref") > 2 * self.limits.max_chapters + 2:
            raise too_large(
                "max_chapters",
                f"its spine lists more than {self.limits.max_chapters:,} documents",
            )
        package = Package(self.limits)
        read_xml(raw, path, package, self.budget)
        return path, package

    def toc(self, folder: str, package: Package) -> list[tuple[int, str, str, str]]:
        """The table of contents as (depth, document, fragment, title): the navigation
        document's, else the NCX's."""
        items = package.manifest.values()
        sources: list[tuple[Item, Nav | Ncx]] = [
            (item, Nav(self.budget)) for item in items if "nav" in item.properties
        ][:1]
        ncx = package.manifest.get(package.ncx_id) or next(
            (item for item in items if item.media_type == _NCX), None
        )
        if ncx is not None:
            sources.append((ncx, Ncx(self.budget)))
        for item, handler in sources:
            path = resolve(folder, _split(item.href)[0])
            if path is None or path not in self.archive.members:
                continue
            self.xml(path, handler)
            entries = (self._entry(_folder(path), e) for e in handler.entries)
            found = [e for e in entries if e is not None]
            if found:
                return found
        return []

    def _entry(self, folder: str, entry: Entry) -> tuple[int, str, str, str] | None:
        path, fragment = _split(entry.href)
        target = resolve(folder, path) if path else None
        return None if target is None else (entry.depth, target, fragment, entry.title)

    def cover(self, folder: str, package: Package) -> tuple[bytes, str]:
        items = package.manifest.values()
        item = next((i for i in items if "cover-image" in i.properties), None)
        item = item or package.manifest.get(package.cover_id)
        if item is None or not item.media_type.startswith("image/"):
            return b"", ""
        path = resolve(folder, _split(item.href)[0])
        entry = self.archive.members.get(path or "")
        if path is None or entry is None or entry.size > self.limits.max_cover_bytes:
            return b"", ""
        return self.archive.read(path), _IMAGE_TYPES.get(item.media_type, item.media_type)

    def documents(self, folder: str, package: Package) -> list[tuple[str, str]]:
        """The spine's readable documents, in order, each once: (path, manifest id)."""
        seen: set[str] = set()
        found = []
        for idref, linear in package.spine:
            item = package.manifest.get(idref)
            if item is None:
                raise BadBook(f"The EPUB's spine names {idref[:100]!r}, not in its manifest.")
            if not linear or "nav" in item.properties or item.media_type not in _CONTENT:
                continue
            path = resolve(folder, _split(item.href)[0])
            if path is None or path in seen:
                continue
            seen.add(path)
            found.append((path, idref))
        return found


def _parts(reader: _Reader, path: str, entries: list[tuple[int, str, str]]) -> list[Part]:
    """The parts of one document: split at the entries that point into it (see the module
    docstring); `entries` are its table of contents entries as (depth, fragment, title)."""
    title = None
    splits: dict[str, str] = {}
    if entries:
        top = entries[0][0]
        for depth, fragment, name in entries:
            if depth > top:
                continue
            if not fragment:
                title = title or name
            else:
                splits.setdefault(fragment, name)
    return extract(
        reader.archive.read(path),
        path,
        title=title,
        splits=splits,
        alt_text=reader.alt_text,
        budget=reader.budget,
    )


@dataclass
class _Chapter:
    title: str
    href: str
    id: str
    texts: list[str]
    chars: int

    def add(self, text: str, limits: BookLimits) -> None:
        self.texts.append(text)
        self.chars += 2 + len(text)
        if self.chars > limits.max_chapter_chars:
            raise too_large(
                "max_chapter_chars",
                f"a chapter ({self.href}) holds more than {limits.max_chapter_chars:,} characters",
            )

    def done(self) -> Chapter:
        return Chapter(self.title, "\n\n".join(self.texts), href=self.href, id=self.id)


def read_epub(data: bytes, limits: BookLimits, *, alt_text: bool) -> Book:
    reader = _Reader(data, limits, alt_text)
    opf, package = reader.package()
    folder = _folder(opf)
    toc = reader.toc(folder, package)
    by_document: dict[str, list[tuple[int, str, str]]] = {}
    for depth, path, fragment, title in toc:
        by_document.setdefault(path, []).append((depth, fragment, title))
    chapters: list[_Chapter] = []
    for path, idref in reader.documents(folder, package):
        for part in _parts(reader, path, by_document.get(path, [])):
            text = "\n\n".join(part.paragraphs)
            if not has_words(text):
                continue
            if part.title is None and not part.heading and toc and chapters:
                chapters[-1].add(text, limits)  # the rest of the chapter before it
                continue
            href = f"{path}#{part.fragment}" if part.fragment else path
            title = part.title or part.heading or short(text.partition("\n")[0])
            chapters.append(_Chapter(title, href, idref, [text], len(text)))
            if len(chapters) > limits.max_chapters:
                raise too_large(
                    "max_chapters", f"it has more than {limits.max_chapters:,} chapters"
                )
    if not chapters:
        raise BadBook("The EPUB holds no text to read.")
    cover, cover_type = reader.cover(folder, package)
    return Book(
        kind="epub",
        title=package.titles[0] if package.titles else "",
        author=package.author(),
        language=package.languages[0] if package.languages else "",
        chapters=tuple(c.done() for c in chapters),
        cover=cover,
        cover_type=cover_type,
    )
