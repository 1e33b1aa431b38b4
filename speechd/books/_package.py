"""An EPUB's own description of itself: the container's pointer to the package (OPF), the
package's metadata, manifest and spine, and the table of contents (EPUB 3's navigation document
or EPUB 2's NCX), each read as XML events by a small handler."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from ._chapters import short
from ._limits import BookLimits, Budget, too_large

__all__ = ["Container", "Entry", "Item", "Nav", "Ncx", "Package", "semantics"]


def semantics(attrs: dict[str, str]) -> set[str]:
    """The tokens of an element's `epub:type` (any prefix) and `role`."""
    found: set[str] = set()
    for key, value in attrs.items():
        if key.endswith(":type") or key == "role":
            found.update(value.split())
    return found


class Container:
    """META-INF/container.xml: where the package document is."""

    def __init__(self) -> None:
        self.rootfiles: list[tuple[str, str]] = []

    def start(self, name: str, attrs: dict[str, str]) -> None:
        if name == "rootfile" and attrs.get("full-path"):
            self.rootfiles.append((attrs["full-path"], attrs.get("media-type", "")))

    def end(self, name: str) -> None:
        pass

    def text(self, text: str) -> None:
        pass


class Item(NamedTuple):
    href: str
    media_type: str
    properties: frozenset[str]


@dataclass
class Package:
    """The package document (OPF): metadata, manifest, spine."""

    limits: BookLimits
    titles: list[str] = field(default_factory=list)
    creators: list[tuple[str, str, str]] = field(default_factory=list)  # (id, role, name)
    roles: dict[str, str] = field(default_factory=dict)  # creator id -> EPUB 3 role
    languages: list[str] = field(default_factory=list)
    cover_id: str = ""
    manifest: dict[str, Item] = field(default_factory=dict)
    spine: list[tuple[str, bool]] = field(default_factory=list)  # (idref, linear)
    ncx_id: str = ""
    _capture: tuple[str, dict[str, str]] | None = None
    _text: list[str] = field(default_factory=list)

    def start(self, name: str, attrs: dict[str, str]) -> None:
        if name in ("title", "creator", "language") or (
            name == "meta" and attrs.get("property") == "role"
        ):
            self._capture, self._text = (name, attrs), []
        elif name == "meta" and attrs.get("name") == "cover":
            self.cover_id = self.cover_id or attrs.get("content", "")
        elif name == "item" and "id" in attrs and "href" in attrs:
            if len(self.manifest) >= self.limits.max_members:
                raise too_large(
                    "max_members",
                    f"its manifest lists more than {self.limits.max_members:,} files",
                )
            props = frozenset(attrs.get("properties", "").split())
            self.manifest.setdefault(
                attrs["id"], Item(attrs["href"], attrs.get("media-type", ""), props)
            )
        elif name == "spine":
            self.ncx_id = attrs.get("toc", "")
        elif name == "itemref" and "idref" in attrs:
            self.spine.append((attrs["idref"], attrs.get("linear", "yes") != "no"))
            if len(self.spine) > self.limits.max_chapters:
                raise too_large(
                    "max_chapters",
                    f"its spine lists more than {self.limits.max_chapters:,} documents",
                )

    def end(self, name: str) -> None:
        if self._capture is None or self._capture[0] != name:
            return
        kind, attrs = self._capture
        value = short("".join(self._text))
        self._capture = None
        if not value:
            return
        if kind == "title":
            self.titles.append(value)
        elif kind == "language":
            self.languages.append(value)
        elif kind == "meta":
            self.roles[attrs.get("refines", "").lstrip("#")] = value
        else:
            role = next((v for k, v in attrs.items() if k.endswith(":role") or k == "role"), "")
            self.creators.append((attrs.get("id", ""), role, value))

    def text(self, text: str) -> None:
        if self._capture is not None:
            self._text.append(text)

    def author(self) -> str:
        """The creators whose role is author (`aut`), or every creator when none says."""
        named = [(self.roles.get(i, role), name) for i, role, name in self.creators]
        authors = [name for role, name in named if role == "aut"] or [n for _, n in named]
        return short(", ".join(dict.fromkeys(authors)))


class Entry(NamedTuple):
    """One entry of a table of contents: its depth (1: top), target and title."""

    depth: int
    href: str
    title: str


class _Toc:
    def __init__(self, budget: Budget) -> None:
        self._budget = budget
        self.entries: list[Entry] = []

    def _add(self, depth: int, href: str, title: str) -> None:
        title = short(title)
        if not href or not title:
            return
        self.entries.append(Entry(depth, href, title))
        if len(self.entries) > self._budget.limits.max_marks:
            raise too_large(
                "max_marks",
                f"its table of contents has more than {self._budget.limits.max_marks:,} entries",
            )


class Nav(_Toc):
    """EPUB 3's navigation document: the links of its `nav epub:type="toc"`, by list depth."""

    def __init__(self, budget: Budget) -> None:
        super().__init__(budget)
        self._state = 0  # 0: before the toc, 1: in it, 2: after it
        self._open: list[str] = []
        self._depth = 0
        self._link: tuple[str, list[str]] | None = None

    def start(self, name: str, attrs: dict[str, str]) -> None:
        if self._state == 2:
            return
        if self._state == 0:
            if name == "nav" and semantics(attrs) & {"toc", "doc-toc"}:
                self._state, self._open = 1, []
            else:
                return
        self._open.append(name)
        if name == "ol":
            self._depth += 1
        elif name == "a" and self._link is None:
            self._link = (attrs.get("href", ""), [])

    def end(self, name: str) -> None:
        if self._state != 1:
            return
        self._open.pop()
        if name == "ol":
            self._depth -= 1
        elif name == "a" and self._link is not None:
            href, text = self._link
            self._add(max(self._depth, 1), href, "".join(text))
            self._link = None
        if not self._open:
            self._state = 2

    def text(self, text: str) -> None:
        if self._link is not None:
            self._link[1].append(text)


class Ncx(_Toc):
    """EPUB 2's NCX: the navPoints of its navMap, by nesting depth."""

    def __init__(self, budget: Budget) -> None:
        super().__init__(budget)
        self._in_map = False
        self._points: list[list[str | None]] = []  # per open navPoint: [label, src, done]
        self._label: list[str] | None = None

    def start(self, name: str, attrs: dict[str, str]) -> None:
        if name == "navmap":
            self._in_map = True
        elif not self._in_map:
            return
        elif name == "navpoint":
            self._points.append([None, None, None])
        elif name == "text" and self._points and self._points[-1][0] is None:
            self._label = []
        elif name == "content" and self._points:
            self._points[-1][1] = self._points[-1][1] or attrs.get("src", "")
            self._emit()

    def end(self, name: str) -> None:
        if name == "navmap":
            self._in_map = False
        elif name == "text" and self._label is not None:
            self._points[-1][0] = "".join(self._label)
            self._label = None
            self._emit()
        elif name == "navpoint" and self._points:
            self._points.pop()

    def text(self, text: str) -> None:
        if self._label is not None:
            self._label.append(text)

    def _emit(self) -> None:
        point = self._points[-1]
        if point[0] is not None and point[1] is not None and point[2] is None:
            point[2] = "done"
            self._add(len(self._points), point[1], point[0])
