"""The Wyoming door's events through the `wyoming` package's own client, against the real
worker on the cost-model engine: describe, synthesize (a cast), a streamed synthesis (a live
cast), and what is refused while the connection goes on."""

from __future__ import annotations

import asyncio
from pathlib import Path

from wyoming.audio import AudioStop
from wyoming.info import Describe, Info
from wyoming.ping import Ping
from wyoming.tts import (
    Synthesize,
    SynthesizeChunk,
    SynthesizeStart,
    SynthesizeStop,
    SynthesizeVoice,
)

from harness.engines import VOICES
from speechd import casts
from speechd.casts import schema
from speechd.durable import Store
from speechd.wyoming import PROGRAM
from tests.support.live import playable, wait_done

from ._support import STOPPED, Heard, hear, served

TEXT = "The owl flew over the barn at midnight, and nobody saw it land."


async def test_describe_lists_a_streaming_tts_program_with_every_voice_and_alias(
    store: Store, tmp_path: Path
) -> None:
    async with served(store, tmp_path) as door, door.client() as client:
        await client.write_event(Describe().event())
        event = await client.read_event()
    assert event is not None and Info.is_type(event.type)
    info = Info.from_event(event)
    assert [p.name for p in info.tts] == [PROGRAM]
    program = info.tts[0]
    assert program.supports_synthesize_streaming and program.installed
    names = {v.name: v for v in program.voices}
    assert set(VOICES) <= set(names)
    heart = names["af_heart"]
    assert heart.description == "Heart (American English, female)"
    assert heart.languages == ["en-US"] and names["bf_emma"].languages == ["en-GB"]
    assert heart.attribution.url.endswith("Kokoro-82M")
    # OpenAI's names are the deployment's aliases: each says what it speaks as.
    assert names["coral"].description == "coral: Heart (American English, female)"
    assert names["ash"].description.startswith("ash: Adam")


async def test_synthesize_is_the_same_cast_as_the_http_route_would_make(
    store: Store, tmp_path: Path
) -> None:
    async with served(store, tmp_path) as door, door.client() as client:
        await client.write_event(
            Synthesize(text=TEXT, voice=SynthesizeVoice(name="am_adam")).event()
        )
        heard = await hear(client)
        cast_id = heard.of("audio-start")[0].data["cast_id"]
        # The same request again is the same cast (content addressed), replayed whole.
        await client.write_event(
            Synthesize(text=TEXT, voice=SynthesizeVoice(name="am_adam")).event()
        )
        again = await hear(client)
    assert heard.kinds[0] == "audio-start" and heard.kinds[-1] == "audio-stop"
    start = heard.start
    assert (start.rate, start.width, start.channels) == (24_000, 2, 1)
    chunks = heard.of("audio-chunk")
    assert len(chunks) > 1  # cut into pieces as the records come
    assert all(len(c.payload or b"") <= 2048 for c in chunks)
    records = await playable(store, cast_id)
    assert heard.audio == b"".join(r.body for r in records)
    assert again.audio == heard.audio
    assert again.of("audio-start")[0].data["cast_id"] == cast_id
    secret = await casts.deployment_secret(store)
    assert cast_id == casts.cast_id(
        secret, model="kokoro", voice="am_adam", speed=1.0, format="pcm", text=TEXT
    )


async def test_a_refused_request_is_an_error_event_and_the_connection_goes_on(
    store: Store, tmp_path: Path
) -> None:
    async with served(store, tmp_path) as door, door.client() as client:
        await client.write_event(
            Synthesize(text=TEXT, voice=SynthesizeVoice(name="zz_nobody")).event()
        )
        unknown = await hear(client)
        await client.write_event(Synthesize(text="x" * 5000).event())
        too_long = await hear(client)
        await client.write_event(Synthesize(text="   ").event())
        empty = await hear(client)
        await client.write_event(Synthesize(text="<speak>Hi", text_format="ssml").event())
        ssml = await hear(client)
        await client.write_event(Synthesize(text=TEXT, text_format="markdown").event())
        markdown = await hear(client)
        await client.write_event(Synthesize(text=TEXT).event())
        fine = await hear(client)
    assert unknown.kinds == ["error"]
    assert unknown.errors[0].code == "voice_not_found"
    assert "zz_nobody" in unknown.errors[0].text and "af_heart" in unknown.errors[0].text
    assert too_long.errors[0].text == "The input is longer than 4096 characters."
    assert "empty" in empty.errors[0].text
    assert ssml.kinds == ["error"] and ssml.errors[0].code == "invalid_request_error"
    assert markdown.errors[0].text == "text_format is text or ssml, not 'markdown'."
    assert fine.kinds[0] == "audio-start" and fine.audio


async def test_a_voice_by_language_is_the_default_voice_or_one_that_speaks_it(
    store: Store, tmp_path: Path
) -> None:
    async with served(store, tmp_path) as door, door.client() as client:
        heard = {}
        for language in ("en", "en_GB", "fr"):
            await client.write_event(
                Synthesize(text=TEXT, voice=SynthesizeVoice(language=language)).event()
            )
            heard[language] = await hear(client)
    secret = await casts.deployment_secret(store)

    def cast_of(voice: str) -> str:
        return casts.cast_id(
            secret, model="kokoro", voice=voice, speed=1.0, format="pcm", text=TEXT
        )

    assert heard["en"].of("audio-start")[0].data["cast_id"] == cast_of("af_heart")
    assert heard["en_GB"].of("audio-start")[0].data["cast_id"] == cast_of("bf_emma")
    assert heard["fr"].errors[0].text == "No voice here speaks 'fr'."


async def test_a_streamed_synthesis_is_a_live_cast_speaking_before_its_stop(
    store: Store, tmp_path: Path
) -> None:
    words = TEXT.split(" ")
    async with served(store, tmp_path) as door, door.client() as client:
        await client.write_event(SynthesizeStart(voice=SynthesizeVoice(name="af_bella")).event())
        for n, word in enumerate(words):
            await client.write_event(SynthesizeChunk(text=(" " if n else "") + word).event())
        # Home Assistant sends the whole text too, for servers that cannot stream: ignored.
        first = await hear(client, until="audio-chunk")
        await client.write_event(Synthesize(text=TEXT).event())
        await client.write_event(SynthesizeStop().event())
        rest = await hear(client, until=STOPPED)
    kinds = first.kinds + rest.kinds
    assert kinds[0] == "audio-start" and kinds[-2:] == ["audio-stop", "synthesize-stopped"]
    assert kinds.count("audio-start") == 1 and kinds.count("audio-stop") == 1
    cast_id = first.of("audio-start")[0].data["cast_id"]
    records = await wait_done(store, cast_id)
    assert schema.event_of(records[-1]) == schema.Event.EOS
    audio = first.audio + rest.audio
    assert audio == b"".join(r.body for r in await playable(store, cast_id))
    spoken = " ".join(r.text for r in await playable(store, cast_id))
    assert spoken.split() == TEXT.split()  # once: the compatibility copy made nothing


async def test_stream_events_out_of_place_are_errors_and_the_connection_goes_on(
    store: Store, tmp_path: Path
) -> None:
    async with served(store, tmp_path) as door, door.client() as client:
        await client.write_event(SynthesizeChunk(text="Hello").event())
        chunk = await hear(client)
        await client.write_event(SynthesizeStop().event())
        stop = await hear(client)
        # A refused start: its chunks are dropped and its stop still answered.
        await client.write_event(SynthesizeStart(voice=SynthesizeVoice(name="nope")).event())
        refused = await hear(client)
        await client.write_event(SynthesizeChunk(text="Hello there.").event())
        await client.write_event(SynthesizeStop().event())
        stopped = await hear(client, until=STOPPED)
        await client.write_event(Ping(text="still here").event())
        pong = await asyncio.wait_for(client.read_event(), 30)
    assert "outside a stream" in chunk.errors[0].text
    assert "outside a stream" in stop.errors[0].text
    assert refused.errors[0].code == "voice_not_found"
    assert stopped.kinds == ["synthesize-stopped"]
    assert pong is not None and pong.type == "pong" and pong.data["text"] == "still here"


async def test_audio_start_links_the_cast_when_the_public_url_is_known(
    store: Store, tmp_path: Path
) -> None:
    async with (
        served(store, tmp_path, public_url="https://speech.example/") as door,
        door.client() as client,
    ):
        await client.write_event(Synthesize(text=TEXT).event())
        heard = await hear(client)
    data = heard.of("audio-start")[0].data
    assert data["cast_url"] == f"https://speech.example/c/{data['cast_id']}"
    assert heard.of(AudioStop().event().type)


async def test_describe_answers_from_the_store_while_no_worker_is_ready(
    store: Store, tmp_path: Path
) -> None:
    async with served(store, tmp_path, worker=False) as door, door.client() as client:
        await client.write_event(Describe().event())
        never = await hear(client)  # no worker was ever ready: nothing to list yet
    async with served(store, tmp_path) as door:
        # A worker was ready once (its process keeps its voices, as speechd worker does),
        # and stopped.
        ready = await door.door.service.workers()
        await casts.remember_voices(store, ready[0])
    async with served(store, tmp_path, worker=False) as door, door.client() as client:
        await client.write_event(Describe().event())
        event = await client.read_event()
    assert never.kinds == ["error"] and never.errors[0].code == "no_worker_ready"
    assert event is not None and Info.is_type(event.type)
    assert {v.name for v in Info.from_event(event).tts[0].voices} >= set(VOICES)


async def test_four_connections_at_once_each_hear_their_first_words_before_any_ends(
    store: Store, tmp_path: Path
) -> None:
    texts = [f"Caller number {n} asks a question that takes a while to answer." for n in range(4)]
    async with served(store, tmp_path, start="now") as door:

        async def one(text: str) -> Heard:
            async with door.client() as client:
                await client.write_event(Synthesize(text=text).event())
                return await hear(client)

        heard = await asyncio.gather(*(one(t) for t in texts))
    assert all(h.kinds[-1] == "audio-stop" and h.audio for h in heard)
    assert max(h.first("audio-chunk") for h in heard) < min(h.first("audio-stop") for h in heard)


async def test_text_format_ssml_reads_the_text_as_ssml_as_http_does(
    store: Store, tmp_path: Path
) -> None:
    document = "<speak>The owl <break time='300ms'/> flew over the barn.</speak>"
    async with served(store, tmp_path) as door, door.client() as client:
        await client.write_event(Synthesize(text=document, text_format="ssml").event())
        heard = await hear(client)
        # A streamed synthesis is a live cast: plain text only (SSML is checked whole).
        await client.write_event(SynthesizeStart(text_format="ssml").event())
        refused = await hear(client)
        await client.write_event(SynthesizeStop().event())
        stopped = await hear(client, until=STOPPED)
    secret = await casts.deployment_secret(store)
    ssml_cast = casts.cast_id(
        secret, model="kokoro", voice="af_heart", speed=1.0, format="pcm", text=document,
        input_format="ssml",
    )  # fmt: skip
    assert heard.of("audio-start")[0].data["cast_id"] == ssml_cast and heard.audio
    assert refused.kinds == ["error"] and "plain text" in refused.errors[0].text
    assert stopped.kinds == ["synthesize-stopped"]


async def test_a_document_of_breaks_is_refused_before_any_work(
    store: Store, tmp_path: Path
) -> None:
    # Wyoming has no key: 3,989 characters of ten-second breaks once made 35 minutes of
    # silence in one chunk here.
    document = "<speak>" + '<break time="10s"/>' * 209 + "Hi.</speak>"
    async with served(store, tmp_path) as door, door.client() as client:
        await client.write_event(Synthesize(text=document, text_format="ssml").event())
        refused = await hear(client)
        await client.write_event(Synthesize(text=TEXT).event())
        fine = await hear(client)
    assert refused.kinds == ["error"] and refused.errors[0].code == "invalid_request_error"
    assert "more than its text allows" in refused.errors[0].text
    assert await store.check_tail(schema.JOBS) == 1  # only the ordinary request's job
    assert fine.kinds[0] == "audio-start" and fine.audio
