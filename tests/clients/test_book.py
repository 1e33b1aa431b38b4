"""`speechd-client book`, run as a process against the live server (see conftest): it lists a
book's chapters, makes the chosen ones and writes the audiobook, the same file the server
serves; run again, it finds the same book."""

from __future__ import annotations

from pathlib import Path

import httpx

from harness.servers import LiveServer

from ._support import run_cli
from .conftest import KEY

BOOK = "# The First\n\nIt began in a boat.\n\n# The Second\n\nIt ended on a shore.\n"


def test_book_lists_its_chapters(server: LiveServer, tmp_path: Path) -> None:
    source = tmp_path / "tale.md"
    source.write_text(BOOK)
    run = run_cli("book", str(source), "--list", "--chapters", "2", url=server.url, key=KEY)
    assert run.code == 0, run.stderr
    lines = run.stdout.decode().splitlines()
    assert lines[0].startswith("1\t") and lines[0].endswith("The First  (not chosen)")
    assert lines[1].startswith("2\t") and lines[1].endswith("\tThe Second")


def test_book_reads_a_chapter_in_its_own_voice(server: LiveServer, tmp_path: Path) -> None:
    source = tmp_path / "tale.md"
    source.write_text(BOOK)
    run = run_cli(
        "book", str(source), "--list", "--voice", "af_heart",
        "--chapter-voices", "2=am_adam", "--chapter-speeds", "2=1.5",
        url=server.url, key=KEY,
    )  # fmt: skip
    assert run.code == 0, run.stderr
    lines = run.stdout.decode().splitlines()
    assert lines[0].split("\t")[2] == "af_heart x1"
    assert lines[1].split("\t")[2] == "am_adam x1.5"
    bad = run_cli(
        "book", str(source), "--list", "--chapter-voices", "3=am_adam", url=server.url, key=KEY
    )
    assert bad.code != 0 and "no chapter 3" in bad.stderr


def test_book_writes_the_audiobook_and_a_second_run_finds_it(
    server: LiveServer, tmp_path: Path
) -> None:
    source = tmp_path / "tale.md"
    source.write_text(BOOK)
    out = tmp_path / "tale.m4b"
    run = run_cli("book", str(source), "-o", str(out), url=server.url, key=KEY)
    assert (run.code, run.stderr) == (0, ""), run.stderr
    made = httpx.post(
        server.v1 + "/books",
        content=BOOK.encode(),
        headers={"authorization": f"Bearer {KEY}", "content-type": "text/markdown"},
        params={"format": "m4b"},
        timeout=60,
    )
    assert made.status_code == 200  # the same book
    served = httpx.get(f"{server.v1}/books/{made.json()['id']}/audio.m4b", timeout=60)
    assert out.read_bytes() == served.content
    again = run_cli("book", str(source), "-o", str(tmp_path / "again.m4b"), url=server.url, key=KEY)
    assert again.code == 0 and (tmp_path / "again.m4b").read_bytes() == served.content


def test_book_refuses_what_it_cannot_read(tmp_path: Path) -> None:
    source = tmp_path / "tale.pdf"
    source.write_bytes(b"%PDF")
    run = run_cli("book", str(source), "-o", str(tmp_path / "x.m4b"), url=None)
    assert run.code == 2 and ".epub, .md or .txt" in run.stderr
