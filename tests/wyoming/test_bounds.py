"""The Wyoming door's bounds, from the client's side: what a malformed, oversized, idle,
slow or surplus connection gets (one `error` event and a closed socket, before any work),
and that the server goes on serving everyone else."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path

from wyoming.info import Describe, Info
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeVoice

from harness.engines import CostEngine
from speechd import casts
from speechd.casts import schema
from speechd.casts._records import audio_chunk
from speechd.durable import Store
from speechd.limits import StreamSlots
from speechd.wyoming import MAX_PART_BYTES
from tests.support.live import wait_done

from ._support import Served, hear, served

FAILSAFE_S = 30.0  # far above any answer here; a hang fails the test


async def _raw(door: Served, data: bytes, *, close: bool = False) -> list[dict]:
    """Send `data` on a fresh connection and read what comes back until the server closes
    it: the JSON headers of the events it sent."""
    reader, writer = await asyncio.open_unix_connection(str(door.path))
    writer.write(data)
    await writer.drain()
    if close:
        writer.write_eof()
    out = []
    try:
        while line := await asyncio.wait_for(reader.readline(), FAILSAFE_S):
            header = json.loads(line)
            if header.get("data_length"):
                header["data"] = json.loads(await reader.readexactly(header["data_length"]))
            out.append(header)
    finally:
        writer.close()
    return out


async def _until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + FAILSAFE_S
    while not condition():
        assert time.monotonic() < deadline, "it never came to pass"
        await asyncio.sleep(0.01)


async def _still_serves(door: Served) -> None:
    async with door.client() as client:
        await client.write_event(Describe().event())
        event = await asyncio.wait_for(client.read_event(), FAILSAFE_S)
    assert event is not None and Info.is_type(event.type)


async def test_an_absurd_data_length_is_refused_before_a_byte_is_buffered(
    store: Store, tmp_path: Path
) -> None:
    async with served(store, tmp_path) as door:
        for length in (10**12, MAX_PART_BYTES + 1, -5, "12", 1.5, [1]):
            header = json.dumps({"type": "synthesize", "data_length": length}) + "\n"
            answer = await _raw(door, header.encode(), close=length == -5)
            if length == -5:  # no data: a synthesize without text, refused and carried on
                assert answer[0]["type"] == "error"
                continue
            assert [a["type"] for a in answer] == ["error"], (length, answer)
            assert "data or payload" in answer[0]["data"]["text"] or "malformed" in answer[
                0
            ]["data"]["text"]
        await _still_serves(door)


async def test_a_huge_payload_claim_closes_the_connection_while_the_client_still_sends(
    store: Store, tmp_path: Path
) -> None:
    async with served(store, tmp_path) as door:
        _, writer = await asyncio.open_unix_connection(str(door.path))
        writer.write(json.dumps({"type": "ping", "payload_length": 10**9}).encode() + b"\n")
        sent = 0
        try:
            while sent < 64 * 1024 * 1024:  # the server cuts it off long before
                writer.write(b"\0" * 65536)
                await asyncio.wait_for(writer.drain(), FAILSAFE_S)
                sent += 65536
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()
        assert sent < 64 * 1024 * 1024
        await _still_serves(door)


async def test_malformed_and_truncated_events_end_only_their_connection(
    store: Store, tmp_path: Path
) -> None:
    async with served(store, tmp_path) as door:
        not_json = await _raw(door, b"{not json\n")
        assert [a["type"] for a in not_json] == ["error"]
        too_long = await _raw(door, b"{" + b" " * (70 * 1024))
        assert [a["type"] for a in too_long] == ["error"]
        data = b'"text"'
        wrong_data = await _raw(
            door, b'{"type": "synthesize", "data_length": %d}\n%s' % (len(data), data)
        )
        assert [a["type"] for a in wrong_data] == ["error"]
        no_type = await _raw(door, b'{"data": {}}\n')
        assert [a["type"] for a in no_type] == ["error"]
        header = json.dumps({"type": "synthesize", "data_length": 100}).encode() + b"\n"
        truncated = await _raw(door, header + b'{"text": "Hel', close=True)
        assert truncated == []
        # A well-framed event with fields of the wrong type: refused, and the next is served.
        wrong_types = await _raw(
            door,
            b'{"type": "synthesize", "data": {"text": 5}}\n'
            b'{"type": 7}\n'
            b'{"type": "synthesize", "data": "text"}\n'
            b'{"type": "ping", "data": {"text": "x"}}\n',
            close=True,
        )
        assert [a["type"] for a in wrong_types] == ["error", "error", "error", "pong"]
        await _still_serves(door)


async def test_connections_past_the_caps_are_refused_before_anything_is_read(
    store: Store, tmp_path: Path
) -> None:
    slots = StreamSlots(total=2, per_client=1)
    async with served(store, tmp_path, slots=slots) as door, door.client() as first:
        await first.write_event(Describe().event())
        assert await first.read_event() is not None
        assert slots.in_use == 1
        refused = await _raw(door, b"")
        assert [a["type"] for a in refused] == ["error"]
        assert refused[0]["data"]["code"] == "too_many_streams"
    assert slots.in_use == 0  # given back as each connection ended


async def test_an_idle_connection_is_closed(store: Store, tmp_path: Path) -> None:
    async with served(store, tmp_path, idle_s=0.3) as door, door.client() as client:
        event = await asyncio.wait_for(client.read_event(), FAILSAFE_S)
    assert event is None


async def test_a_reader_that_stops_reading_is_dropped_and_its_cast_goes_on(
    store: Store, tmp_path: Path
) -> None:
    slots = StreamSlots(64, 16)
    # Long audio (a second per 100 characters) made at once: far more than socket buffers.
    engine = CostEngine(audio_per_char=0.01, rtf=0.001)
    text = "A long reply that nobody reads. " * 50
    async with served(store, tmp_path, engine=engine, slots=slots, send_timeout_s=0.5) as door:
        _, writer = await asyncio.open_unix_connection(str(door.path))
        event = Synthesize(text=text, voice=SynthesizeVoice(name="af_heart")).event()
        writer.write(json.dumps({"type": "synthesize", "data": event.data}).encode() + b"\n")
        await writer.drain()
        await _until(lambda: slots.in_use == 1)  # it is served ...
        await _until(lambda: slots.in_use == 0)  # ... and dropped, without a byte read
        writer.close()
        secret = await casts.deployment_secret(store)
        cast_id = casts.cast_id(
            secret, model="kokoro", voice="af_heart", speed=1.0, format="pcm", text=text.strip()
        )
        records = await wait_done(store, cast_id)
        assert schema.event_of(records[-1]) == schema.Event.EOS
        await _still_serves(door)


async def test_a_dropped_stream_closes_its_input_and_the_cast_speaks_what_came(
    store: Store, tmp_path: Path
) -> None:
    async with served(store, tmp_path) as door:
        async with door.client() as client:
            await client.write_event(SynthesizeStart().event())
            await client.write_event(SynthesizeChunk(text="Every word that came is").event())
            await client.write_event(SynthesizeChunk(text=" spoken, to the end.").event())
            heard = await hear(client, until="audio-chunk")
        cast_id = heard.of("audio-start")[0].data["cast_id"]
        records = await wait_done(store, cast_id)
    assert schema.event_of(records[-1]) == schema.Event.EOS
    spoken = " ".join(
        audio_chunk(r).text for r in records if schema.event_of(r) == schema.Event.AUDIO
    )
    assert spoken == "Every word that came is spoken, to the end."


async def test_after_a_refusal_a_client_that_only_waits_is_let_go_in_seconds(
    store: Store, tmp_path: Path
) -> None:
    async with served(store, tmp_path, idle_s=600) as door, door.client() as client:
        await client.write_event(Synthesize(text="Hi.", voice=SynthesizeVoice("nope")).event())
        refused = await hear(client)
        # Home Assistant reads on until audio-stop or the socket closes: it closes.
        waited = time.monotonic()
        closed = await asyncio.wait_for(client.read_event(), FAILSAFE_S)
    assert refused.kinds == ["error"] and closed is None
    assert time.monotonic() - waited < 60  # AFTER_ERROR_IDLE_S, not the 600 s idle timeout


def test_the_manual_lists_each_wyoming_limit_as_the_code_has_it() -> None:
    from speechd import wyoming

    page = (Path(__file__).resolve().parents[2] / "docs/operations/limits.md").read_text()
    section = page[page.index("## Wyoming") :]
    for name in wyoming.__all__:
        value = getattr(wyoming, name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        assert f"`{name}`" in section, f"{name} is not in the manual's limits"
        shown = f"{value:,}" if isinstance(value, int) else f"{value:g}"
        assert shown in section, f"{name} = {shown} is not in the manual's limits"
