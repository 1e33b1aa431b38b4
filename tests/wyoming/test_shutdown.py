"""The Wyoming server stopping, from the client's side: it takes no new request, an idle
connection is closed at once, a reply under way is finished (a streamed synthesis to its
`synthesize-stop`), and one that cannot finish within the grace ends with an `error` and
its `audio-stop` before the socket closes, never with a silently cut connection."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from wyoming.client import AsyncUnixClient
from wyoming.info import Describe, Info
from wyoming.ping import Ping
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop

from speechd.durable import Store
from speechd.wyoming._bounds import CLOSE_S
from tests.live._support import playable
from tests.support.engines import CostEngine

from ._support import READ_S, STOPPED, Heard, hear, served

# Several sentences, several chunks: the reply is still going when the server stops.
TEXT = (
    "The lighthouse keeper climbed the stairs at dusk. He wound the clock and lit the lamp. "
    "Ships passed far out on the water, and none of them came near the rocks that night. "
    "At dawn he wrote one line in the log and went to sleep."
)


async def _closed(client: AsyncUnixClient) -> bool:
    """Whether the server closed the connection (the next read finds its end)."""
    return await asyncio.wait_for(client.read_event(), READ_S) is None


async def _to_the_end(client: AsyncUnixClient) -> Heard:
    """The events a client reads until the server closes the connection."""
    heard = Heard()
    while (event := await asyncio.wait_for(client.read_event(), READ_S)) is not None:
        heard.events.append((time.monotonic(), event))
    return heard


async def test_a_reply_under_way_is_finished_and_an_idle_connection_closed(
    store: Store, tmp_path: Path
) -> None:
    # Half a second of synthesis for the whole text: under way when the stop comes, done
    # long before the grace (`CLOSE_S`, 5 s) is over.
    engine = CostEngine(audio_per_char=0.01, rtf=0.2)
    async with served(store, tmp_path, engine=engine, start="now") as door:
        async with door.client() as idle, door.client() as speaking:
            await idle.write_event(Describe().event())
            info = await asyncio.wait_for(idle.read_event(), READ_S)
            assert info is not None and Info.is_type(info.type)
            await speaking.write_event(Synthesize(text=TEXT).event())
            first = await hear(speaking, until="audio-start")
            assert first.kinds == ["audio-start"]
            cast_id = first.events[0][1].data["cast_id"]
            began = time.monotonic()
            stopping = asyncio.ensure_future(door.door.close())
            # The idle connection is closed at once, with nothing said.
            assert await _closed(idle)
            assert time.monotonic() - began < CLOSE_S  # at once, not at the grace's end
            rest = await hear(speaking)
            assert rest.kinds[-1] == "audio-stop" and "error" not in rest.kinds
            assert await _closed(speaking)
            await asyncio.wait_for(stopping, READ_S)
        records = await playable(store, cast_id)
        assert rest.audio == b"".join(r.body for r in records)[: len(rest.audio)]
        assert len(rest.audio) + sum(
            len(e.payload or b"") for e in first.of("audio-chunk")
        ) == sum(len(r.body) for r in records)
        # No new connection is taken once it stopped.
        try:
            async with AsyncUnixClient(str(door.path)) as late:
                await late.write_event(Describe().event())
                assert await _closed(late)
        except OSError:
            pass  # refused outright: as good


async def test_a_streamed_synthesis_is_let_finish_its_text(store: Store, tmp_path: Path) -> None:
    engine = CostEngine(audio_per_char=0.01, rtf=0.05)
    async with (
        served(store, tmp_path, engine=engine, start="now") as door,
        door.client() as client,
    ):
        await client.write_event(SynthesizeStart().event())
        await client.write_event(SynthesizeChunk(text="The first half of a reply, ").event())
        await client.write_event(Ping(text="taken").event())  # answered in turn: all read
        heard = await hear(client, until="pong")
        stopping = asyncio.ensure_future(door.door.close())
        await asyncio.sleep(0.2)  # the server is stopping: the stream's events still count
        assert not stopping.done()
        await client.write_event(SynthesizeChunk(text="and its second half.").event())
        await client.write_event(SynthesizeStop().event())
        heard.events += (await hear(client, until=STOPPED)).events
        kinds = [k for k in heard.kinds if k != "pong"]
        assert kinds[0] == "audio-start" and kinds[-2:] == ["audio-stop", STOPPED]
        assert "error" not in heard.kinds
        assert await _closed(client)
        await asyncio.wait_for(stopping, READ_S)


async def test_a_reply_past_the_grace_ends_with_an_error_and_its_audio_stop(
    store: Store, tmp_path: Path
) -> None:
    # Slower than real time: the text takes several seconds to make, the grace is 0.3 s.
    engine = CostEngine(audio_per_char=0.01, rtf=2.0)
    async with (
        served(store, tmp_path, engine=engine, close_s=0.3, start="now") as door,
        door.client() as client,
    ):
        await client.write_event(Synthesize(text=TEXT).event())
        first = await hear(client, until="audio-start")
        assert first.kinds == ["audio-start"]
        stopping = asyncio.ensure_future(door.door.close())
        rest = await _to_the_end(client)
        assert rest.kinds[-2:] == ["error", "audio-stop"], rest.kinds
        (error,) = rest.errors
        assert "shutting down" in error.text and error.code == "no_worker_ready"
        await asyncio.wait_for(stopping, READ_S)
