"""A deployment's pronunciations (`--lexicon FILE`), applied to the text before G2P.

The file is UTF-8 text, one entry a line; `#` starts a comment line:

    # word or phrase = phonemes (between slashes) or a respelling
    Kokoro = /k\u02c8Ok\u0259\u0279O/     (written with the characters, not escapes)
    nginx = engine x
    SQL = /\u02c8\u025bs kj\u02c8u \u02c8\u025bl/
    Dr. Who = Doctor Who

Phonemes are Kokoro's (misaki's set: `speechd.text._phonemes`); a respelling is plain
words, read as written. **Case rule**: an entry written all in lower case matches the word
in any case (`nginx`: `Nginx`, `NGINX`); one with a capital letter matches only as written
(`US` is not `us`). A phrase matches its words with single spaces between them; punctuation
around a word (`Kokoro,`) stays where it is. Longer phrases win over shorter ones.

Applied to each normalised piece (and to the text as sent under `"normalize": false`): a
phoneme entry becomes misaki's markup `[word](/phonemes/)`, which the G2P reads as given; a
respelling replaces the words. Either way the words spoken map back to the words matched.

`LexiconFile` reloads the file when it changes (its size or modification time, looked at
most once a second, when a plan is opened): a file that no longer parses is logged and the
entries before it stay in force. A change applies to plans opened after it; `digest` names
the entries, so a cast resumed under other entries starts its plan over.

A file rewritten in place (truncated, then written) can be looked at half written, and a cut
at a line's end still parses. So a changed file is read only once it has kept still for
`SETTLE_S` (by its modification time, or since it was first seen unchanged, whichever is
longer), and taken only if its size and time are the same after the read as before; else it
is looked at again on the next check. An empty file is never taken, and one that drops more
than half the entries in force is taken only once it has kept still for `SHRINK_SETTLE_S`:
meanwhile a WARNING says so and the entries before it stay. Writing a new file and renaming
it over the old one (`mv`) changes it at once, whole.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import time
from collections.abc import Callable
from typing import Final, NamedTuple

from ._mapped import Mapped
from ._phonemes import KOKORO_PHONEMES

__all__ = ["Lexicon", "LexiconError", "LexiconFile"]

log = logging.getLogger("speechd.text")

MAX_FILE_BYTES: Final = 8 * 1024 * 1024
SETTLE_S: Final = 1.0
"""How long a changed file must keep still (by its modification time) before it is read."""
SHRINK_SETTLE_S: Final = 60.0
"""How long a file that drops more than half the entries must keep still before it is taken."""
MAX_WORDS: Final = 8  # in a phrase
MAX_KEY_CHARS: Final = 100
MAX_VALUE_CHARS: Final = 200
_LEADING: Final = "\"'([{\u201c\u2018\u00ab\u00bf\u00a1"
_TRAILING: Final = ".,;:!?\"')]}\u201d\u2019\u00bb\u2026"
_TOKEN = re.compile(r"\S+")
_FORBIDDEN = re.compile(r"[\[\]()\n\r\t]")


class LexiconError(ValueError):
    """A lexicon file that does not parse: says the file and line."""


class _Entry(NamedTuple):
    phonemes: str  # "" for a respelling
    respelling: str


class Lexicon:
    """Entries, matched as the module docstring says (`apply`)."""

    def __init__(
        self, entries: dict[tuple[str, ...], _Entry], folded: dict[tuple[str, ...], _Entry]
    ) -> None:
        self._exact = entries
        self._folded = folded
        self._longest = max((len(k) for k in (*entries, *folded)), default=0)
        listing = sorted(f"{' '.join(k)}\t{v}" for k, v in entries.items())
        listing += sorted(f"~{' '.join(k)}\t{v}" for k, v in folded.items())
        self.digest = hashlib.blake2b("\n".join(listing).encode(), digest_size=6).hexdigest()

    def __len__(self) -> int:
        return len(self._exact) + len(self._folded)

    @classmethod
    def parse(cls, text: str, *, name: str = "lexicon") -> Lexicon:
        """Entries from a lexicon file's text; LexiconError naming the line at fault."""
        exact: dict[tuple[str, ...], _Entry] = {}
        folded: dict[tuple[str, ...], _Entry] = {}
        for number, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            key, sep, value = line.partition("=")
            key, value = " ".join(key.split()), value.strip()
            where = f"{name}:{number}"
            if not sep or not key or not value:
                raise LexiconError(f"{where}: write `word or phrase = /phonemes/ or respelling`")
            if len(key) > MAX_KEY_CHARS or len(key.split()) > MAX_WORDS or _FORBIDDEN.search(key):
                raise LexiconError(
                    f"{where}: a key is at most {MAX_WORDS} words and {MAX_KEY_CHARS} "
                    "characters, without brackets"
                )
            entry = _value(value, where)
            words = tuple(key.split(" "))
            (exact if key != key.lower() else folded)[words] = entry
        return cls(exact, folded)

    def apply(self, text: Mapped) -> Mapped:
        """`text` with every entry's words rewritten (see the module docstring)."""
        if not self._longest:
            return text
        tokens = [m.span() for m in _TOKEN.finditer(text.text)]
        raw = text.text
        parts: list[Mapped] = []
        pos = i = 0
        while i < len(tokens):
            found = self._match(raw, tokens, i)
            if found is None:
                i += 1
                continue
            a, b, entry, n = found
            if a > pos:
                parts.append(text[pos:a])
            word = raw[a:b]
            spoken = f"[{word}](/{entry.phonemes}/)" if entry.phonemes else entry.respelling
            parts.append(text.at(spoken, a, b))
            pos = b
            i += n
        if not parts:
            return text
        parts.append(text[pos:])
        return Mapped.concat(parts)

    def _match(
        self, raw: str, tokens: list[tuple[int, int]], i: int
    ) -> tuple[int, int, _Entry, int] | None:
        first = raw[tokens[i][0] : tokens[i][1]]
        if "](" in first or first.startswith("["):
            return None  # the user's own markup
        lead = len(first) - len(first.lstrip(_LEADING))
        for n in range(min(self._longest, len(tokens) - i), 0, -1):
            a = tokens[i][0] + lead
            last_end = tokens[i + n - 1][1]
            words = raw[a:last_end]
            core = words.rstrip(_TRAILING)
            # The core, then with one trailing `.` (an abbreviation's: `Dr.`).
            for b in (a + len(core), a + len(core) + 1):
                if b > last_end or b <= a:
                    continue
                key = tuple(raw[a:b].split(" "))
                if len(key) != n or (b == a + len(core) + 1 and raw[b - 1] != "."):
                    continue
                entry = self._exact.get(key) or self._folded.get(tuple(w.lower() for w in key))
                if entry is not None:
                    return a, b, entry, n
        return None


def _value(value: str, where: str) -> _Entry:
    if len(value) > MAX_VALUE_CHARS + 2:
        raise LexiconError(f"{where}: a pronunciation is at most {MAX_VALUE_CHARS} characters")
    if value.startswith("/"):
        phonemes = value.strip("/").strip()
        bad = next((c for c in phonemes if c not in KOKORO_PHONEMES), None)
        if not value.endswith("/") or not phonemes or "/" in phonemes or bad is not None:
            what = f": Kokoro cannot say {bad!r} (U+{ord(bad):04X})" if bad else ""
            raise LexiconError(f"{where}: phonemes go between slashes{what}")
        return _Entry(phonemes, "")
    if _FORBIDDEN.search(value) or "/" in value:
        raise LexiconError(f"{where}: a respelling is plain words (phonemes go in /slashes/)")
    return _Entry("", value)


class LexiconFile:
    """A lexicon file, reloaded when it changes (see the module docstring)."""

    def __init__(
        self,
        path: str,
        *,
        check_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.path = path
        self._check_s = check_s
        self._clock = clock
        self._wall = wall
        self._checked = clock()
        self._stamp = self._stat()
        self._lexicon = self._load()  # LexiconError, OSError: the caller's to report
        self._shrunk: tuple[tuple[int, int], Lexicon] | None = None  # read, not taken yet
        self._seen: tuple[tuple[int, int], float] | None = None  # a stamp, first seen when

    def _stat(self) -> tuple[int, int]:
        st = os.stat(self.path)
        return st.st_mtime_ns, st.st_size

    def _load(self) -> Lexicon:
        if os.path.getsize(self.path) > MAX_FILE_BYTES:
            raise LexiconError(f"{self.path}: over {MAX_FILE_BYTES // (1024 * 1024)} MiB")
        with open(self.path, encoding="utf-8") as f:
            return Lexicon.parse(f.read(), name=self.path)

    def current(self) -> Lexicon:
        """The entries in force (the file looked at again when `check_s` has passed)."""
        now = self._clock()
        if now - self._checked < self._check_s:
            return self._lexicon
        self._checked = now
        try:
            stamp = self._stat()
        except OSError as exc:
            log.warning("lexicon %s: %s; keeping its last entries", self.path, exc)
            return self._lexicon
        if stamp != self._stamp:
            self._reload(stamp, now)
        return self._lexicon

    def _reload(self, stamp: tuple[int, int], now: float) -> None:
        """Take the file changed to `stamp` if it is whole and kept still (module docstring);
        else leave `_stamp` as it was, so the next check looks again."""
        if self._seen is None or self._seen[0] != stamp:
            self._seen = (stamp, now)
        # Still since its modification time, or since it was first seen so here (a file
        # stamped by a clock ahead of this one's would wait for that clock otherwise).
        still_s = max(self._wall() - stamp[0] / 1e9, now - self._seen[1])
        if still_s < SETTLE_S:
            return  # being written, perhaps: look again later
        if self._shrunk is not None and self._shrunk[0] == stamp:
            lexicon = self._shrunk[1]  # read already: taken once it has kept still long enough
        else:
            try:
                lexicon = self._load()
                if self._stat() != stamp:
                    return  # it changed while it was read
            except (OSError, UnicodeDecodeError, LexiconError) as exc:
                self._stamp = stamp  # broken as it is: said once, looked at when it changes
                log.warning(
                    "lexicon %s not reloaded (%s); keeping its last entries", self.path, exc
                )
                return
            if stamp[1] == 0 and len(self._lexicon):
                self._stamp = stamp
                log.warning(
                    "lexicon %s not reloaded: it is empty; keeping its %d entries (write a "
                    "comment line to clear it)",
                    self.path,
                    len(self._lexicon),
                )
                return
            if len(lexicon) * 2 < len(self._lexicon):
                self._shrunk = (stamp, lexicon)
                log.warning(
                    "lexicon %s not reloaded yet: it has %d entries; keeping its %d until it "
                    "keeps still for %g s",
                    self.path,
                    len(lexicon),
                    len(self._lexicon),
                    SHRINK_SETTLE_S,
                )
        if len(lexicon) * 2 < len(self._lexicon) and still_s < SHRINK_SETTLE_S:
            return
        self._stamp, self._lexicon, self._shrunk, self._seen = stamp, lexicon, None, None
        log.info("lexicon %s reloaded: %d entries", self.path, len(lexicon))
