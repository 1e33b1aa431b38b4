"""SSML pauses on the real worker, the real front end and the tiny Kokoro (its audio is noise,
its code path the real one): a long pause is written as ordinary chunks of at most one
quantum of silence each, never made at once, and silence teaches the device's costs nothing.
Seen from the store: the cast's records and the rtf each cast's `start` says it was planned
at."""

from __future__ import annotations

import itertools
import time

from speechd.audio import new_encoder
from speechd.casts import cast_id, deployment_secret, submit
from speechd.casts._records import audio_chunk
from speechd.casts.schema import Recipe, Start, cast_stream, decode, event_of
from speechd.durable import Store
from speechd.engine import SAMPLE_RATE, Engine
from speechd.text import ChunkPolicy
from speechd.text._chunks import SILENCE_CHUNK_MS
from speechd.worker import Worker, WorkerConfig

from ._helpers import records, running, wait_ended

SPEECH = (
    "<speak>The old lighthouse keeper climbed the stairs every evening. He lit the lamp, and"
    " wound the clockwork that turned it. Ships never saw his face, but they saw his light."
    "</speak>"
)
#: Six minutes of pause in one run, then a little speech: within the document's bound (a
#: minute free, a second a letter), once one chunk's 34.6 MB of silence, made at once.
PAUSES = (
    "<speak>Breathe in." + '<break time="10s"/>' * 36 + "And out, slowly, letting the air"
    " leave you. " * 8 + "</speak>"
)


async def _submit(store: Store, text: str) -> str:
    secret = await deployment_secret(store)
    speech = dict(model="kokoro", voice="af_heart", speed=1.0, format="pcm", text=text)
    cid = cast_id(secret, **speech, input_format="ssml")  # type: ignore[arg-type]
    recipe = Recipe(
        **speech, title="", created_ms=int(time.time() * 1000), input_format="ssml"
    )  # type: ignore[arg-type]
    await submit(store, cid, recipe, sample_rate=SAMPLE_RATE)
    return cid


async def _cast(store: Store, worker: Worker, text: str) -> tuple[float, list]:
    """Make `text` a cast on `worker` to its end: the rtf its start was planned at, and its
    audio records."""
    cid = await _submit(store, text)
    assert await wait_ended(store, [cid], within=300) == {cid: "eos"}
    stream = await records(store, cast_stream(cid))
    start = next(decode(r.body, Start) for r in stream if event_of(r) == "start")
    assert start.rtf is not None
    return start.rtf, [audio_chunk(r) for r in stream if event_of(r) == "audio"]


async def test_a_long_pause_is_written_a_quantum_at_a_time_and_costs_nothing(
    store: Store, tiny_engine: Engine
) -> None:
    worker = Worker(
        store,
        tiny_engine,
        WorkerConfig(worker_id="p1", comfortable_lead_s=1e9),  # no listener to keep pace with
        chunk_policy=ChunkPolicy(),
        encoders=new_encoder,
    )
    async with running(worker):
        await _cast(store, worker, SPEECH)  # the device's costs learn some speech
        before, _ = await _cast(store, worker, SPEECH.replace("lamp", "great lamp"))
        _, audio = await _cast(store, worker, PAUSES)
        after, _ = await _cast(store, worker, SPEECH.replace("lamp", "brass lamp"))
    # Six minutes of silence at no compute taught the costs nothing: the next cast is planned
    # at the device's rate for speech. Learned as audio, silence can only make the device
    # look faster (it once cut the rate 700-fold here, 0.288 to 0.0004); the tiny model's
    # timings on a shared machine wander a few times either way, so only a fall is checked.
    assert after > before / 5, (before, after)
    heard_s = sum(a.duration_ms for a in audio) / 1000
    assert heard_s >= 360, heard_s  # every pause is heard
    # A chunk is made as one array (its records share its plan position). The speech here
    # is a few seconds a chunk, so no chunk of this cast may hold more than a quantum: the
    # six minutes of pause are 36 chunks of their own, where one chunk once held it all.
    chunks = [
        sum(a.duration_ms for a in records)
        for _, records in itertools.groupby(audio, key=lambda a: a.plan)
    ]
    assert len(chunks) >= 36 + 2, chunks
    assert max(chunks) <= SILENCE_CHUNK_MS, chunks
