"""Phonemes users give (SSML `<phoneme alphabet="ipa">`, inline `[word](/phonemes/)`, the
lexicon), checked against what Kokoro can say.

Kokoro-82M reads misaki's phoneme set, which is IPA with a few letters of its own: English
diphthongs are single letters (`A` e\u026a, `I` a\u026a, `W` aʊ, `Y` ɔɪ, `O` oʊ American, `Q` əʊ
British), the affricates are `ʤ` and `ʧ`, `ᵊ` is a reduced schwa and `T` the American flap.
`ipa_to_kokoro` rewrites ordinary IPA into that set (for English: the diphthongs, affricates,
r-coloured vowels and `r`, `g`; for every language: tie bars, `g`); `unsayable` names the
first phone left that the model's vocabulary lacks, which the api answers with a 400 rather
than letting the model drop it silently.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["KOKORO_PHONEMES", "ipa_to_kokoro", "unsayable"]

#: Kokoro-82M v1.0's vocabulary (config.json `vocab`), its punctuation included.
KOKORO_PHONEMES: Final = frozenset(
    " !\"(),.:;?AIOQSTWYabcdefhijklmnopqrstuvwxyzæçðøŋœɐɑɒɔɕɖəɚɛɜɟɡɣɤɥɨɪɯɰɲɳɴɸɹɻɽɾʁʂʃʈʊʋʌʎ"  # noqa: RUF001
    "ʒʔʝʣʤʥʦʧʨʰʲˈˌː̃βθχᵊᵝᵻ—“”…→↓↗↘ꭧ"
)

#: Marks that say nothing to Kokoro (tie bars, syllabic and non-release marks).
_DROPPED = re.compile("[\u0361\u035c\u0329\u031a\u02de]")
_EVERY: Final = (("g", "\u0261"), ("'", "\u02c8"), (",", "\u02cc"))
#: English IPA -> misaki's letters, longest first.
_ENGLISH: Final = (
    ("d\u0292", "\u02a4"), ("t\u0283", "\u02a7"), ("e\u026a", "A"), ("a\u026a", "I"),
    ("a\u028a", "W"), ("\u0254\u026a", "Y"), ("o\u028a", "O"), ("\u0259\u028a", "Q"),
    ("\u025a", "\u0259\u0279"), ("\u025d", "\u025c\u0279"), ("r", "\u0279"), ("\u026b", "l"),
    ("\u0250", "\u0259"), ("e", "\u025b"), ("o", "O"),
)  # fmt: skip
_ENGLISH_RE = re.compile("|".join(re.escape(a) for a, _ in _ENGLISH))
_ENGLISH_MAP: Final = dict(_ENGLISH)


def ipa_to_kokoro(ipa: str, lang: str) -> str:
    """IPA in Kokoro's phoneme set for language `lang` (a voice's letter); spaces kept."""
    text = _DROPPED.sub("", " ".join(ipa.split()))
    for a, b in _EVERY:
        text = text.replace(a, b)
    if lang in ("a", "b"):
        text = _ENGLISH_RE.sub(lambda m: _ENGLISH_MAP[m.group(0)], text)
        if lang == "b":
            text = text.replace("O", "Q")
    return text


def unsayable(phonemes: str) -> str | None:
    """The first character of `phonemes` Kokoro cannot say, or None."""
    for c in phonemes:
        if c not in KOKORO_PHONEMES:
            return c
    return None
