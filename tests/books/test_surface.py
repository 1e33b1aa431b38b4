"""The books package's public surface, and the promise that reading a book loads no model."""

from __future__ import annotations

import subprocess
import sys
import types

import speechd.books as books


def test_all_lists_exactly_the_public_names() -> None:
    public = {
        name
        for name, value in vars(books).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and name != "annotations"
    }
    assert set(books.__all__) == public == {"Book", "BookLimits", "read_book"}


def test_reading_a_book_loads_no_torch_or_g2p() -> None:
    code = (
        "import sys\n"
        "from speechd.books import read_book\n"
        "from tests.books._epubs import epub3\n"
        "assert len(read_book(epub3(), 'epub').chapters) == 3\n"
        "heavy = [m for m in ('torch', 'kokoro', 'misaki', 'spacy') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
