"""An SSML cast with `<voice>` elements on the worker, with the tiny model and the real front
end: a worker stopped mid-cast (as a kill leaves it: no grace, a chunk abandoned in flight)
and another that takes the cast over make each chunk once, each with its own voice, and
every word of the file still points at its text in the document as sent."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from speechd.audio import new_encoder
from speechd.casts import cast_id, deployment_secret, submit
from speechd.casts._records import audio_chunk
from speechd.casts.schema import Recipe, Start, cast_stream, decode, event_of
from speechd.durable import Store
from speechd.engine import Engine
from speechd.engine._engine import chunk_voice
from speechd.text import ChunkPolicy
from speechd.worker import Worker, WorkerConfig

from ._helpers import check_layout, complete_audio, playable, records, running, wait_ended

DOCUMENT = (
    "<speak><p>"
    + "The night was cold, and the wind was up over the moor. " * 3
    + '<voice name="am_adam">"Who goes there?" he called into the dark. '
    + "Nobody answered him, so he called again, louder. " * 2
    + '</voice>The wind carried his words away. <voice name="bf_emma">'
    + "I am here, she said at last, from the gate. " * 3
    + "</voice>And that was all he heard that night.</p></speak>"
)  # fmt: skip
POLICY = ChunkPolicy(first_tokens=10, max_tokens=40)


class Recording:
    """The engine, recording the voice each chunk is read with; past `hold_after` chunks,
    it holds each one until `gate` is set (a worker stopped meanwhile abandons it)."""

    def __init__(self, engine: Engine, *, hold_after: int | None = None) -> None:
        self._engine = engine
        self.read: list[tuple[int, str, int]] = []  # (chunk index, voice, where it starts)
        self.hold_after = hold_after
        self.gate = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def _hold(self) -> None:
        if self.hold_after is not None and len(self.read) >= self.hold_after:
            self.gate.wait(30)

    def synthesize(self, chunk: Any, voice: str, speed: float, **kw: Any) -> Any:
        self._hold()
        self.read.append(_read(chunk, voice))
        return self._engine.synthesize(chunk, voice, speed, **kw)

    def synthesize_batch(self, items: Any, **kw: Any) -> Any:
        self._hold()
        self.read.extend(_read(i.chunk, i.voice) for i in items)
        return self._engine.synthesize_batch(items, **kw)


def _read(chunk: Any, voice: str) -> tuple[int, str, int]:
    return chunk.index, chunk_voice(chunk, voice), chunk.words[0].source[0]


def voice_at(at: int) -> str:
    """The voice the document's text at offset `at` is read with."""
    for name in ("am_adam", "bf_emma"):
        opened = DOCUMENT.index(f'<voice name="{name}">')
        if opened < at < DOCUMENT.index("</voice>", opened):
            return name
    return "af_heart"


def worker(store: Store, engine: Any, worker_id: str, **settings: Any) -> Worker:
    return Worker(
        store,
        engine,
        WorkerConfig(worker_id=worker_id, **settings),
        chunk_policy=POLICY,
        encoders=new_encoder,
    )


async def submit_ssml(store: Store, text: str) -> str:
    secret = await deployment_secret(store)
    voices = ("am_adam", "bf_emma")
    cid = cast_id(
        secret,
        model="kokoro",
        voice="af_heart",
        speed=1.0,
        format="pcm",
        text=text,
        input_format="ssml",
        voices=voices,
    )
    recipe = Recipe(
        text=text,
        model="kokoro",
        voice="af_heart",
        speed=1.0,
        format="pcm",
        title="voices",
        created_ms=int(time.time() * 1000),
        input_format="ssml",
    )
    await submit(store, cid, recipe, sample_rate=24_000)
    return cid


async def test_a_cast_taken_over_keeps_each_chunks_voice(
    store: Store, tiny_engine: Engine
) -> None:
    cid = await submit_ssml(store, DOCUMENT)
    first = Recording(tiny_engine, hold_after=3)
    async with running(worker(store, first, "v1", stop_grace_s=0.0)):
        for _ in range(600):
            made = [r for r in await records(store, cast_stream(cid)) if event_of(r) == "audio"]
            if len(made) >= 2 and len(first.read) >= 3:
                break
            await asyncio.sleep(0.05)
        threading.Timer(0.5, first.gate.set).start()  # the chunk in flight, let go late
    second = Recording(tiny_engine)
    async with running(worker(store, second, "v2")):
        assert await wait_ended(store, [cid], within=120) == {cid: "eos"}

    stream = await records(store, cast_stream(cid))
    attempts = check_layout(stream)
    assert len(attempts) == 2
    kept = decode(attempts[1][0].body, Start).keep
    complete_audio(stream)
    chunks = [audio_chunk(r) for r in playable(stream)]
    assert 1 <= kept < len(chunks) and len(chunks) > 6
    # Each chunk read with the voice its text is in, by either worker; all three voices used.
    read = first.read + second.read
    assert all(voice == voice_at(at) for _, voice, at in read)
    assert {voice for _, voice, _ in read} == {"af_heart", "am_adam", "bf_emma"}
    # The second worker made only what was not kept, each chunk once.
    assert [i for i, _, _ in second.read] == list(range(kept, len(chunks)))
    assert [at for _, _, at in first.read[:kept] + second.read] == [
        c.words[0].source[0] for c in chunks
    ]
    # Every word points at its text in the document, inside its element, and in order.
    last = -1
    for chunk in chunks:
        for word in chunk.words:
            if word.mark or word.source is None:
                continue
            begin, end = word.source
            assert word.text.strip('.,"?!') == DOCUMENT[begin:end].strip('.,"?!'), word
            assert begin > last
            last = begin
    inside = DOCUMENT.index("Who goes")
    who = next(w for c in chunks for w in c.words if w.text == '"Who')
    assert who.source == (inside, inside + 3)
