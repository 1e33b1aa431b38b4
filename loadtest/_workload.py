"""The text the benchmarks read: realistic English paragraphs, deterministic, one voice."""

from __future__ import annotations

__all__ = ["SENTENCES", "VOICE", "paragraph"]

VOICE = "af_heart"

SENTENCES = [
    "The old lighthouse keeper climbed the spiral stairs every evening at dusk.",
    "From the top, he could see the fishing boats returning to the harbour, one by one.",
    "Some nights the fog rolled in so thick that the beam seemed to stop a few metres out.",
    "He kept a logbook of every ship that passed, with the hour, the weather and the wind.",
    "In forty years he had missed only two entries, both during the great storm of the winter.",
    "Visitors sometimes asked whether he was lonely, living so far from the village.",
    "He would laugh and point at the gulls, the seals, and the endless grey water.",
    "When the lamp was finally automated, he stayed on, because nobody thought to ask him to go.",
    "Our quarterly results show steady growth in every region, led by the northern markets.",
    "Please remember to submit your expense reports before the end of the month.",
    "The train to the airport leaves from platform four every twenty minutes.",
    "Preheat the oven, then whisk the eggs with the sugar until the mixture turns pale.",
]


def paragraph(sentences: int, start: int) -> str:
    """`sentences` sentences of SENTENCES from `start` on (wrapping around)."""
    return " ".join(SENTENCES[(start + i) % len(SENTENCES)] for i in range(sentences))
