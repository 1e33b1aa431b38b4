"""bench_hostile's pauses section builds the largest pause document each door accepts: the
real check takes it, and one more break is refused; its speech alone, the baseline it is
measured against, is the same words without a break."""

from __future__ import annotations

import pytest

from loadtest._hostile_pauses import BREAK, largest_pause_document, without_breaks
from speechd.errors import InvalidRequest
from speechd.limits import MAX_CAST_CHARS, MAX_INPUT_CHARS
from speechd.text import MAX_PAUSE_S, check_input


@pytest.mark.parametrize("chars", [MAX_INPUT_CHARS, MAX_CAST_CHARS])
def test_the_largest_pause_document_is_taken_and_one_more_break_is_not(chars: int) -> None:
    document = largest_pause_document(chars, tag="t")
    assert len(document) <= chars
    check_input(document, lang="a", ssml=True)
    pause_s = document.count(BREAK) * 10
    assert pause_s > 1000 if chars == MAX_INPUT_CHARS else pause_s == MAX_PAUSE_S
    more = document.replace(BREAK, BREAK * 2, 1)
    if len(more) <= chars:
        with pytest.raises(InvalidRequest, match="breaks add up"):
            check_input(more, lang="a", ssml=True)
    assert largest_pause_document(chars, 30, tag="t").count(BREAK) == 3


def test_a_pause_documents_speech_alone_is_its_words_without_a_break() -> None:
    document = largest_pause_document(MAX_INPUT_CHARS, tag="t")
    twin = without_breaks(document)
    assert BREAK not in twin and twin != document
    assert twin.replace('name="speech-t"', 'name="t"') == document.replace(BREAK, "")
    check_input(twin, lang="a", ssml=True)
