"""bench_hostile's SSML section: the reader that answers a request, and the planner behind it.

    python -m loadtest.bench_hostile --section ssml [--n 50000]

Three tables, printed (figures are for a quiet machine; they never fail anything here):

1. **The api's check** (`speechd.text.check_input`, what a request waits for before its 400
   or its cast) on each SSML pattern at 100,000 and 200,000 characters (the cast limit): its
   time (best of 3), the doubling ratio (target <= 2.5: linear), and the answer. Targets: every
   check <= 100 ms, every ratio <= 2.5.
2. **Planning SSML** that passes the check, to its end with the real English G2P (no model):
   time at n and 2n characters and the ratio (target <= 2.5), and the longest single planner
   step.
3. **SSML against the same text plain**: the planning cost of a document (paragraphs of three
   `<s>`, a break between paragraphs, a `sub` and an `emphasis` in some) over the cost of the
   same text as plain prose (the same paragraphs, a blank line between them), at 2n characters
   of text, best of 3 each (target <= 1.5x).
"""

from __future__ import annotations

import argparse
import time
import warnings
from collections.abc import Callable

from speechd.errors import InvalidRequest
from speechd.text import ChunkPolicy, InputCheck, Planner, PlanStatus, check_input

__all__ = ["CHECKS", "ssml"]

PROSE = (
    "The old lighthouse keeper climbed the narrow stairs every evening just before the sun "
    "slipped below the hills. He lit the great lamp, and wound the brass clockwork that "
    "turned it through the night. Ships never saw his face. "
)


def fill(pattern: str, n: int) -> str:
    return (pattern * (n // len(pattern) + 1))[:n]


def whole(pattern: str, n: int) -> str:
    """As many whole copies of `pattern` as fit in n characters."""
    return pattern * max(n // len(pattern), 1)


def _attributes(n: int) -> str:
    out, i = ["<speak><s"], 0
    while sum(map(len, out)) < n:
        out.append(f' a{i}="1"')
        i += 1
    return "".join(out) + ">x</s></speak>"


#: SSML patterns, each a document of about n characters.
CHECKS: dict[str, Callable[[int], str]] = {
    "nested <s>": lambda n: "<speak>" + "<s>" * (n // 3),
    "tags <s></s>": lambda n: f"<speak>{fill('<s></s>', n)}</speak>",
    "huge attribute": lambda n: f'<speak><s a="{"x" * n}">x</s></speak>',
    "many attributes": _attributes,
    "open comment": lambda n: "<speak>" + fill("<!--", n),
    "entities, one bad": lambda n: f"<speak>{fill('a&amp;', n)}&lol;</speak>",
    "entities": lambda n: f"<speak>{whole('a &amp; b ', n)}</speak>",
    "prose in <s>": lambda n: f"<speak>{whole(f'<s>{PROSE}</s>', n)}</speak>",
    "word, break": lambda n: "<speak>" + whole('words here <break time="5ms"/> ', n) + "</speak>",
    "unclosed tags": lambda n: "<speak>" + fill("<s a='1' ", n),
}
#: The patterns a planner reads to its end (they pass the check at n).
PLANNED = ("entities", "prose in <s>")


def _check(text: str) -> tuple[float, str]:
    best = float("inf")
    answer = ""
    for _ in range(3):
        started = time.perf_counter()
        try:
            found: InputCheck = check_input(text, lang="a", ssml=True)
            answer = "ok" + (f" ({', '.join(found.unsupported)})" if found.unsupported else "")
        except InvalidRequest as exc:
            answer = "400: " + exc.message.removeprefix("The SSML cannot be read: ")[:44]
        best = min(best, time.perf_counter() - started)
    return best, answer


def _plan(g2p: object, text: str, *, ssml: bool) -> tuple[float, float]:
    """Seconds to plan `text` to its end, and the longest single step."""
    policy = ChunkPolicy(rtf=0)
    planner = Planner(g2p, policy, text=text, done=True, ssml=ssml)  # type: ignore[arg-type]
    longest = 0.0
    started = time.perf_counter()
    while True:
        before = time.perf_counter()
        step = planner.step()
        longest = max(longest, time.perf_counter() - before)
        if step.status is PlanStatus.DONE:
            return time.perf_counter() - started, longest


def _paragraphs(sentences: list[str]) -> list[list[str]]:
    return [sentences[i : i + 3] for i in range(0, len(sentences), 3)]


def _plain(sentences: list[str]) -> str:
    """Sentences as plain prose: paragraphs of three, a blank line between them."""
    return "\n\n".join(" ".join(p) for p in _paragraphs(sentences))


def _document(sentences: list[str]) -> str:
    """The same sentences as an SSML document that says the same words: a `<p>` of three
    `<s>` each, a break between paragraphs, a `sub` and an `emphasis` here and there."""
    parts = ["<speak>"]
    for n, paragraph in enumerate(_paragraphs(sentences)):
        if n:
            parts.append('<break time="300ms"/>')
        parts.append("<p>")
        for i, sentence in enumerate(paragraph):
            if (n + i) % 7 == 3:
                sentence = sentence.replace("lamp", '<sub alias="lamp">lantern</sub>', 1)
            if (n + i) % 5 == 1:
                sentence = sentence.replace("narrow", "<emphasis>narrow</emphasis>", 1)
            parts.append(f"<s>{sentence}</s>")
        parts.append("</p>")
    return "".join([*parts, "</speak>"])


def ssml(args: argparse.Namespace) -> None:
    from speechd.text import build_g2p

    print("\nssml: the api's check of a document (check_input), at n = 100,000 and 2n")
    print(f"   {'pattern':<20} {'n':>9} {'2n':>9} {'ratio':>6}  answer")
    worst_ratio = worst_ms = 0.0
    for name, make in CHECKS.items():
        small, _ = _check(make(100_000))
        large, answer = _check(make(200_000))
        ratio = large / max(small, 1e-6)
        worst_ratio, worst_ms = max(worst_ratio, ratio), max(worst_ms, large * 1000)
        print(f"   {name:<20} {small * 1000:7.1f}ms {large * 1000:7.1f}ms {ratio:6.2f}  {answer}")
    print(
        f"   worst check {worst_ms:.1f} ms (target <= 100), worst doubling ratio"
        f" {worst_ratio:.2f} (target <= 2.5)"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g2p = build_g2p("a")
    n = args.n
    _plan(g2p, "<speak>Warm up.</speak>", ssml=True)
    print(f"\n   planning SSML to its end (English G2P), at n = {n:,} and 2n")
    print(f"   {'pattern':<20} {'n':>9} {'2n':>9} {'ratio':>6} {'longest step':>13}")
    for name in PLANNED:
        small, step_small = _plan(g2p, CHECKS[name](n), ssml=True)
        large, step_large = _plan(g2p, CHECKS[name](2 * n), ssml=True)
        print(
            f"   {name:<20} {small:8.2f}s {large:8.2f}s {large / small:6.2f}"
            f" {max(step_small, step_large) * 1000:10.1f} ms",
            flush=True,
        )
    sentences = [s.strip() + "." for s in fill(PROSE, 2 * n).split(".") if s.strip()][:-1]
    plain_text = _plain(sentences)
    plain = min(_plan(g2p, plain_text, ssml=False)[0] for _ in range(3))
    document = min(_plan(g2p, _document(sentences), ssml=True)[0] for _ in range(3))
    print(
        f"\n   the same {len(plain_text):,} characters of text: plain {plain:.2f} s, as SSML"
        f" {document:.2f} s: {document / plain:.2f}x (target <= 1.5x)"
    )
