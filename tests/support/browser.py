"""Headless Chromium for the player tests (the system's, never a download), and `Player`: a
player page and the snapshots taken of it through `window.speechd.snapshot()` (its state, the
audio clock in cast time, the caption playing, what it has received)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from playwright.async_api import Browser, Page, async_playwright

__all__ = ["ARTIFACTS", "Player", "launch_browser", "open_player"]

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--autoplay-policy=no-user-gesture-required",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


@contextlib.asynccontextmanager
async def launch_browser() -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=ARGS
        )
        try:
            yield browser
        finally:
            await browser.close()


class Player:
    """A player page and the snapshots taken of it."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.snapshots: list[dict[str, Any]] = []
        self.errors: list[str] = []
        page.on("pageerror", lambda error: self.errors.append(str(error)))

    async def snap(self) -> dict[str, Any]:
        snapshot: dict[str, Any] = await self.page.evaluate("window.speechd.snapshot()")
        self.snapshots.append(snapshot)
        return snapshot

    async def watch(self, seconds: float) -> None:
        """Take snapshots for `seconds`."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            await self.snap()
            await asyncio.sleep(0.05)

    async def wait_for(self, what: str, check: Any, within_s: float = 15.0) -> dict[str, Any]:
        deadline = time.monotonic() + within_s
        while True:
            snapshot = await self.snap()
            if check(snapshot):
                return snapshot
            if time.monotonic() > deadline:
                raise AssertionError(f"player never got {what}; last: {snapshot}")
            await asyncio.sleep(0.05)


async def open_player(
    browser: Browser, base_url: str, cast_id: str, *, held: bool = False
) -> Player:
    """The player page of `cast_id`, playing from the first audio (`?start=now`) unless
    `held`: an engine a test paces by hand looks slower than real time to the worker (the
    wait counts as the chunk's compute), so the start hold it states would run for minutes."""
    page = await browser.new_page()
    player = Player(page)
    await page.goto(f"{base_url}/c/{cast_id}" + ("" if held else "?start=now"))
    await page.wait_for_function("window.speechd !== undefined")
    return player
