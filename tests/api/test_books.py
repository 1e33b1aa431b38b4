"""Books through HTTP, on the real worker with the engine test double: an EPUB 3 (as the body)
and an EPUB 2 (as a form) become chapters with their titles in order, each made as an ordinary
cast whose audio the cast routes serve; the same upload is the same book; chapters can be
chosen, more chosen later; a book can be cancelled; a chapter opened goes to its audio; and
what cannot be a book is refused in OpenAI's error shape before any work."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import mutagen
import pytest
from litestar.testing import AsyncTestClient

from harness.workers import expected
from tests.books._epubs import epub2, epub3

EPUB = {"content-type": "application/epub+zip"}
MARKDOWN = "# One\n\nThe first part.\n\n# Two\n\nThe second part.\n"


async def until_done(client: AsyncTestClient, book: str, within: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + within
    while True:
        status = (await client.get(f"/v1/books/{book}")).json()
        if status["state"] == "done":
            return status
        assert status["state"] in ("queued", "generating"), status
        assert time.monotonic() < deadline, status
        await asyncio.sleep(0.05)


def error_of(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error


async def test_an_epub3_body_becomes_its_chapters_made_as_casts(client: AsyncTestClient) -> None:
    made = await client.post("/v1/books?voice=af_heart&format=mp3", content=epub3(), headers=EPUB)
    assert made.status_code == 201, made.text
    book = made.json()
    assert made.headers["location"].endswith(f"/v1/books/{book['id']}")
    assert [c["title"] for c in book["chapters"]] == [
        "Chapter One: The Keeper",
        "Chapter Two",
        "Chapter Three",
    ]
    assert [c["number"] for c in book["chapters"]] == [1, 2, 3]
    assert all(c["chosen"] for c in book["chapters"])
    assert book["has_cover"] and book["format"] == "mp3"
    done = await until_done(client, book["id"])
    assert done["progress"] == 1.0 and done["eta_s"] is None
    last = done["chapters"][2]
    audio = await client.get(f"/v1/casts/{last['cast']}/audio")
    assert audio.status_code == 200
    assert audio.content == expected(last["cast"], "Chapter Three\n\nMorning, at last.")
    again = await client.post("/v1/books?voice=af_heart&format=mp3", content=epub3(), headers=EPUB)
    assert again.status_code == 200 and again.json()["id"] == book["id"]


async def test_an_epub2_form_becomes_its_chapters(client: AsyncTestClient) -> None:
    made = await client.post(
        "/v1/books",
        files={"file": ("house.epub", epub2(), "application/octet-stream")},
        data={"format": "m4b", "speed": "1.0"},
    )
    assert made.status_code == 201, made.text
    book = made.json()
    assert [c["title"] for c in book["chapters"]] == [
        "The Old House",
        "I. Arrival",
        "II. Departure",
    ]
    assert (book["title"], book["author"], book["language"]) == ("The Old House", "Mary Wren", "en")
    await until_done(client, book["id"])


async def test_chapters_are_chosen_and_more_chosen_later(client: AsyncTestClient) -> None:
    headers = {"content-type": "text/markdown"}
    first = await client.post("/v1/books?chapters=2", content=MARKDOWN, headers=headers)
    assert first.status_code == 201, first.text
    book = await until_done(client, first.json()["id"])
    assert [(c["title"], c["chosen"], c["state"]) for c in book["chapters"]] == [
        ("One", False, "not_made"),
        ("Two", True, "done"),
    ]
    more = await client.post("/v1/books?chapters=1-2", content=MARKDOWN, headers=headers)
    assert more.status_code == 200 and more.json()["id"] == book["id"]
    book = await until_done(client, book["id"])
    assert [c["state"] for c in book["chapters"]] == ["done", "done"]
    other = await client.post("/v1/books?chapters=1&speed=1.5", content=MARKDOWN, headers=headers)
    assert other.json()["id"] != book["id"]  # what changes the audio is another book


async def test_a_chapter_opened_goes_to_its_audio(client: AsyncTestClient) -> None:
    made = await client.post(
        "/v1/books", content=MARKDOWN, headers={"content-type": "text/markdown"}
    )
    book = made.json()
    opened = await client.get(f"/v1/books/{book['id']}/chapters/2", follow_redirects=False)
    assert opened.status_code == 303
    assert opened.headers["location"].endswith(f"/v1/casts/{book['chapters'][1]['cast']}/audio")
    player = await client.get(
        f"/v1/books/{book['id']}/chapters/1?to=player", follow_redirects=False
    )
    assert player.headers["location"].endswith(f"/c/{book['chapters'][0]['cast']}")
    assert error_of(await client.get(f"/v1/books/{book['id']}/chapters/3"), 404)["param"]
    await until_done(client, book["id"])


async def test_a_cancelled_book_stops_and_is_made_again_when_posted_again(
    client: AsyncTestClient,
) -> None:
    text = "\n\n".join(f"Chapter {n}\n\n" + "Words go on and on. " * 40 for n in range(1, 6))
    headers = {"content-type": "text/plain"}
    made = (await client.post("/v1/books", content=text, headers=headers)).json()
    assert len(made["chapters"]) == 5
    cancelled = await client.post(f"/v1/books/{made['id']}/cancel")
    assert cancelled.status_code == 200
    assert cancelled.json()["state"] in ("cancelled", "done")
    again = await client.post("/v1/books", content=text, headers=headers)
    assert again.status_code == 200
    await until_done(client, made["id"])


async def test_a_chapter_is_read_in_its_own_voice_and_speed(client: AsyncTestClient) -> None:
    headers = {"content-type": "text/markdown"}
    query = "voice=af_heart&chapter_voices=2=am_adam&chapter_speeds=2=1.25"
    made = await client.post(f"/v1/books?{query}", content=MARKDOWN, headers=headers)
    assert made.status_code == 201, made.text
    book = await until_done(client, made.json()["id"])
    assert [(c["voice"], c["speed"]) for c in book["chapters"]] == [
        ("af_heart", 1.0),
        ("am_adam", 1.25),
    ]
    second = (await client.get(f"/v1/casts/{book['chapters'][1]['cast']}")).json()
    assert (second["voice"], second["speed"]) == ("am_adam", 1.25)
    plain = (
        await client.post("/v1/books?voice=af_heart", content=MARKDOWN, headers=headers)
    ).json()
    assert plain["id"] != book["id"]  # another chapter's voice is another book
    assert plain["chapters"][0]["cast"] == book["chapters"][0]["cast"]  # the same chapter cast
    assert plain["chapters"][1]["cast"] != book["chapters"][1]["cast"]
    again = await client.post(f"/v1/books?{query}", content=MARKDOWN, headers=headers)
    assert again.status_code == 200 and again.json()["id"] == book["id"]
    form = await client.post(
        "/v1/books",
        files={"file": ("b.md", MARKDOWN.encode(), "text/markdown")},
        data={"voice": "af_heart", "chapter_voices": "2=am_adam", "chapter_speeds": "2=1.25"},
    )
    assert form.status_code == 200 and form.json()["id"] == book["id"]


@pytest.mark.parametrize(
    ("query", "param"),
    [
        ("chapter_voices=3=am_adam", "chapter_voices, chapter_speeds"),
        ("chapter_voices=2=nobody", "chapter_voices"),
        ("chapter_voices=2", "chapter_voices"),
        ("chapter_voices==am_adam", "chapter_voices"),
        ("chapter_voices=x=am_adam", "chapter_voices"),
        ("chapter_voices=1-99999=am_adam", "chapter_voices"),
        ("chapter_voices=" + "1-9999=am_adam," * 3, "chapter_voices"),
        ("chapter_voices=" + "1=am_adam," * 1000, "chapter_voices"),
        ("chapter_speeds=1=9", "chapter_speeds"),
        ("chapter_speeds=1=nan", "chapter_speeds"),
        ("chapter_speeds=1=fast", "chapter_speeds"),
    ],
)
async def test_a_bad_chapter_override_is_refused_before_any_work(
    client: AsyncTestClient, query: str, param: str
) -> None:
    made = await client.post(
        f"/v1/books?{query}", content=MARKDOWN, headers={"content-type": "text/markdown"}
    )
    error = error_of(made, 400)
    assert error["param"] == param, error
    assert len(error["message"]) < 300


async def test_what_is_not_a_book_is_refused(client: AsyncTestClient) -> None:
    error = error_of(
        await client.post("/v1/books", content=b"{}", headers={"content-type": "application/json"}),
        415,
    )
    assert "epub" in error["message"]
    error = error_of(await client.post("/v1/books", content=b"not a zip", headers=EPUB), 400)
    assert error["code"] == "bad_book"
    error = error_of(
        await client.post(
            "/v1/books?format=ogg", content=MARKDOWN, headers={"content-type": "text/markdown"}
        ),
        400,
    )
    assert error["param"] == "format"
    error = error_of(
        await client.post(
            "/v1/books?chapters=9", content=MARKDOWN, headers={"content-type": "text/markdown"}
        ),
        400,
    )
    assert error["param"] == "chapters"
    error = error_of(
        await client.post("/v1/books", files={"notfile": ("a.md", b"# x\n\ny", "text/markdown")}),
        400,
    )
    assert error["param"] == "file"
    assert error_of(await client.get("/v1/books/" + "A" * 22), 404)["code"] == "book_not_found"
    assert error_of(await client.get("/v1/books/nope"), 404)["code"] == "book_not_found"


FFPROBE = shutil.which("ffprobe")


def probe(data: bytes, suffix: str) -> dict[str, Any]:
    assert FFPROBE is not None
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"book.{suffix}"
        path.write_bytes(data)
        done = subprocess.run(
            [FFPROBE, "-v", "error", "-show_chapters", "-show_format", "-of", "json", str(path)],
            capture_output=True, check=True, timeout=60,
        )  # fmt: skip
        tags = mutagen.File(path)
    assert done.stderr == b"", done.stderr
    found: dict[str, Any] = json.loads(done.stdout)
    found["mutagen"] = tags
    return found


@pytest.mark.skipif(FFPROBE is None, reason="needs ffprobe (scripts/test.sh installs it)")
@pytest.mark.parametrize("fmt", ["m4b", "mp3"])
async def test_the_book_file_has_a_mark_per_chapter_at_its_length(
    client: AsyncTestClient, fmt: str
) -> None:
    """The whole book, from the chapters' casts: ffprobe finds a chapter per chapter, each as
    long as its cast's audio within 50 ms, and the tags read back in ffprobe and mutagen."""
    made = (await client.post(f"/v1/books?format={fmt}", content=epub3(), headers=EPUB)).json()
    early = await client.get(f"/v1/books/{made['id']}/audio.{fmt}")
    assert early.status_code in (200, 409)  # 409 (book_not_ready) until every chapter is done
    if early.status_code == 409:
        assert error_of(early, 409)["code"] == "book_not_ready"
    book = await until_done(client, made["id"])
    other = "mp3" if fmt == "m4b" else "m4b"
    assert error_of(await client.get(f"/v1/books/{made['id']}/audio.{other}"), 404)
    for _ in range(2):  # the second time, from the frame tables the first one kept
        got = await client.get(f"/v1/books/{made['id']}/audio.{fmt}")
        assert got.status_code == 200, got.text
        assert int(got.headers["content-length"]) == len(got.content)
        found = probe(got.content, fmt)
        titles = [c["tags"]["title"] for c in found["chapters"]]
        assert titles == [c["title"] for c in book["chapters"]]
        for mark, chapter in zip(found["chapters"], book["chapters"], strict=True):
            length = float(mark["end_time"]) - float(mark["start_time"])
            # A cast starts with 50 ms of silence (the engine's lead), so an m4b leaves out a
            # chapter's priming frame; the test double's tones start loud, so the mark before
            # one keeps it: 1024 samples more (tests/audio/test_audiobook.py checks both).
            slack = 0.050 + (
                1024 / 24_000 if fmt == "m4b" and mark is not found["chapters"][-1] else 0
            )
            assert abs(length - chapter["audio_ms"] / 1000) < slack, (mark, chapter)
        assert found["format"]["tags"]["title"] == book["title"]
        tags = found["mutagen"]
        if fmt == "m4b":
            assert tags.tags["\xa9nam"] == [book["title"]]
            assert tags.tags["covr"]  # the EPUB's cover
            assert [c.title for c in tags.chapters] == titles
        else:
            assert str(tags.tags["TIT2"]) == book["title"]
            assert len(tags.tags.getall("CHAP")) == len(titles)


@pytest.mark.parametrize("fmt", ["m4b", "mp3"])
async def test_the_book_file_serves_ranges_as_a_player_seeking_in_it_asks(
    client: AsyncTestClient, fmt: str
) -> None:
    """Every range of the book's file is the same bytes as the whole file's slice: in the
    head, across chapters, inside one, the last bytes; a stale If-Range gets the whole file,
    a matching If-None-Match a 304, a range past the end a 416 in OpenAI's shape."""
    made = (await client.post(f"/v1/books?format={fmt}", content=epub3(), headers=EPUB)).json()
    await until_done(client, made["id"])
    url = f"/v1/books/{made['id']}/audio.{fmt}"
    whole = await client.get(url)
    assert whole.status_code == 200 and whole.headers["accept-ranges"] == "bytes"
    data, etag, size = whole.content, whole.headers["etag"], len(whole.content)
    assert size > 4000, size
    spans = [(0, 0), (0, 99), (10, size // 3), (size // 3, 2 * size // 3)]
    spans += [(size // 2, size // 2 + 7), (size - 1, size - 1), (500, size - 1)]
    for start, stop in spans:
        part = await client.get(url, headers={"range": f"bytes={start}-{stop}"})
        assert part.status_code == 206, (start, stop, part.text)
        assert part.headers["content-range"] == f"bytes {start}-{stop}/{size}"
        assert part.content == data[start : stop + 1], (start, stop)
    tail = await client.get(url, headers={"range": "bytes=-1000"})
    assert tail.status_code == 206 and tail.content == data[-1000:]
    rest = await client.get(url, headers={"range": f"bytes={size // 2}-", "if-range": etag})
    assert rest.status_code == 206 and rest.content == data[size // 2 :]
    stale = await client.get(url, headers={"range": "bytes=0-9", "if-range": '"b-stale"'})
    assert stale.status_code == 200 and stale.content == data
    same = await client.get(url, headers={"if-none-match": etag})
    assert same.status_code == 304 and same.content == b""
    past = await client.get(url, headers={"range": f"bytes={size}-"})
    assert error_of(past, 416)["code"] == "range_not_satisfiable"
    huge = await client.get(url, headers={"range": "bytes=0-" + "9" * 5000})
    assert huge.status_code == 200 and huge.content == data  # longer than any range: absent


async def test_the_book_page_lists_its_chapters_through_its_script(client: AsyncTestClient) -> None:
    made = (await client.post("/v1/books", content=epub3(), headers=EPUB)).json()
    page = await client.get(f"/b/{made['id']}")
    assert page.status_code == 200
    assert f'data-book-id="{made["id"]}"' in page.text and "book.js" in page.text
    assert "<title>" in page.text and made["title"] in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    script = await client.get("/static/book.js")
    assert script.status_code == 200 and "/v1/books/" in script.text
    missing = await client.get("/b/" + "A" * 22)
    assert missing.status_code == 404 and "No such book" in missing.text
    await until_done(client, made["id"])
