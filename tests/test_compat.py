"""The Python 3.10 shims behave as 3.11's originals do where speechd relies on them."""

from __future__ import annotations

import msgspec

from speechd._compat import StrEnum


class _Colour(StrEnum):
    RED = "red"


def test_str_enum_members_are_their_values() -> None:
    assert _Colour.RED == "red"
    assert str(_Colour.RED) == "red"
    assert f"{_Colour.RED}" == "red" and f"{_Colour.RED:>5}" == "  red"
    assert msgspec.json.encode(_Colour.RED) == b'"red"'
    assert msgspec.json.decode(b'"red"', type=_Colour) is _Colour.RED
