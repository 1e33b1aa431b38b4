"""What Python 3.11 added that speechd uses, for Python 3.10 (JetPack 6 ships 3.10)."""

from __future__ import annotations

import enum
import sys

__all__ = ["StrEnum"]

if sys.version_info >= (3, 11):
    from enum import StrEnum  # novermin (only imported on 3.11+)
else:

    class StrEnum(str, enum.Enum):
        """`enum.StrEnum` of 3.11: members are strings, and str() and format() give the value
        (a plain `str, Enum` mixin gives "Class.MEMBER" on 3.10)."""

        def __str__(self) -> str:
            return str(self.value)

        def __format__(self, spec: str) -> str:
            return format(str(self.value), spec)
