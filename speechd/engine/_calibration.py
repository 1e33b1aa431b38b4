"""The fixed speech a reduced-precision graph is calibrated and checked on (`_quantise`),
shipped with speechd so that every build of a variant sees the same input.

Each line is English text and its phonemes as speechd's G2P (misaki, American English) read
it, kept here as phonemes so that building a variant needs no G2P. The texts vary what a
decoder meets: statements, questions, exclamations, a whisper, numbers read out, one word,
long and short sentences. `CALIBRATE` sets the ranges of the int8 convolutions' inputs and
outputs; `CHECK`, other sentences with other voices, is what a variant's audio is measured on
against the float graph before it is kept. Voices are taken from `VOICES` in turn, among
those the model folder has (its first voices otherwise), so several speakers' ranges count.
"""

from __future__ import annotations

from typing import Final, NamedTuple

__all__ = ["CALIBRATE", "CHECK", "VOICES", "Line"]


class Line(NamedTuple):
    text: str
    phonemes: str


#: Voices to calibrate with, in turn (those the model folder has).
VOICES: Final = ("af_heart", "am_adam", "bf_emma", "am_michael", "af_bella", "bm_george")

# ruff: noqa: RUF001  (phonemes: IPA letters that look like Latin ones)
CALIBRATE: Final = (
    Line(
        "The old lighthouse keeper climbed the narrow stairs every evening, just before the "
        "sun slipped below the hills.",
        "ði ˈOld lˈIthˌWs kˈipəɹ klˈImd ðə nˈɛɹO stˈɛɹz ˈɛvəɹi ˈivnɪŋ, ʤˈʌst bəfˈɔɹ ðə sˈʌn "
        "slˈɪpt bəlˈO ðə hˈɪlz.",
    ),
    Line(
        "Is it possible that the answer was in front of us the whole time?",
        "ˌɪz ɪt pˈɑsəbᵊl ðæt ði ˈænsəɹ wʌz ɪn fɹˈʌnt ʌv ˌʌs ðə hˈOl tˈIm?",
    ),
    Line("Watch out! The kettle is boiling over!", "wˈɑʧ ˈWt! ðə kˈɛTᵊl ɪz bˈYlɪŋ ˈOvəɹ!"),
    Line(
        "On March third, the council approved a budget of four point two million dollars for "
        "the new library.",
        "ˌɔn mˈɑɹʧ θˈɜɹd, ðə kˈWnsᵊl əpɹˈuvd ɐ bˈʌʤət ʌv fˈɔɹ pˈYnt tˈu mˈɪljᵊn dˈɑləɹz fɔɹ "
        "ðə nˈu lˈIbɹˌɛɹi.",
    ),
    Line(
        "She whispered, very softly, that everything would be all right in the morning.",
        "ʃˌi wˈɪspəɹd, vˈɛɹi sˈɔftli, ðæt ˈɛvəɹiθˌɪŋ wʊd bi ˈɔl ɹˈIt ɪn ðə mˈɔɹnɪŋ.",
    ),
    Line(
        "Quantum computers could one day solve problems that would take today's machines "
        "thousands of years.",
        "kwˈɑntəm kəmpjˈuTəɹz kʊd wˈʌn dˈA sˈɑlv pɹˈɑbləmz ðæt wʊd tˈAk tədˈAz məʃˈinz "
        "θˈWzᵊndz ʌv jˈɪɹz.",
    ),
    Line("Hello.", "həlˈO."),
    Line(
        "We left at a quarter to seven, drove along the coast, and reached the harbour before "
        "noon.",
        "wˌi lˈɛft æt ɐ kwˈɔɹTəɹ tə sˈɛvən, dɹˈOv əlˈɔŋ ðə kˈOst, ænd ɹˈiʧt ðə hˈɑɹbəɹ bəfˈɔɹ "
        "nˈun.",
    ),
    Line(
        "Thank you so much for coming; it really means a lot to all of us.",
        "θˈæŋk ju sˌO mˈʌʧ fɔɹ kˈʌmɪŋ; ɪt ɹˈiᵊli mˈinz ɐ lˈɑt tʊ ˈɔl ʌv ˌʌs.",
    ),
    Line(
        "Yes, absolutely, let's do it right now!",
        "jˈɛs, ˈæbsəlˌutli, lˈɛts dˈu ɪt ɹˈIt nˈW!",
    ),
)

CHECK: Final = (
    Line(
        "Rain fell steadily all afternoon, and the children watched it from the kitchen window.",
        "ɹˈAn fˈɛl stˈɛdəli ˈɔl ˌæftəɹnˈun, ænd ðə ʧˈɪldɹᵊn wˈɑʧt ɪt fɹʌm ðə kˈɪʧᵊn wˈɪndO.",
    ),
    Line(
        "The recipe calls for two cups of flour, three eggs, and a pinch of salt, mixed until "
        "smooth.",
        "ðə ɹˈɛsəpˌi kˈɔlz fɔɹ tˈu kˈʌps ʌv flˈWəɹ, θɹˈi ˈɛɡz, ænd ɐ pˈɪnʧ ʌv sˈɔlt, mˈɪkst "
        "ˌʌntˈɪl smˈuð.",
    ),
    Line(
        "Nobody knew why the old clock in the hall had stopped at exactly a quarter past three.",
        "nˈObˌɑdi nˈu wˌI ði ˈOld klˈɑk ɪn ðə hˈɔl hæd stˈɑpt æt ɪɡzˈæktli ɐ kwˈɔɹTəɹ pˈæst θɹˈi.",
    ),
)
