"""The worker speaks a live cast's text as it arrives: cut at clause ends, an unfinished
clause kept until more comes or the input idles for the flush time, the input closed by the
worker when it idles past its timeout, and a kill -9 mid-input resumed from what arrived."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from litestar.testing import AsyncTestClient

from harness.engines import CostEngine
from harness.workers import worker_process
from speechd.api.app import create_app
from speechd.casts import schema
from speechd.casts._records import audio_chunk
from speechd.config import Settings
from speechd.durable import EmbeddedStore, Store
from tests.support.live import SimulatedLlm, decoded_seconds, playable, serve, wait_done


@pytest.fixture
async def store(tmp_path: Path) -> Any:
    opened = await EmbeddedStore.open(tmp_path / "data")
    yield opened
    await opened.close()


async def _live(http: httpx.AsyncClient | AsyncTestClient, **fields: Any) -> dict[str, Any]:
    made = await http.post("/v1/casts", json={"live": True, "voice": "af_heart", **fields})
    assert made.status_code == 201, made.text
    return made.json()


async def _append(http: Any, cast: dict[str, Any], **body: Any) -> dict[str, Any]:
    auth = {"authorization": f"Bearer {cast['input_token']}"}
    sent = await http.post(cast["input_url"], json=body, headers=auth)
    assert sent.status_code == 200, sent.text
    return sent.json()


async def _captions_when(
    store: Store, cast_id: str, count: int, within_s: float = 30.0
) -> list[str]:
    """The captions spoken so far, once there are `count` (a failsafe, not a timing)."""
    deadline = time.monotonic() + within_s
    while True:
        found = [
            audio_chunk(r).text
            for r in (await store.read(schema.cast_stream(cast_id), 0)).records
            if schema.event_of(r) == schema.Event.AUDIO
        ]
        if len(found) >= count:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"only {found} spoken")
        await asyncio.sleep(0.02)


async def test_an_unfinished_clause_waits_for_the_rest(store: Store) -> None:
    async with serve(store, flush_s=60.0) as live, httpx.AsyncClient(base_url=live.url) as http:
        cast = await _live(http, input="Hello there, my", response_format="pcm")
        assert await _captions_when(store, cast["id"], 1) == ["Hello there,"]
        await asyncio.sleep(0.3)  # nothing more comes: "my" waits for the rest of its clause
        assert await _captions_when(store, cast["id"], 1) == ["Hello there,"]
        # A clause ends where what follows shows it (`friend.com` would not end one).
        await _append(http, cast, text=" old friend. ", seq=1)
        assert await _captions_when(store, cast["id"], 2) == ["Hello there,", "my old friend."]
        await _append(http, cast, done=True)
        await wait_done(store, cast["id"])
        chunks = await playable(store, cast["id"])
        # The input closed after all of it was spoken: a record of no audio ends the file.
        assert [c.text for c in chunks] == ["Hello there,", "my old friend.", ""]
        assert chunks[-1].duration_ms == 0 and chunks[-1].planned == 3


async def test_an_idle_input_is_spoken_after_the_flush_time(store: Store) -> None:
    async with serve(store, flush_s=0.2) as live, httpx.AsyncClient(base_url=live.url) as http:
        cast = await _live(http, input="Hello there, my")
        # No more text comes: after the flush time what arrived is spoken, half clause too.
        assert await _captions_when(store, cast["id"], 2) == ["Hello there,", "my"]
        await _append(http, cast, text=" friend.", done=True)
        await wait_done(store, cast["id"])
        spoken = [c.text for c in await playable(store, cast["id"]) if c.text]
        assert " ".join(spoken).split() == ["Hello", "there,", "my", "friend."]


async def test_the_worker_closes_an_input_idle_past_its_timeout(store: Store) -> None:
    settings = Settings(data_dir="unused", live_idle_timeout=0.5)
    async with (
        serve(store, settings=settings) as live,
        httpx.AsyncClient(base_url=live.url) as http,
    ):
        cast = await _live(http, input="Nothing follows this.", response_format="mp3")
        records = await wait_done(store, cast["id"])  # nobody said done: the timeout did
        assert schema.event_of(records[-1]) == schema.Event.EOS
        batch = await store.read(schema.input_stream(cast["id"]), 0)
        assert schema.input_event(batch.records[-1]) == schema.InputEnd("idle", 1, 21)
        late = await http.post(
            cast["input_url"],
            json={"text": " Too late."},
            headers={"authorization": f"Bearer {cast['input_token']}"},
        )
        assert late.status_code == 409 and late.json()["error"]["code"] == "input_closed"
        audio = (await http.get(f"/v1/casts/{cast['id']}/audio")).content
        assert decoded_seconds("mp3", audio) > 0


async def test_a_live_cast_waiting_for_text_does_not_hold_up_others(store: Store) -> None:
    async with serve(store, flush_s=60.0) as live, httpx.AsyncClient(base_url=live.url) as http:
        cast = await _live(http, input="Waiting here, for")
        await _captions_when(store, cast["id"], 1)
        other = await http.post(
            "/v1/audio/speech", json={"input": "An ordinary request meanwhile.", "voice": "am_adam"}
        )
        assert other.status_code == 200 and other.content
        await _append(http, cast, text=" ever.", done=True)
        await wait_done(store, cast["id"])


class ListenerClock:
    """The worker's clock, moved on only by the test: a listener of the cast keeps all the
    audio it was given buffered until the clock moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# Chunks cost at most a tenth of a second here, so a live cast's next chunk waits for more
# text while its listener has more than two tenths of a second buffered.
_QUANTUM_S = 0.1
_AUDIO_PER_CHAR = 0.05  # "Hello there," is 0.6 s of audio


async def test_a_live_casts_next_chunk_waits_while_its_listener_is_well_ahead(
    store: Store,
) -> None:
    clock = ListenerClock()
    engine = CostEngine(audio_per_char=_AUDIO_PER_CHAR)
    async with (
        serve(store, engine=engine, flush_s=60.0, clock=clock, quantum_s=_QUANTUM_S) as live,
        httpx.AsyncClient(base_url=live.url) as http,
    ):
        cast = await _live(http, input="Hello there, ", response_format="pcm")
        assert await _captions_when(store, cast["id"], 1) == ["Hello there,"]
        # A whole clause comes, but the listener has 0.6 s buffered: it waits for more text,
        # to be spoken in one longer chunk rather than many short ones.
        await _append(http, cast, text="my old friend. ", seq=1)
        await asyncio.sleep(0.3)
        assert await _captions_when(store, cast["id"], 1) == ["Hello there,"]
        # The listener nears the end of its audio: what arrived is spoken, without more text.
        clock.now += 0.5
        assert await _captions_when(store, cast["id"], 2) == ["Hello there,", "my old friend."]
        await _append(http, cast, done=True)
        await wait_done(store, cast["id"])
        chunks = await playable(store, cast["id"])
        assert [c.text for c in chunks] == ["Hello there,", "my old friend.", ""]


async def test_a_chunks_worth_of_waiting_text_is_spoken_whatever_the_lead(store: Store) -> None:
    clock = ListenerClock()
    engine = CostEngine(audio_per_char=_AUDIO_PER_CHAR)
    rest = "and then " + "some more words, " * 16
    assert len(rest) >= 250  # about the most one chunk holds (`FILL_CHARS`)
    async with (
        serve(store, engine=engine, flush_s=60.0, clock=clock, quantum_s=_QUANTUM_S) as live,
        httpx.AsyncClient(base_url=live.url) as http,
    ):
        cast = await _live(http, input="Hello there, ", response_format="wav")
        await _captions_when(store, cast["id"], 1)
        await _append(http, cast, text=rest, seq=1)
        # The clock never moves (the listener stays well ahead), yet the text is spoken.
        spoken = await _captions_when(store, cast["id"], 2)
        assert spoken[1].split() == rest.split()[: len(spoken[1].split())]
        await _append(http, cast, done=True)
        await wait_done(store, cast["id"])
        chunks = await playable(store, cast["id"])
        said = " ".join(c.text for c in chunks if c.text)
        assert said.split() == ("Hello there, " + rest).split()  # nothing twice, none lost
        audio = (await http.get(f"/v1/casts/{cast['id']}/audio")).content
        assert decoded_seconds("wav", audio) > 0


@pytest.mark.slow
def test_kill_9_mid_input_resumes_from_what_arrived(tmp_path: Path) -> None:
    data = tmp_path / "data"
    tokens = SimulatedLlm(rate=50.0).tokens
    half = len(tokens) // 2
    with worker_process(data, rtf=0.2, audio_per_char=0.01) as supervisor:

        async def body() -> None:
            app = create_app(Settings(data_dir=str(data)))
            async with (
                AsyncTestClient(app, base_url="http://testserver.local") as http,
                await EmbeddedStore.open(data) as store,
            ):
                cast = await _live(http, response_format="mp3")
                for seq, token in enumerate(tokens[:half]):
                    await _append(http, cast, text=token, seq=seq)
                await _captions_when(store, cast["id"], 2)
                pid = supervisor.pid
                assert pid is not None
                os.kill(pid, signal.SIGKILL)
                # The input goes on while the worker is dead and while it comes back.
                for seq, token in enumerate(tokens[half:], start=half):
                    await _append(http, cast, text=token, seq=seq)
                    await asyncio.sleep(0.01)
                await _append(http, cast, done=True, seq=len(tokens))
                records = await wait_done(store, cast["id"], within_s=120)
                chunks = await playable(store, cast["id"])
                starts = [
                    schema.decode(r.body, schema.Start)
                    for r in records
                    if schema.event_of(r) == schema.Event.START
                ]
                assert len(starts) >= 2 and starts[-1].keep >= 2  # it went on from them
                spoken = " ".join(c.text for c in chunks if c.text)
                assert spoken.split() == "".join(tokens).split()  # nothing twice, none lost
                assert [c.index for c in chunks] == list(range(len(chunks)))
                audio = (await http.get(f"/v1/casts/{cast['id']}/audio")).content
                assert audio == b"".join(c.body for c in chunks)
                assert decoded_seconds("mp3", audio) > 0

        asyncio.run(body())
        assert supervisor.exit_codes[:1] == [-signal.SIGKILL]
