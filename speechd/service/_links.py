"""The links every door hands out, built in one place: a cast's player page, its API and its
live input, each under a base URL (`--public-url`, or what the door knows of its own
address; "" gives the path alone). The HTTP api adds the base it reads from a request and the
headers that name a cast (`speechd.api._links`); the Wyoming door names the player's link in
its `audio-start`."""

from __future__ import annotations

__all__ = ["cast_api_url", "cast_url", "input_url"]


def cast_url(base_url: str, cast_id: str) -> str:
    """A cast's player page."""
    return f"{base_url}/c/{cast_id}"


def cast_api_url(base_url: str, cast_id: str) -> str:
    """A cast's API (`GET` its status; its reads hang below it)."""
    return f"{base_url}/v1/casts/{cast_id}"


def input_url(base_url: str, cast_id: str) -> str:
    """Where a live cast's input is written."""
    return f"{cast_api_url(base_url, cast_id)}/input"
