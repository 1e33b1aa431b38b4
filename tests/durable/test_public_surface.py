"""`speechd.durable`'s public surface is exactly its `__all__` (httpx's test_exported_members);
the names only tests need are `_contract`'s."""

from __future__ import annotations

import types

import speechd.durable as durable
from speechd.durable import _contract

PUBLIC = {
    "MAX_BATCH_BYTES",
    "MAX_BATCH_RECORDS",
    "MAX_BODY_BYTES",
    "MAX_HEADER_BYTES",
    "AppendAck",
    "AppendRecord",
    "DurableError",
    "EmbeddedStore",
    "Limits",
    "ReadBatch",
    "Record",
    "RecordTooLarge",
    "Retention",
    "SeqMismatch",
    "SeqOutOfRange",
    "Spare",
    "Store",
    "StreamInfo",
    "open_store",
    "sweep_forever",
}


def test_all_names_the_public_surface() -> None:
    assert set(durable.__all__) == PUBLIC
    assert len(durable.__all__) == len(PUBLIC)
    assert durable.__all__ == sorted(durable.__all__, key=lambda n: (not n.isupper(), n))


def test_every_exported_name_exists_and_nothing_public_is_left_out() -> None:
    for name in durable.__all__:
        assert hasattr(durable, name), name
    public_members = {
        name
        for name, value in vars(durable).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and name != "annotations"
    }
    assert public_members == PUBLIC


def test_the_errors_form_one_tree() -> None:
    for error in (
        _contract.InvalidStreamName,
        durable.RecordTooLarge,
        durable.SeqMismatch,
        durable.SeqOutOfRange,
        _contract.StoreClosed,
    ):
        assert issubclass(error, durable.DurableError)
    assert issubclass(durable.DurableError, Exception)
    assert issubclass(durable.EmbeddedStore, durable.Store)
