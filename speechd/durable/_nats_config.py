"""The NATS backend's settings: the store URL, and what the server says of how it syncs."""

from __future__ import annotations

import logging
import re
from typing import TypeVar
from urllib.parse import parse_qs

from ._contract import DurableError

__all__ = ["NAMESPACE", "number", "parse_url", "report_sync"]

log = logging.getLogger("speechd.durable")

T = TypeVar("T")

NAMESPACE = re.compile(r"[A-Za-z0-9_-]{1,64}")


def parse_url(url: str) -> tuple[list[str], dict[str, str]]:
    scheme, _, rest = url.partition("://")
    hosts, _, query = rest.partition("?")
    hosts = hosts.rstrip("/")
    if not hosts or "/" in hosts:
        raise DurableError(f"malformed NATS store URL {url!r}")
    servers = [f"{scheme}://{host}" for host in hosts.split(",") if host]
    params = {key: values[-1] for key, values in parse_qs(query).items()}
    unknown = set(params) - {"namespace", "shards", "replicas", "timeout", "retry"}
    if unknown:
        raise DurableError(f"unknown NATS store URL parameters: {', '.join(sorted(unknown))}")
    return servers, params


def number(params: dict[str, str], key: str, kind: type[T], default: T) -> T:
    if key not in params:
        return default
    try:
        value = kind(params[key])  # type: ignore[call-arg]
    except ValueError as exc:
        raise DurableError(f"NATS store URL: {key}={params[key]!r} is not a number") from exc
    if value <= 0:  # type: ignore[operator]
        raise DurableError(f"NATS store URL: {key} must be positive")
    return value


def report_sync(varz: dict[str, object] | None) -> None:
    """The log line that says how the server makes appends durable."""
    jetstream = varz.get("jetstream") if varz else None
    config = jetstream.get("config") if isinstance(jetstream, dict) else None
    if not isinstance(config, dict):
        log.info(
            "store: the NATS server does not say how JetStream syncs to disk; recommended:"
            " `jetstream { sync_interval: always }` (docs: scale-out.md)"
        )
        return
    if config.get("sync_always"):
        log.info("store: NATS JetStream syncs every write to disk (sync_interval: always)")
        return
    interval = config.get("sync_interval")
    every = f"{int(interval) / 1e9:g} s" if isinstance(interval, int) else "interval"
    log.warning(
        "store: NATS JetStream syncs to disk every %s, so a power cut can lose appends it"
        " acknowledged; recommended: `jetstream { sync_interval: always }`",
        every,
    )
