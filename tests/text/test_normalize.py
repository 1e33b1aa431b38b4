"""Text normalisation: what users paste, made speakable (what misaki already reads is left)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from speechd.text._slices import normalize_text


@pytest.mark.parametrize(
    ("pasted", "spoken"),
    [
        ("Meet at 3:30pm.", "Meet at 3 30 PM."),
        ("at 9:05 a.m. Then 15:00", "at 9 oh 5 AM. Then 15 hundred"),
        ("Open at 7 pm and 8:00 AM", "Open at 7 PM and 8 AM"),
        ("Due 2024-01-15, or 12/25/2024.", "Due January 15th 2024, or December 25th 2024."),
        ("Call 555-123-4567 now", "Call 5 5 5, 1 2 3, 4 5 6 7 now"),
        ("Mail bob.smith@example.com!", "Mail bob dot smith at example dot com!"),
        (
            "See https://www.example.com/docs/get-started?x=1, then example.org.",
            "See example dot com slash docs slash get started, then example dot org.",
        ),
        ("It was -5 and \u22123 out, pages 10-20",
         "It was minus 5 and minus 3 out, pages 10 to 20"),
        ("A 5km run, 2 kg, 1 GB and 20°C", "A 5 kilometers run, 2 kilograms, 1 gigabyte and "
         "20 degrees Celsius"),
        ("Add 1/2 cup, ~5 min", "Add one half cup, about 5 min"),
        ("Prof. Lee and Gen. Grant", "Professor Lee and General Grant"),
        ("on Jan. 5 at Acme Inc. Then", "on January 5 at Acme Incorporated. Then"),
        ("It is approx. ten w/ cash", "It is approximately ten with cash"),
        ("Wow!!! Really??? Yes....", "Wow! Really? Yes..."),
        # misaki reads these itself: left alone
        ("I paid $5.50 for 3 apples, 12% off, on the 1st.", None),
        ("Dr. Smith vs. Mr. Jones, e.g. today.", None),
    ],
)  # fmt: skip
def test_english_normalisation(pasted: str, spoken: str | None) -> None:
    assert normalize_text(pasted) == (pasted if spoken is None else spoken)


def test_british_dates_read_day_first() -> None:
    assert normalize_text("on 05/04/2024", "b") == "on April 5th 2024"
    assert normalize_text("on 05/04/2024", "a") == "on May 4th 2024"
    assert normalize_text("a 5 km walk", "b") == "a 5 kilometres walk"


def test_markdown_is_stripped_and_blocks_become_sentences() -> None:
    pasted = (
        "# Release notes\n\n"
        "Some **bold**, _italic_ and `code` with [a link](https://x.y) ![logo](l.png).\n\n"
        "- first item\n"
        "* second item\n\n"
        "1. step one\n"
        "2. step two\n\n"
        "| name | value |\n|---|:---:|\n| a | 1 |\n\n"
        "> quoted\n\n"
        "---\n"
        "```python\nprint('hi')\n```\n"
        "<b>bold</b> &amp; done"
    )
    assert normalize_text(pasted).split("\n") == [
        "Release notes.",
        "Some bold, italic and code with a link logo.",
        "first item.",
        "second item.",
        "1. step one.",
        "2. step two.",
        "name, value.",
        "a, 1.",
        "quoted.",
        "print('hi').",
        "bold & done",
    ]


def test_soft_wrapped_lines_join_and_short_lines_stay_apart() -> None:
    pasted = (
        "This paragraph was wrapped by an email client at a fixed width\n"
        "so its sentence continues here.\n"
        "A short line\n"
        "Another"
    )
    assert normalize_text(pasted) == (
        "This paragraph was wrapped by an email client at a fixed width so its sentence "
        "continues here.\nA short line.\nAnother"
    )


def test_emoji_control_and_odd_whitespace_are_removed() -> None:
    assert normalize_text("Hello 😀 world 🎉!  👍🏽") == "Hello world!"
    assert normalize_text("a\x00b\u200bc\u00a0d\te\u202e\r\nf") == "abc d e.\nf"
    assert normalize_text("🇫🇷 😀 ✨") == ""
    assert normalize_text("   \n\n  ") == ""


def test_pronunciation_markup_survives_for_english() -> None:
    marked = "Say [Kokoro](/k\u02c8Ok\u0259\u0279O/) twice"
    assert normalize_text(marked) == marked


def test_other_languages_get_only_the_language_neutral_steps() -> None:
    pasted = "Voir https://www.exemple.fr/page à 3:30 😀, **merci**"
    assert normalize_text(pasted, "f") == "Voir exemple.fr à 3:30, merci"


@given(st.text(max_size=300))
def test_output_is_clean_for_any_input(text: str) -> None:
    out = normalize_text(text)
    assert out == out.strip()
    assert "  " not in out and "\n\n" not in out and "\t" not in out
    assert all(c == "\n" or c.isprintable() for c in out)
    assert normalize_text(out) == normalize_text(normalize_text(out))
