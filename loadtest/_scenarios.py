"""The scenarios: who asks for what, and when.

Every request is a streaming `POST /v1/audio/speech` in `pcm` (so byte counts are exact audio
durations) of a realistic paragraph. Texts are unique within a run except where a scenario
repeats one on purpose (identical requests share one cast), and the same on every server, so
the servers are compared on the same work.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import count

from ._workload import paragraph

__all__ = [
    "NAIVE",
    "SPEECHD",
    "SPEECHD_FIFO",
    "SPEECHD_ONNX",
    "TARGETS",
    "Request",
    "Scenario",
    "scenarios",
]

SPEECHD = "speechd"
SPEECHD_FIFO = "speechd-fifo"
SPEECHD_ONNX = "speechd-onnx"
NAIVE = "naive"
TARGETS = (SPEECHD, SPEECHD_FIFO, SPEECHD_ONNX, NAIVE)
"""The servers: speechd as shipped on torch, its worker on the FIFO baseline policy, speechd
on ONNX Runtime (`--engine onnx`), the naive one (torch)."""


@dataclass(frozen=True)
class Request:
    at_s: float
    """When it is sent, seconds after the scenario starts."""
    text: str
    label: str


@dataclass(frozen=True)
class Scenario:
    name: str
    kind: str
    """"concurrency", "staggered", "listeners" or "dedupe"."""
    requests: tuple[Request, ...]
    targets: tuple[str, ...] = TARGETS
    concurrency: int | None = None
    pool: int | None = None
    """At most this many requests in flight, each sent as one before it ends, in order (a
    closed loop of `pool` clients); None: each at its own time."""


def _chapter(numbers: Iterator[int], sentences: int) -> str:
    n = next(numbers)
    return f"Chapter {n}. {paragraph(sentences, 5 * n)}"


def scenarios(
    quick: bool, levels: Sequence[int] | None = None, texts: int | None = None
) -> list[Scenario]:
    """The run's scenarios, in order. `quick` keeps each one small (under 3 minutes in all on
    a 2-core CPU); otherwise the concurrency sweep is 1, 2, 4, 8 requests of 2 sentences
    (`levels`: other levels). With `texts`, each level of the sweep sends that many texts
    through a closed loop of `level` clients (each sends its next when its last one ended),
    as a side-by-side benchmark of servers does, instead of `level` texts at once."""
    numbers = count(1)
    default, sentences = ((1, 2, 4), 1) if quick else ((1, 2, 4, 8), 2)
    levels = tuple(levels or default)
    out = [
        Scenario(
            f"concurrency-{level}",
            "concurrency",
            tuple(
                Request(0.0, _chapter(numbers, sentences), f"c{level}-{i}")
                for i in range(texts or level)
            ),
            concurrency=level,
            pool=level if texts else None,
        )
        for level in levels
    ]
    long_sentences, shorts, spacing = (2, 2, 1.5) if quick else (6, 4, 4.0)
    out.append(
        Scenario(
            "staggered",
            "staggered",
            (
                Request(0.0, _chapter(numbers, long_sentences), "long"),
                *(
                    Request(spacing * (i + 1), _chapter(numbers, 1 + i % 2), f"short-{i}")
                    for i in range(shorts)
                ),
            ),
        )
    )
    # Sharing scenarios: one cast, so the policy cannot matter, and the naive server (which
    # shares nothing) would only repeat the same work N times.
    shared = _chapter(numbers, 1 if quick else 2)
    spread = 1.0 if quick else 4.0
    out.append(
        Scenario(
            "listeners-50",
            "listeners",
            tuple(Request(spread * i / 50, shared, f"listener-{i}") for i in range(50)),
            targets=(SPEECHD,),
        )
    )
    same = _chapter(numbers, 1 if quick else 2)
    out.append(
        Scenario(
            "dedupe-8",
            "dedupe",
            tuple(Request(0.0, same, f"same-{i}") for i in range(8)),
            targets=(SPEECHD,),
        )
    )
    return out
