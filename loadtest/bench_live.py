"""Live-cast benchmark on the real Kokoro-82M weights (printed figures, not timed tests).

    python -m loadtest.bench_live --model-dir ~/.cache/speechd/kokoro-82m [--device cpu]
        [--threads N] [--rate 15] [--rounds 2] [--url http://127.0.0.1:8000]

A simulated LLM streams a 150-word reply at `--rate` tokens per second (a token is a word or
a piece of one, with its leading space, as chat models send them). Two ways to speak it, in
one run, alternated `--rounds` times on one `speechd serve` (started here, or `--url`):

  live      a live cast: each token appended as it comes (`POST /v1/casts/{id}/input`), its
            audio followed from the start (`/v1/casts/{id}/audio`, pcm)
  baseline  wait for the whole reply, then `POST /v1/audio/speech` (pcm, streamed)

Printed for both: first audio after the first token, after the first complete clause (the
token that ends it was sent), the last audio's lag after the last token, and a real-time
listener's underruns and stall (it starts at its first audio and pauses when it runs dry);
then the ratio of first audio (baseline / live). Targets (2-core CPU): live first audio
<= 1.5 s after the first clause is complete, >= 3x sooner than the baseline, no underruns
caused by the input.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from ._listener import PCM_BYTES_PER_S, Listener
from ._servers import speechd_at

REPLY = (
    "Sure, here is a short overview of how owls hunt at night. Owls rely mostly on their "
    "hearing, which is so precise that some species can catch prey they cannot see at all. "
    "Their faces work like satellite dishes, funnelling sound toward ears that sit at "
    "slightly different heights, so the brain can tell up from down as well as left from "
    "right. Their feathers have soft, comb-like edges that break up the rush of air, which "
    "lets them glide in almost complete silence. When an owl hears a mouse moving under the "
    "snow, it turns its head to face the sound, drops from its perch, and strikes with its "
    "talons spread wide. Most owls swallow small prey whole and later cough up pellets of "
    "fur and bone, which scientists collect to learn what they eat. If you want to see one, "
    "go out at dusk, stay very still, and listen for their calls."
)
VOICE = "af_heart"
_CLAUSE_ENDS = tuple(",.;:!?")


def tokens_of(text: str) -> list[str]:
    """The reply as a chat model streams it: words with their leading space, long words in
    two pieces (about 1.3 tokens a word)."""
    out: list[str] = []
    for n, word in enumerate(text.split(" ")):
        lead = " " if n else ""
        if len(word) > 7:
            out += [lead + word[:4], word[4:]]
        else:
            out.append(lead + word)
    return out


@dataclass
class Outcome:
    name: str
    first_token: float
    first_clause: float
    last_token: float
    listener: Listener

    def row(self) -> tuple[float, float, float, int, float]:
        first = self.listener.first
        ended = self.listener.ended
        assert first is not None and ended is not None
        return (
            first - self.first_token,
            first - self.first_clause,
            ended - self.last_token,
            self.listener.underruns,
            self.listener.stall_s,
        )


class Llm:
    """The simulated chat model: `tokens` at `rate` a second, and when each was sent."""

    def __init__(self, tokens: list[str], rate: float) -> None:
        self.tokens = tokens
        self.rate = rate
        self.sent: list[float] = []

    async def stream(self):  # type: ignore[no-untyped-def]
        began = time.monotonic()
        for n, token in enumerate(self.tokens):
            await asyncio.sleep(max(0.0, began + n / self.rate - time.monotonic()))
            self.sent.append(time.monotonic())
            yield token

    def clause_done(self) -> float:
        """When the token that ends the first clause was sent."""
        for token, at in zip(self.tokens, self.sent, strict=False):
            if token.rstrip().endswith(_CLAUSE_ENDS):
                return at
        return self.sent[-1]


async def _listen(response: httpx.Response, listener: Listener) -> None:
    async for piece in response.aiter_raw():
        listener.receive(time.monotonic(), len(piece) / PCM_BYTES_PER_S)
    listener.end(time.monotonic())


async def live(client: httpx.AsyncClient, url: str, llm: Llm) -> Outcome:
    made = await client.post(
        url + "/v1/casts", json={"live": True, "voice": VOICE, "response_format": "pcm"}
    )
    made.raise_for_status()
    cast = made.json()
    auth = {"authorization": f"Bearer {cast['input_token']}"}
    listener = Listener(submitted=time.monotonic())
    async with client.stream("GET", f"{url}/v1/casts/{cast['id']}/audio") as response:
        response.raise_for_status()
        listening = asyncio.create_task(_listen(response, listener))
        seq = 0
        async for token in llm.stream():
            body = {"text": token, "seq": seq}
            (await client.post(cast["input_url"], json=body, headers=auth)).raise_for_status()
            seq += 1
        done = {"done": True, "seq": seq}
        (await client.post(cast["input_url"], json=done, headers=auth)).raise_for_status()
        await listening
    return Outcome("live", llm.sent[0], llm.clause_done(), llm.sent[-1], listener)


async def baseline(client: httpx.AsyncClient, url: str, llm: Llm) -> Outcome:
    reply = "".join([token async for token in llm.stream()])
    listener = Listener(submitted=time.monotonic())
    body = {"model": "tts-1", "voice": VOICE, "input": reply, "response_format": "pcm"}
    async with client.stream("POST", url + "/v1/audio/speech", json=body) as response:
        response.raise_for_status()
        await _listen(response, listener)
    return Outcome("baseline", llm.sent[0], llm.clause_done(), llm.sent[-1], listener)


def _report(outcomes: list[Outcome]) -> None:
    header = (
        f"   {'':<9} {'first audio after':>19} {'after 1st clause':>17}"
        f" {'last audio lag':>15} {'underruns':>10} {'stall':>7}"
    )
    print(header)
    medians: dict[str, list[float]] = {}
    for name in ("live", "baseline"):
        rows = [o.row() for o in outcomes if o.name == name]
        for row in rows:
            print(
                f"   {name:<9} {row[0]:17.2f} s {row[1]:15.2f} s {row[2]:13.2f} s"
                f" {row[3]:10d} {row[4]:5.2f} s"
            )
        medians[name] = [statistics.median(r[i] for r in rows) for i in range(3)]
    live_first, base_first = medians["live"][0], medians["baseline"][0]
    print(
        f"   median first audio after the first token: live {live_first:.2f} s, baseline"
        f" {base_first:.2f} s: {base_first / max(live_first, 1e-9):.1f}x sooner (target >= 3x)"
    )
    print(
        f"   median live first audio after the first complete clause {medians['live'][1]:.2f} s"
        " (target <= 1.5 s)"
    )


async def run(url: str, rate: float, rounds: int) -> None:
    tokens = tokens_of(REPLY)
    print(
        f"   reply: {len(REPLY.split())} words, {len(tokens)} tokens at {rate:g}/s"
        f" ({len(tokens) / rate:.1f} s to stream)"
    )
    async with httpx.AsyncClient(timeout=httpx.Timeout(30.0, read=600.0)) as client:
        # One short cast first: the worker measures itself, the first real run is warm.
        warm = {"voice": VOICE, "input": "Warming up.", "response_format": "pcm"}
        (await client.post(url + "/v1/audio/speech", json=warm)).raise_for_status()
        outcomes: list[Outcome] = []
        for n in range(rounds):
            # Each round's reply ends its own way: an identical request would join the
            # cast an earlier round made (and answer at once) instead of making one.
            tokens = tokens_of(f"{REPLY} That was reply {n + 1}.")
            outcomes.append(await live(client, url, Llm(tokens, rate)))
            outcomes.append(await baseline(client, url, Llm(tokens, rate)))
    _report(outcomes)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a running speechd (default: start `speechd serve`)")
    parser.add_argument("--model-dir", default=os.environ.get("SPEECHD_TEST_MODEL_DIR"))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int)
    parser.add_argument("--rate", type=float, default=15.0, help="tokens per second")
    parser.add_argument("--rounds", type=int, default=2, help="live/baseline pairs")
    args = parser.parse_args(argv)
    print(f"speechd live-cast benchmark, {os.cpu_count()} CPUs")
    print(f"   load average at the start {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory(prefix="bench-live-") as work, speechd_at(
        args.url, model_dir=args.model_dir, device=args.device, threads=args.threads,
        workdir=Path(work),
    ) as url:  # fmt: skip
        asyncio.run(run(url, args.rate, args.rounds))
    print(f"   load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
