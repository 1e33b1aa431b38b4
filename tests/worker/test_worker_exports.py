from __future__ import annotations

import types

import speechd.worker


def test_all_lists_exactly_the_public_names() -> None:
    public = {name for name in dir(speechd.worker) if not name.startswith("_")}
    modules = {"annotations"}
    assert set(speechd.worker.__all__) == public - modules
    for name in speechd.worker.__all__:
        value = getattr(speechd.worker, name)
        # On 3.10 a generic alias (EncoderFactory, a Callable[...]) passes isinstance(_, type).
        if isinstance(value, type) and not isinstance(value, types.GenericAlias):
            assert value.__module__ == "speechd.worker", name
