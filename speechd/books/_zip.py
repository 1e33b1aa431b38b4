"""A zip archive read within limits: its directory parsed here, its members inflated on demand.

Nothing is trusted before it is checked. The end record gives the member count, refused over
`max_members` before the directory is walked; each directory entry gives a name (refused if it
is absolute, holds a backslash, a drive or a `..` segment), a method (stored or deflated only),
a declared size (refused over `max_member_bytes`, and their sum over `max_total_bytes`). A
member is inflated only when read, with zlib told to stop one byte past its declared size: a
member that inflates further (a zip bomb whose header lies) is refused at that byte, and one
that inflates to less, or to other bytes than its CRC says, is refused as corrupt. Extra
fields and comments are skipped unread (Python's own zipfile walks extra fields in quadratic
time). ZIP64 and multi-disk archives are refused: no book needs 4 GiB.

`resolve` turns an href inside the archive (relative to a document's folder) into a member
name, refusing what points outside the archive's root.
"""

from __future__ import annotations

import re
import struct
import zlib
from typing import Final, NamedTuple
from urllib.parse import unquote

from speechd.errors import BadBook

from ._limits import BookLimits, too_large

__all__ = ["Archive", "resolve"]

_EOCD: Final = struct.Struct("<4s4H2IH")
_CENTRAL: Final = struct.Struct("<4s6H3I5HII")
_LOCAL: Final = struct.Struct("<4s5H3I2H")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{0,31}:")
_STORED, _DEFLATED = 0, 8


class _Entry(NamedTuple):
    method: int
    flags: int
    crc: int
    packed: int
    size: int
    offset: int


def _bad_name(name: str) -> bool:
    parts = name.split("/")
    return (
        not name
        or "\\" in name
        or "\x00" in name
        or name.startswith("/")
        or ".." in parts
        or (len(parts[0]) == 2 and parts[0][1] == ":")
    )


class Archive:
    """The members of one zip archive (see the module docstring)."""

    def __init__(self, data: bytes, limits: BookLimits) -> None:
        self._data = data
        self._limits = limits
        self.members: dict[str, _Entry] = {}
        end = data.rfind(b"PK\x05\x06", max(0, len(data) - _EOCD.size - 0xFFFF))
        if end < 0 or end + _EOCD.size > len(data):
            raise BadBook("This is not an EPUB: it is not a zip archive.")
        _, disk, cd_disk, _, count, cd_size, cd_start, _ = _EOCD.unpack_from(data, end)
        if count == 0xFFFF or 0xFFFFFFFF in (cd_size, cd_start):
            raise BadBook("The EPUB is a ZIP64 archive, which speechd does not read.")
        if disk or cd_disk:
            raise BadBook("The EPUB is a multi-part zip archive, which speechd does not read.")
        if count > limits.max_members:
            raise too_large(
                "max_members",
                f"its archive holds {count:,} files, more than {limits.max_members:,}",
            )
        if cd_start + cd_size > end:
            raise BadBook("The EPUB's zip directory lies outside the file.")
        self._walk(cd_start, cd_start + cd_size, count)

    def _walk(self, pos: int, stop: int, count: int) -> None:
        data, limits = self._data, self._limits
        total = 0
        for _ in range(count):
            if pos + _CENTRAL.size > stop:
                raise BadBook("The EPUB's zip directory is cut short.")
            (sig, _, _, flags, method, _, _, crc, packed, size, n_name, n_extra, n_comment, _, _,
             _, offset) = _CENTRAL.unpack_from(data, pos)  # fmt: skip
            if sig != b"PK\x01\x02":
                raise BadBook("The EPUB's zip directory is corrupt.")
            raw = data[pos + _CENTRAL.size : pos + _CENTRAL.size + n_name]
            pos += _CENTRAL.size + n_name + n_extra + n_comment
            name = raw.decode("utf-8" if flags & 0x800 else "cp437", errors="replace")
            if _bad_name(name):
                raise BadBook(f"The EPUB holds a file named {name[:100]!r}, outside its root.")
            if 0xFFFFFFFF in (packed, size, offset):
                raise BadBook("The EPUB is a ZIP64 archive, which speechd does not read.")
            if name.endswith("/"):
                continue  # a folder
            if size > limits.max_member_bytes:
                raise too_large(
                    "max_member_bytes",
                    f"{name[:100]} unpacks to {size:,} bytes, more than "
                    f"{limits.max_member_bytes:,}",
                )
            total += size
            if total > limits.max_total_bytes:
                raise too_large(
                    "max_total_bytes",
                    f"its files unpack to more than {limits.max_total_bytes:,} bytes",
                )
            if name in self.members:
                raise BadBook(f"The EPUB holds two files named {name[:100]!r}.")
            self.members[name] = _Entry(method, flags, crc, packed, size, offset)

    def read(self, name: str) -> bytes:
        """The bytes of member `name` (BadBook if there is none, or it is corrupt or lies)."""
        entry = self.members.get(name)
        if entry is None:
            raise BadBook(f"The EPUB names {name[:100]!r}, but holds no such file.")
        data = self._data
        if entry.offset + _LOCAL.size > len(data):
            raise BadBook(f"{name[:100]} lies outside the EPUB's archive.")
        sig, _, _, _, _, _, _, _, _, n_name, n_extra = _LOCAL.unpack_from(data, entry.offset)
        start = entry.offset + _LOCAL.size + n_name + n_extra
        if sig != b"PK\x03\x04" or start + entry.packed > len(data):
            raise BadBook(f"{name[:100]} is cut short or corrupt in the EPUB's archive.")
        if entry.flags & 1:
            raise BadBook(f"{name[:100]} is encrypted.")
        packed = data[start : start + entry.packed]
        if entry.method == _STORED:
            out = packed
        elif entry.method == _DEFLATED:
            inflater = zlib.decompressobj(-15)
            try:
                # One byte past the declared size is enough to know the size lied.
                out = inflater.decompress(packed, entry.size + 1)
            except zlib.error as exc:
                raise BadBook(f"{name[:100]} is corrupt in the EPUB's archive.") from exc
            if len(out) > entry.size:
                raise too_large(
                    "max_member_bytes",
                    f"{name[:100]} inflates past the {entry.size:,} bytes it declares",
                )
        else:
            raise BadBook(f"{name[:100]} is compressed with method {entry.method}, not deflate.")
        if len(out) != entry.size or zlib.crc32(out) != entry.crc:
            raise BadBook(f"{name[:100]} is corrupt in the EPUB's archive.")
        return out


def resolve(folder: str, href: str) -> str | None:
    """The member an href names, relative to `folder` ("" for the root; fragment and query
    already cut off), or None for a URL of another scheme (http:, data:, ...). BadBook for an
    absolute path, a backslash, or a path that climbs out of the archive's root."""
    if _SCHEME.match(href):
        return None
    path = unquote(href)
    if not path or path.startswith("/") or "\\" in path or "\x00" in path:
        raise BadBook(f"The EPUB links to {href[:100]!r}, which is not a path inside it.")
    parts: list[str] = [p for p in folder.split("/") if p]
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                raise BadBook(f"The EPUB links to {href[:100]!r}, outside its root.")
            parts.pop()
        else:
            parts.append(part)
    return "/".join(parts)
