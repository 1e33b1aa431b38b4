"""Books made to hurt a reader, and the small EPUB writer they are made with (bench_books and
tests/books use both).

    data = epub({"text/ch1.xhtml": xhtml("One", "<p>Hello.</p>")})   # a valid EPUB 3
    for case in hostile():        # each: name, kind, data, the error and limit it must get
        ...

Each hostile case is cheap to make (milliseconds) however large it claims to be: the 2 GB
member is a deflate stream that repeats one block of zeros (each block refers back to the
zeros before it), about 2 MB on the wire; the archive of 10,000 files is written by hand.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import Final

from speechd.errors import BadBook, BookTooLarge

__all__ = ["HostileBook", "epub", "hostile", "inflating_zeros", "opf", "xhtml", "zip_archive"]

GIB: Final = 1 << 30

CONTAINER: Final = """<?xml version="1.0" encoding="UTF-8"?>
<container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">
  <rootfiles><rootfile full-path="{path}" media-type="application/oebps-package+xml"/></rootfiles>
</container>"""


def xhtml(title: str, body: str, *, head: str = "") -> str:
    """A content document: `body` is the inside of <body>."""
    return f"""<?xml version="1.0" encoding="utf-8"?>
<!DOCTYPE html>
<html xmlns="http://www.w3.org/1999/xhtml" xmlns:epub="http://www.idpf.org/2007/ops">
<head><title>{title}</title>{head}</head>
<body>{body}</body>
</html>"""


def opf(
    documents: list[str], *, title: str = "A Book", extra_items: str = "", spine: str = ""
) -> str:
    """A package document listing `documents` (paths relative to it) in its spine."""
    items = "".join(
        f'<item id="d{i}" href="{path}" media-type="application/xhtml+xml"/>'
        for i, path in enumerate(documents)
    )
    refs = spine or "".join(f'<itemref idref="d{i}"/>' for i in range(len(documents)))
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<package xmlns="http://www.idpf.org/2007/opf" version="3.0" unique-identifier="id">
<metadata xmlns:dc="http://purl.org/dc/elements/1.1/">
<dc:identifier id="id">urn:uuid:0</dc:identifier><dc:title>{title}</dc:title>
<dc:language>en</dc:language></metadata>
<manifest>{items}{extra_items}</manifest><spine>{refs}</spine></package>"""


@dataclass(frozen=True)
class _Member:
    name: bytes
    packed: bytes
    method: int
    crc: int
    size: int  # as declared


def zip_archive(
    members: list[tuple[str, bytes]],
    *,
    raw: dict[str, tuple[bytes, int, int]] | None = None,
    count: int | None = None,
) -> bytes:
    """A zip archive of `members` (deflated, but `mimetype` stored). `raw` gives members as
    (deflate stream, declared size, declared CRC) to write as they are; `count` is the number
    of entries the end record declares (the true one by default)."""
    entries: list[_Member] = []
    for name, data in members:
        if name == "mimetype":
            entries.append(_Member(name.encode(), data, 0, zlib.crc32(data), len(data)))
        else:
            packer = zlib.compressobj(6, zlib.DEFLATED, -15)
            packed = packer.compress(data) + packer.flush()
            entries.append(_Member(name.encode(), packed, 8, zlib.crc32(data), len(data)))
    for name, (packed, size, crc) in (raw or {}).items():
        entries.append(_Member(name.encode(), packed, 8, crc, size))
    out = bytearray()
    central = bytearray()
    for e in entries:
        offset = len(out)
        out += struct.pack(
            "<4s5H3I2H", b"PK\x03\x04", 20, 0x800, e.method, 0, 0x21, e.crc, len(e.packed),
            e.size % (1 << 32), len(e.name), 0,
        ) + e.name + e.packed  # fmt: skip
        central += struct.pack(
            "<4s6H3I5HII", b"PK\x01\x02", 20, 20, 0x800, e.method, 0, 0x21, e.crc,
            len(e.packed), e.size % (1 << 32), len(e.name), 0, 0, 0, 0, 0, offset,
        ) + e.name  # fmt: skip
    n = len(entries) if count is None else count
    end = struct.pack(
        "<4s4H2IH", b"PK\x05\x06", 0, 0, n % 0x10000, n % 0x10000, len(central), len(out), 0
    )
    return bytes(out + central + end)


def epub(
    documents: dict[str, str],
    *,
    package: str | None = None,
    extra: list[tuple[str, bytes]] | None = None,
    raw: dict[str, tuple[bytes, int, int]] | None = None,
    root: str = "OEBPS/content.opf",
) -> bytes:
    """An EPUB of `documents` (paths relative to the package's folder -> XHTML), with a
    package document listing them in order unless `package` is given."""
    folder = root.rpartition("/")[0]
    prefix = f"{folder}/" if folder else ""
    members = [
        ("mimetype", b"application/epub+zip"),
        ("META-INF/container.xml", CONTAINER.format(path=root).encode()),
        (root, (package or opf(list(documents))).encode()),
        *((prefix + path, text.encode()) for path, text in documents.items()),
        *(extra or []),
    ]
    return zip_archive(members, raw=raw)


def inflating_zeros(total: int) -> bytes:
    """A raw deflate stream that inflates to `total` zero bytes (a multiple of 1 MiB), made by
    repeating one compressed block of 1 MiB of zeros: each copy refers back to the zeros the
    copies before it made, so the stream is about 1 KiB per MiB and costs nothing to make."""
    mib = 1 << 20
    packer = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = packer.compress(bytes(mib)) + packer.flush(zlib.Z_FULL_FLUSH)
    again = packer.compress(bytes(mib)) + packer.flush(zlib.Z_FULL_FLUSH)
    return first + again * (total // mib - 1) + packer.flush(zlib.Z_FINISH)


@dataclass(frozen=True)
class HostileBook:
    name: str
    kind: str
    data: bytes
    error: type[BadBook]
    limit: str = ""  # the limit a BookTooLarge names


def _bomb_epub(declared: int) -> bytes:
    """Two chapters, the second a 2 GB run of zeros that declares `declared` bytes."""
    return epub(
        {"one.xhtml": xhtml("One", "<p>Fine.</p>")},
        package=opf(["one.xhtml", "two.xhtml"]),
        raw={"OEBPS/two.xhtml": (inflating_zeros(2 * GIB), declared, 0)},
    )


def _many_members(n: int) -> bytes:
    members = [(f"OEBPS/f{i}.txt", b"") for i in range(n)]
    return epub({"one.xhtml": xhtml("One", "<p>Fine.</p>")}, extra=members)


def _doctype(subset: str) -> str:
    return xhtml("One", "<p>&lol9;</p>").replace("<!DOCTYPE html>", f"<!DOCTYPE html [{subset}]>")


_LAUGHS: Final = '<!ENTITY lol "lol">' + "".join(
    f'<!ENTITY lol{i} "{f"&lol{i - 1};" * 10 if i > 1 else "&lol;" * 10}">' for i in range(1, 10)
)


def hostile() -> list[HostileBook]:
    """The fuzz set: each case, and what a reader must refuse it with."""
    fine = xhtml("One", "<p>Fine.</p>")
    spine = "".join('<itemref idref="d0"/>' for _ in range(10_000))
    many = "".join(f'<item id="e{i}" href="e.xhtml" media-type="application/xhtml+xml"/>'
                   for i in range(10_000))  # fmt: skip
    deep = xhtml("Deep", "<div>" * 20_000 + "x" + "</div>" * 20_000)
    laughing = opf(["one.xhtml"], title="&lol9;")
    laughing = laughing.replace("<package", f"<!DOCTYPE package [{_LAUGHS}]>\n<package")
    return [
        HostileBook("not a zip", "epub", b"PK\x03\x04 not really", BadBook),
        HostileBook("zip bomb, 2 GB declared", "epub", _bomb_epub(2 * GIB), BookTooLarge,
                    "max_member_bytes"),
        HostileBook("2 GB member declared as 1 KiB", "epub", _bomb_epub(1024), BookTooLarge,
                    "max_member_bytes"),
        HostileBook("members over the total", "epub", epub({"one.xhtml": fine}, raw={
            f"OEBPS/big{i}.bin": (b"", 15 << 20, 0) for i in range(20)}), BookTooLarge,
            "max_total_bytes"),
        HostileBook("10,000 files", "epub", _many_members(10_000), BookTooLarge, "max_members"),
        HostileBook("65,535 files declared", "epub",
                    zip_archive([("a", b"")], count=65_534), BookTooLarge, "max_members"),
        HostileBook("10,000 empty chapters", "epub", epub(
            {"e.xhtml": xhtml("", "")}, package=opf(["e.xhtml"], extra_items=many,
                                                    spine="".join(f'<itemref idref="e{i}"/>'
                                                                  for i in range(10_000)))),
            BookTooLarge, "max_chapters"),
        HostileBook("one chapter 10,000 times", "epub",
                    epub({"one.xhtml": fine}, package=opf(["one.xhtml"], spine=spine)),
                    BookTooLarge, "max_chapters"),
        HostileBook("deep nesting", "epub", epub({"deep.xhtml": deep}), BookTooLarge,
                    "max_depth"),
        HostileBook("billion laughs", "epub", epub({"one.xhtml": _doctype(_LAUGHS)}), BadBook),
        HostileBook("external entity", "epub", epub({"one.xhtml": _doctype(
            '<!ENTITY lol9 SYSTEM "file:///etc/passwd">')}), BadBook),
        HostileBook("entity declared outside a DTD", "epub", epub({"one.xhtml": fine.replace(
            "<html", '<!ENTITY x "y"><html')}), BadBook),
        HostileBook("entities in the package", "epub",
                    epub({"one.xhtml": fine}, package=laughing), BadBook),
        HostileBook("href out of the root", "epub",
                    epub({"one.xhtml": fine}, package=opf(["../../etc/passwd"])), BadBook),
        HostileBook("href out of the root, escaped", "epub",
                    epub({"one.xhtml": fine}, package=opf(["%2e%2e/%2e%2e/x.xhtml"])), BadBook),
        HostileBook("absolute href", "epub",
                    epub({"one.xhtml": fine}, package=opf(["/etc/passwd"])), BadBook),
        HostileBook("backslash href", "epub",
                    epub({"one.xhtml": fine}, package=opf(["..\\one.xhtml"])), BadBook),
        HostileBook("a file named out of the root", "epub",
                    epub({"one.xhtml": fine}, extra=[("../../evil.xhtml", b"")]), BadBook),
        HostileBook("package out of the root", "epub",
                    epub({"one.xhtml": fine}, root="../content.opf"), BadBook),
        HostileBook("elements without end", "epub", epub({"one.xhtml": xhtml(
            "Many", "<b/>" * 250_000)}), BookTooLarge, "max_tags"),
        HostileBook("Markdown: 10,000 empty chapters", "markdown", b"#\n" * 10_000,
                    BookTooLarge, "max_chapters"),
        HostileBook("Markdown: 100,000 rules", "markdown", b"a\n---\n" * 100_000,
                    BookTooLarge, "max_marks"),
        HostileBook("text: 10,000 chapters", "text", b"Chapter 1\n\n" * 10_000,
                    BookTooLarge, "max_chapters"),
        HostileBook("text: 3 million characters", "text", b"word " * 600_000,
                    BookTooLarge, "max_chars"),
        HostileBook("text: a chapter of 1.5 million characters", "text",
                    b"Chapter 1\n\n" + b"word " * 300_000, BookTooLarge, "max_chapter_chars"),
        HostileBook("text: not UTF-8", "text", b"\xc3\x28" * 10, BadBook),
    ]
