import asyncio, time, httpx, sys
sys.path.insert(0, "/work/ci")
from loadtest.bench_hostile import PROSE, repeat, ORDINARY
URL = "http://127.0.0.1:8765"
async def main():
    async with httpx.AsyncClient(timeout=httpx.Timeout(30.0, read=300.0)) as c:
        for _ in range(120):
            try:
                if (await c.get(URL + "/readyz")).status_code == 200: break
            except httpx.HTTPError: pass
            await asyncio.sleep(1)
        async with c.stream("POST", URL + "/v1/audio/speech", json={"voice": "af_heart", "input": "Warming up.", "response_format": "pcm"}) as w:
            async for _ in w.aiter_raw(): pass
        print("warm done", flush=True)
        t0 = time.monotonic()
        r = await c.post(URL + "/v1/casts", json={"input": repeat(PROSE, 200_000), "voice": "af_heart", "response_format": "wav"})
        cid = r.json()["id"]
        for _ in range(40):
            s = (await c.get(f"{URL}/v1/casts/{cid}")).json()
            print(f"{time.monotonic()-t0:6.1f} {s['status']} {s['progress']}", flush=True)
            if s["progress"]["chunks_done"] >= 3: break
            await asyncio.sleep(1.5)
        b = time.monotonic()
        first = None
        async with c.stream("POST", URL + "/v1/audio/speech", json={"voice": "af_heart", "input": ORDINARY.format(n="x"), "response_format": "pcm"}) as resp:
            print("headers", resp.status_code, dict(resp.headers).get("x-cast-start-delay"), time.monotonic()-b, flush=True)
            async for p in resp.aiter_raw():
                if p and first is None:
                    first = time.monotonic()-b; print("first", first, flush=True)
        print("done", time.monotonic()-b)
asyncio.run(main())
