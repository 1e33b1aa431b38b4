"""Names of the streams speechd keeps (`docs/design/index.md#the-contract-streams-and-records`).
Only `pub/casts/*` is public."""

from __future__ import annotations

__all__ = [
    "BOOKS_PREFIX",
    "CAST_PREFIX",
    "CATALOG_PREFIX",
    "INPUT_PREFIX",
    "JOBS",
    "JOBS_CURSOR",
    "JOBS_DEAD",
    "KNOWN_VOICES",
    "LEASES_PREFIX",
    "PROGRESS_DONE",
    "SECRET",
    "WORKERS_PREFIX",
    "book_stream",
    "cast_stream",
    "catalog_stream",
    "input_stream",
    "lease_stream",
    "worker_stream",
]

JOBS = "jobs"
JOBS_CURSOR = "jobs/_cursor"
JOBS_DEAD = "jobs/dead"
PROGRESS_DONE = "progress/done"
SECRET = "config/secret"
KNOWN_VOICES = "config/voices"
"""The voices the last worker to get ready had (its `ready` notice again), so the api can list
voices while no worker is ready; appended only when the set changes."""
CATALOG_PREFIX = "catalog/"
CAST_PREFIX = "pub/casts/"
LEASES_PREFIX = "leases/"
INPUT_PREFIX = "input/"
WORKERS_PREFIX = "workers/"
BOOKS_PREFIX = "books/"


def catalog_stream(cast_id: str) -> str:
    """The private recipe of a cast: its text, voice, speed, format."""
    return CATALOG_PREFIX + cast_id


def cast_stream(cast_id: str) -> str:
    """The public stream of a cast: meta, start, audio..., eos."""
    return CAST_PREFIX + cast_id


def worker_stream(worker_id: str) -> str:
    """A worker's announcements: ready (with its voices), heartbeats, stopped."""
    return WORKERS_PREFIX + worker_id


def lease_stream(cast_id: str) -> str:
    """Renewals of the lease a worker holds on a cast while it makes it (private)."""
    return LEASES_PREFIX + cast_id


def input_stream(cast_id: str) -> str:
    """A live cast's text as it arrives, then its closing record (private: only the api
    writes it and only the worker reads it)."""
    return INPUT_PREFIX + cast_id


def book_stream(book_id: str) -> str:
    """A book's private stream: its recipe, cover and events (see `_books`)."""
    return BOOKS_PREFIX + book_id
