"""Content-addressed cast ids, keyed by a per-deployment secret.

The same (model, voice, speed, format, stripped text) always gives the same id, so identical
requests share one cast; with a `scope` (`--share-casts per-key`: one API key's callers) only
identical requests of that scope do. The hash is keyed with a secret kept in the store
(`config/secret`, claimed once by whichever process asks first), so nobody can confirm what
text someone else cast by computing ids themselves.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import secrets

import msgspec

from speechd.durable import AppendRecord, SeqMismatch, Store

from ._streams import SECRET

__all__ = ["cast_id", "deployment_secret", "is_cast_id"]

_ID_BYTES = 16
_ID_CHARS = 22  # base64url of 16 bytes, unpadded


async def deployment_secret(store: Store) -> bytes:
    """This deployment's id key: read it, or claim a fresh one if the store has none."""
    batch = await store.read(SECRET, 0, max_records=1)
    if not batch.records:
        # Losing this claim means another process made the secret first: use theirs.
        with contextlib.suppress(SeqMismatch):
            await store.append(SECRET, [AppendRecord(secrets.token_bytes(32))], match_seq_num=0)
        batch = await store.read(SECRET, 0, max_records=1)
    return batch.records[0].body


def cast_id(
    secret: bytes,
    *,
    model: str,
    voice: str,
    speed: float,
    format: str,
    text: str,
    input_format: str = "text",
    normalize: bool = True,
    scope: str = "",
    voices: tuple[str, ...] = (),
) -> str:
    """The id of the cast these inputs make (22 url-safe characters).

    The text counts stripped, but for how much whitespace it starts with (timed words give
    offsets into the text as sent, so two texts that differ there are two casts); how the
    text is read (`input_format`, `normalize`) counts where it is not the default, so ids
    made before those existed stay the same. `scope`: who shares the cast ("" every caller;
    else only callers of that scope, e.g. one API key's: another scope's identical request
    makes a cast of its own), appended only when set, for the same reason. `voices`: the
    voice specs an SSML document's `<voice>` elements resolved to, in order (an alias mapped
    to another voice reads the same document otherwise), appended only when there are any."""
    stripped = text.strip()
    fields: list[object] = [model, voice, round(float(speed), 3), format, stripped]
    reading = [input_format, normalize, len(text) - len(text.lstrip()) if stripped else 0]
    if reading != ["text", True, 0]:
        fields.append(reading)
    if scope:
        fields.append(scope)
    if voices:
        fields.append(["voices", *voices])
    material = msgspec.msgpack.encode(fields)
    digest = hashlib.blake2b(material, key=secret[:64], digest_size=_ID_BYTES).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def is_cast_id(value: str) -> bool:
    """Whether `value` has the shape of a cast id (cheap check before touching the store)."""
    if len(value) != _ID_CHARS:
        return False
    return all(c.isascii() and (c.isalnum() or c in "-_") for c in value)
