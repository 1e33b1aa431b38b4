# ruff: noqa: RUF001  (IPA and Kokoro phonemes are the point)
"""The deployment lexicon: its file, its case rule, and what it changes in G2P's phonemes."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pytest

from speechd.engine import Engine
from speechd.text import ChunkPolicy, LexiconError, LexiconFile
from speechd.text._lexicon import SETTLE_S, SHRINK_SETTLE_S, Lexicon
from speechd.text._mapped import Mapped

ENTRIES = """
# a comment, then entries
Kokoro = /kˈOkəɹO/
nginx = engine x
US = /jˌuˈɛs/
New York = /nˈu jˈɔɹk/
Dr. = Doctor
"""


def apply(lexicon: Lexicon, text: str) -> tuple[str, list[tuple[str, str]]]:
    """The text rewritten, and each rewritten word with the input it points at."""
    out = lexicon.apply(Mapped.of(text))
    pairs = []
    for a, b in out.words():
        begin, end = out.source(a, b)
        pairs.append((out.text[a:b], text[begin:end]))
    return out.text, pairs


def test_entries_rewrite_words_by_the_case_rule() -> None:
    lexicon = Lexicon.parse(ENTRIES)
    text, pairs = apply(lexicon, "NGINX and Nginx, Kokoro. kokoro US us New York (Dr. No)")
    assert text == (
        "engine x and engine x, [Kokoro](/kˈOkəɹO/). kokoro [US](/jˌuˈɛs/) us "
        "[New York](/nˈu jˈɔɹk/) (Doctor No)"
    )
    # Lower case matches any case; a capital matches only as written.
    assert ("engine", "NGINX") in pairs and ("x,", "Nginx,") in pairs
    assert ("[New", "New York") in pairs and ("(Doctor", "(Dr.") in pairs


def test_a_bad_file_says_which_line() -> None:
    for text, says in [
        ("fine = ok\nno equals sign", "lexicon:2: write"),
        ("word = /ǂ/", r"cannot say 'ǂ' \(U\+01C2\)"),
        ("word = a/b", "plain words"),
        ("[x] = y", "without brackets"),
        (" ".join(["w"] * 9) + " = y", "at most 8 words"),
    ]:
        with pytest.raises(LexiconError, match=says):
            Lexicon.parse(text)


def phonemes(engine: Engine, text: str) -> str:
    return " ".join(c.phonemes for c in engine.plan(text, "af_heart", ChunkPolicy(rtf=0)))


def test_an_entry_changes_the_phonemes_g2p_gives(tiny_engine: Engine, tmp_path: Path) -> None:
    path = tmp_path / "lexicon.txt"
    path.write_text("Kokoro = /kˈOkOɹO/\nnginx = engine x\n", encoding="utf-8")
    before = phonemes(tiny_engine, "Run nginx with Kokoro.")
    tiny_engine.use_lexicon(str(path))
    try:
        after = phonemes(tiny_engine, "Run nginx with Kokoro.")
        assert "kˈOkOɹO" in after and "kˈOkOɹO" not in before
        assert phonemes(tiny_engine, "engine x") in after  # the respelling is read instead
        chunk = tiny_engine.plan("Hi Kokoro!", "af_heart", ChunkPolicy(rtf=0))[0]
        assert [(s.text, s.source) for s in chunk.words] == [("Hi", (0, 2)), ("Kokoro!", (3, 9))]
        assert tiny_engine.plan_version.startswith("lexicon:")
    finally:
        tiny_engine.use_lexicon(None)
    assert tiny_engine.plan_version == ""


def test_the_file_is_reloaded_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "lexicon.txt"
    path.write_text("a = b\n", encoding="utf-8")
    now = [0.0]
    lexicon = LexiconFile(str(path), check_s=1.0, clock=lambda: now[0])
    first = lexicon.current()
    assert apply(first, "a")[0] == "b"
    path.write_text("a = c\n", encoding="utf-8")
    os.utime(path, ns=(1, 1))
    assert lexicon.current() is first  # looked at most once a second
    now[0] = 1.5
    assert apply(lexicon.current(), "a")[0] == "c" and lexicon.current().digest != first.digest
    path.write_text("a = /ǂ/\n", encoding="utf-8")  # breaks: the entries in force stay
    os.utime(path, ns=(2, 2))
    now[0] = 3.0
    assert apply(lexicon.current(), "a")[0] == "c"
    path.unlink()
    now[0] = 5.0
    assert apply(lexicon.current(), "a")[0] == "c"
    with pytest.raises(OSError):
        LexiconFile(str(path))


TEN = "".join(f"word{n} = respelling {n}\n" for n in range(10))


def _written(path: Path, text: str, *, ago_s: float) -> None:
    """`path` rewritten in place with `text`, last modified `ago_s` seconds ago."""
    path.write_text(text, encoding="utf-8")
    at = time.time() - ago_s
    os.utime(path, (at, at))


def test_a_file_being_rewritten_in_place_is_not_read_half_written(tmp_path: Path) -> None:
    path = tmp_path / "lexicon.txt"
    _written(path, TEN, ago_s=3600)
    now = [0.0]
    lexicon = LexiconFile(str(path), check_s=1.0, clock=lambda: now[0])
    assert len(lexicon.current()) == 10
    # Truncated and written up to a line's end (it parses), this very moment.
    _written(path, "".join(TEN.splitlines(keepends=True)[:6]), ago_s=0)
    now[0] = 1.5
    assert len(lexicon.current()) == 10
    # Written whole, and kept still since: taken.
    _written(path, TEN + "word10 = respelling ten\n", ago_s=SETTLE_S + 1)
    now[0] = 3.0
    assert len(lexicon.current()) == 11
    # Stamped by a clock an hour ahead: taken once seen unchanged for as long.
    _written(path, TEN + "word11 = respelling eleven\n", ago_s=-3600)
    now[0] = 4.5
    assert len(lexicon.current()) == 11
    now[0] = 4.5 + SETTLE_S + 0.5
    assert len(lexicon.current()) == 11 and apply(lexicon.current(), "word11")[0] == (
        "respelling eleven"
    )


def test_an_empty_file_keeps_the_entries_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "lexicon.txt"
    _written(path, TEN, ago_s=3600)
    now = [0.0]
    lexicon = LexiconFile(str(path), check_s=1.0, clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="speechd.text"):
        _written(path, "", ago_s=SETTLE_S + 1)  # `> lexicon.txt`, say, and nothing after it
        for _ in range(3):
            now[0] += 1.5
            assert len(lexicon.current()) == 10
    said = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert said == [
        ("WARNING", f"lexicon {path} not reloaded: it is empty; keeping its 10 entries (write"
         " a comment line to clear it)"),
    ]  # fmt: skip


def test_a_sharply_shrunk_file_is_taken_once_it_has_kept_still(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "lexicon.txt"
    _written(path, TEN, ago_s=3600)
    now, wall = [0.0], [time.time()]
    lexicon = LexiconFile(str(path), check_s=1.0, clock=lambda: now[0], wall=lambda: wall[0])
    with caplog.at_level(logging.INFO, logger="speechd.text"):
        _written(path, "word0 = respelling 0\n", ago_s=0)
        written = path.stat().st_mtime
        for seconds in (SETTLE_S + 1, 10, SHRINK_SETTLE_S - 1):
            now[0] += 1.5
            wall[0] = written + seconds
            assert len(lexicon.current()) == 10
        # Kept still for a minute, a smaller file is what its writer meant.
        now[0] += 1.5
        wall[0] = written + SHRINK_SETTLE_S + 1
        assert len(lexicon.current()) == 1
    said = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert said == [
        ("WARNING", f"lexicon {path} not reloaded yet: it has 1 entries; keeping its 10 until"
         f" it keeps still for {SHRINK_SETTLE_S:g} s"),
        ("INFO", f"lexicon {path} reloaded: 1 entries"),
    ]  # fmt: skip
