from __future__ import annotations

import speechd.worker


def test_all_lists_exactly_the_public_names() -> None:
    public = {name for name in dir(speechd.worker) if not name.startswith("_")}
    modules = {"annotations"}
    assert set(speechd.worker.__all__) == public - modules
    for name in speechd.worker.__all__:
        value = getattr(speechd.worker, name)
        if isinstance(value, type):
            assert value.__module__ == "speechd.worker", name
