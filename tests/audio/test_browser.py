"""Chromium's decodeAudioData follows the per-record contract too (headless, system Chromium;
playwright never downloads a browser here)."""

from __future__ import annotations

import base64
import os
import shutil
from collections.abc import Iterator

import numpy as np
import pytest

from speechd.audio import FORMATS, LAYOUTS, SAMPLE_RATE, standalone_record
from tests.audio._support import CHUNKS, decode_records, encode_chunks, speech_like
from tests.support.chromium import CHROMIUM_STEP

pytestmark = pytest.mark.browser

CHROMIUM = os.environ.get("SPEECHD_CHROMIUM") or shutil.which("chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

# Decodes each base64 file in its own OfflineAudioContext at `rate`; returns channel 0 as base64
# float32, or the error's text.
DECODE_JS = """async ({files, rate}) => {
  const out = [];
  for (const b64 of files) {
    const bin = atob(b64);
    const bytes = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    try {
      const buffer = await new OfflineAudioContext(1, 1, rate).decodeAudioData(bytes.buffer);
      const f = buffer.getChannelData(0);
      const raw = new Uint8Array(f.buffer, f.byteOffset, f.byteLength);
      let s = "";
      for (let i = 0; i < raw.length; i += 8192) {
        s += String.fromCharCode.apply(null, raw.subarray(i, i + 8192));
      }
      out.push({ok: true, data: btoa(s)});
    } catch (e) {
      out.push({ok: false, error: String(e)});
    }
  }
  return out;
}"""


class _Chromium:
    def __init__(self, page) -> None:
        self._page = page

    def decode_all(self, files: list[bytes], rate: int) -> list[np.ndarray | str]:
        encoded = [base64.b64encode(f).decode() for f in files]
        results = self._page.evaluate(DECODE_JS, {"files": encoded, "rate": rate})
        return [
            np.frombuffer(base64.b64decode(r["data"]), np.float32) if r["ok"] else r["error"]
            for r in results
        ]

    def decode(self, data: bytes, rate: int) -> np.ndarray:
        (result,) = self.decode_all([data], rate)
        assert not isinstance(result, str), result
        return result


@pytest.fixture(scope="module")
def chromium() -> Iterator[_Chromium]:
    if CHROMIUM is None:
        pytest.skip("no chromium (scripts/test.sh installs it)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
        )
        try:
            yield _Chromium(browser.new_page())
        finally:
            browser.close()


@pytest.fixture(scope="module")
def speech() -> np.ndarray:
    return speech_like(sum(CHUNKS))


@pytest.mark.parametrize("fmt", FORMATS)
def test_records_decoded_alone_in_chromium(
    chromium: _Chromium, speech: np.ndarray, fmt: str
) -> None:
    rate = LAYOUTS[fmt].decode_rate
    records = encode_chunks(fmt, speech)
    whole = chromium.decode(standalone_record(fmt, b"", b"".join(records)).data, rate)
    delay = LAYOUTS[fmt].delay_samples * rate // SAMPLE_RATE
    assert len(whole) >= (len(speech) + delay) * rate // SAMPLE_RATE
    joined = np.concatenate(decode_records(fmt, records, lambda d: chromium.decode(d, rate)))
    assert len(joined) == len(whole)
    if LAYOUTS[fmt].exact:
        assert np.abs(joined - whole).max() <= CHROMIUM_STEP.get(fmt, 0.0)
    else:
        assert np.abs(joined - whole).max() < 2e-3


def test_mp3_single_frames_are_refused_so_records_avoid_them(
    chromium: _Chromium, speech: np.ndarray
) -> None:
    data = b"".join(encode_chunks("mp3", speech))
    one, two = chromium.decode_all([data[192:384], data[192:576]], SAMPLE_RATE)
    assert isinstance(one, str)
    assert len(two) == 2 * 576


def test_the_context_must_run_at_the_decode_rate(chromium: _Chromium, speech: np.ndarray) -> None:
    """decodeAudioData resamples every file on its own: 24 kHz records decoded one by one into a
    48 kHz context no longer join up exactly."""
    records = encode_chunks("wav", speech)
    whole = chromium.decode(b"".join(records), 48000)
    joined = np.concatenate(decode_records("wav", records, lambda d: chromium.decode(d, 48000)))
    assert len(joined) == len(whole)
    assert np.abs(joined - whole).max() > 1e-3
