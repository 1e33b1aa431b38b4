"""A cast outlives `--retention` while it is alive (issue 27 item 3): retention counts from a
cast's last activity on any of its streams, and spares a cast whose job still waits, so a cast
queued, being made, or taking live input longer than the retention completes; a quiet done
cast still goes. The retention here is a second (the sweep runs every tenth of it)."""

from __future__ import annotations

import asyncio

import httpx

from speechd.casts import CastState
from speechd.casts.schema import cast_stream, catalog_stream
from speechd.config import Settings
from speechd.durable import Store
from tests.api.gateway._support import StepEngine, running_worker, serve, status_when, submit

RETENTION_S = 1.0
SETTINGS = Settings(data_dir="unused", retention=RETENTION_S)
TEXT = "One two. Three four five six. Seven eight nine ten eleven twelve thirteen fourteen."


async def test_casts_queued_and_being_made_past_the_retention_complete(store: Store) -> None:
    engine = StepEngine()
    engine.hold()
    async with (
        running_worker(store, engine),
        serve(store, SETTINGS) as live,
        httpx.AsyncClient(base_url=live.url, timeout=30) as http,
    ):
        making = await submit(http, TEXT, response_format="pcm")
        queued = await submit(http, "A second cast waits its turn.", response_format="pcm")
        await status_when(store, making, lambda s: s.state == CastState.GENERATING)
        engine.allow(1)  # a first chunk, then nothing for three retentions
        await status_when(store, making, lambda s: s.chunks_done == 1)
        await asyncio.sleep(3 * RETENTION_S)
        assert (await http.get(f"/v1/casts/{queued}")).json()["status"] == "queued"
        engine.run_free()
        for cast_id in (making, queued):
            done = await status_when(store, cast_id, lambda s: s.state != CastState.GENERATING
                                     and s.state != CastState.QUEUED)  # fmt: skip
            assert done.state == CastState.DONE, done
            audio = await http.get(f"/v1/casts/{cast_id}/audio")
            assert audio.status_code == 200 and audio.content
        # Done and quiet: now the retention takes them, every stream of each (one sweep
        # removes a cast's streams one prefix after another: wait for the last of them).
        for cast_id in (making, queued):
            streams = (cast_stream(cast_id), catalog_stream(cast_id))
            for _ in range(100):
                if not any([await store.check_tail(s) for s in streams]):
                    break
                await asyncio.sleep(0.1)
            assert [await store.check_tail(s) for s in streams] == [0, 0]


async def test_a_live_cast_taking_input_past_the_retention_completes(store: Store) -> None:
    """Its recipe was written when it was made; its input keeps coming. An api started after
    the retention passed (a restart, another replica) still takes its pieces."""
    pieces = ["Hello there, ", "this comes slowly, ", "a piece now and then, ", "and ends."]
    async with running_worker(store, StepEngine()), serve(store, SETTINGS) as first:
        async with httpx.AsyncClient(base_url=first.url, timeout=30) as http:
            for _ in range(300):  # the worker says it is ready
                if (await http.get("/readyz")).status_code == 200:
                    break
                await asyncio.sleep(0.1)
            made = (await http.post("/v1/casts", json={"live": True, "voice": "af_heart"})).json()
        token = {"authorization": f"Bearer {made['input_token']}"}
        path = f"/v1/casts/{made['id']}/input"
        for n, piece in enumerate(pieces):
            await asyncio.sleep(0.6 * RETENTION_S)
            async with (
                serve(store, SETTINGS) as restarted,
                httpx.AsyncClient(base_url=restarted.url, timeout=30) as http,
            ):
                body = {"text": piece, "seq": n, "done": n == len(pieces) - 1}
                answer = await http.post(path, json=body, headers=token)
                assert answer.status_code == 200, answer.text
        done = await status_when(store, made["id"], lambda s: s.state == CastState.DONE)
        assert done.state == CastState.DONE
        async with httpx.AsyncClient(base_url=first.url, timeout=30) as http:
            words = (await http.get(f"/v1/casts/{made['id']}/words")).json()["words"]
        assert " ".join(w["word"] for w in words) == "".join(pieces).strip()
