"""speechd's settings: one msgspec Struct, built from command-line flags over `SPEECHD_*` env.

Every field can be set by a flag (`--max-queue 32`) or by an environment variable named after
it (`SPEECHD_MAX_QUEUE=32`); a flag wins over the environment, the environment over the
default. `SPEECHD_API_KEY`, `SPEECHD_ALLOWED_ORIGIN` and `SPEECHD_ALLOWED_HOST` hold one value
or several separated by commas. Durations (`--retention`, `--shutdown-timeout`,
`--idle-unload`) take seconds or a number with a unit: `90s`, `15m`, `12h`, `30d`; sizes
(`--max-device-memory`) bytes or a number with a binary unit: `512M`, `2G`.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal, TypeVar
from urllib.parse import urlsplit

import msgspec
from msgspec import Meta

from speechd.engine import EngineConfig, parse_device, parse_size
from speechd.limits import MAX_VOICE_CHARS, StreamSlots
from speechd.text import LexiconError, LexiconFile

if TYPE_CHECKING:
    from speechd.worker import WorkerConfig

__all__ = [
    "ENV_PREFIX",
    "PRIVATE_NETWORKS",
    "WORKER_KNOBS",
    "Settings",
    "SettingsError",
    "default_data_dir",
    "load_settings",
    "parse_duration",
    "parse_networks",
]

ENV_PREFIX = "SPEECHD_"

WORKER_KNOBS: Final = MappingProxyType(
    {
        "policy": "policy",
        "quantum": "quantum_s",
        "receipts": "receipts",
        "max_active": "max_active",
        "comfortable_lead": "comfortable_lead_s",
    }
)
"""The settings that are the worker's own knobs, each with the `WorkerConfig` field it sets: one
left None (not given) keeps `WorkerConfig`'s default, the one place each default lives (the
flags page reads it from there too)."""

C = TypeVar("C")

Port = Annotated[int, Meta(ge=0, le=65535)]
PositiveInt = Annotated[int, Meta(ge=1)]
Seconds = Annotated[float, Meta(gt=0)]
PerSecond = Annotated[float, Meta(gt=0)]


def default_data_dir(environ: Mapping[str, str] | None = None) -> str:
    """`$XDG_DATA_HOME/speechd`, else `~/.local/share/speechd`."""
    environ = os.environ if environ is None else environ
    base = environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return str(Path(base) / "speechd")


class Settings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Everything `speechd serve`, `speechd api`, `speechd worker` and `speechd wyoming` are
    configured with."""

    # Where things live.
    data_dir: str = msgspec.field(default_factory=default_data_dir)
    store: str | None = None
    """Store URL: a folder path (the embedded store) or `nats://host:port`; default data_dir."""
    # The api.
    host: str = "127.0.0.1"
    port: Port = 8000
    api_keys: tuple[str, ...] = ()
    """Bearer keys that `POST /v1/audio/speech` and `POST /v1/casts` need; none = open."""
    max_queue: PositiveInt = 64
    """Jobs waiting or running before new casts are refused with 429."""
    max_body_bytes: PositiveInt = 1024 * 1024
    """Request body limit; `POST /v1/casts` has its own, sized for its 200,000 characters."""
    retention: Seconds | None = None
    """Seconds after which casts nobody appended to are removed; None keeps them."""
    public_url: str | None = None
    """Base URL for cast links (`X-Cast-Url`), e.g. behind a proxy; default the request's."""
    allowed_origins: tuple[str, ...] = ()
    """Web origins (`https://app.example`) whose pages may send this server requests from a
    browser: POSTs, live-cast WebSockets, and CORS for them. None given: only the server's own
    pages (its own origin, and `public_url`'s); `*`: any page."""
    allowed_hosts: tuple[str, ...] = ()
    """Names (`speech.lan`) a browser page may reach this server by besides those it answers
    to by itself: an IP address, `localhost`, this machine's name (and `<name>.local`),
    `host` and `public_url`'s host; `*`: any name. A page that reaches it by another name has
    its POSTs and live-cast WebSockets refused (DNS rebinding)."""
    share_casts: Literal["all", "per-key"] = "all"
    """Who shares a cast made from the same request: "all" (one cast per text, voice, speed
    and format for every caller) or "per-key" (casts are shared only between callers of one
    API key)."""
    shutdown_timeout: Seconds = 30.0
    """On SIGTERM/SIGINT, how long in-flight responses may run before they are cut."""
    log_level: Literal["critical", "error", "warning", "info", "debug"] = "info"
    start: Literal["smooth", "now"] = "smooth"
    """When a streamed speech response starts: "smooth" holds its audio back as long as the
    worker says its cast needs to play through without a stall (0 where the device keeps up);
    "now" sends the first audio at once. A request's `start` overrides it."""
    live_idle_timeout: Seconds = 60.0
    """Seconds a live cast's input may stay idle before it is closed as if `done` had come
    (each live cast keeps the value it was made with)."""
    # The public read path (cast status, records, events, audio and the player page).
    read_rate: PerSecond = 20.0
    """Public reads each client may make per second, after a burst of `read_burst`; 429 above."""
    read_burst: PositiveInt = 60
    client_header: str | None = None
    """Header trusted reverse proxies append the client's address to (`x-forwarded-for`, or
    `forwarded`); per-client limits count by the entry `trusted_proxies` from its right end,
    the one the outermost trusted proxy wrote. None: the connection's peer address."""
    trusted_proxies: PositiveInt = 1
    """How many reverse proxies in front of speechd append to `client_header`."""
    # Long-lived reads: SSE, long-polls, live audio, speech requests that wait, live-cast
    # WebSockets and Wyoming connections.
    max_streams: PositiveInt = 512
    """Long-lived reads the api holds at once; past it new ones get 503 with `Retry-After`."""
    max_client_streams: PositiveInt = 64
    """Long-lived reads one client may hold at once; past it 429 with `Retry-After`."""
    # The worker (and the voice names the api accepts).
    model_dir: str | None = None
    device: str = "auto"
    """`auto` (a CUDA device if there is one, else the CPU), `cpu`, `cuda` or `cuda:N`
    (`load_settings` checks and normalises it; `EngineConfig` checks it again)."""
    threads: PositiveInt | None = None
    engine: Literal["auto", "torch", "onnx"] = "auto"
    """The runtime: torch, ONNX Runtime, or auto (ONNX Runtime when installed and usable)."""
    onnx_model: str | None = None
    """An existing Kokoro ONNX export to run instead of exporting the model folder's weights."""
    cache_dir: str | None = None
    """Where ONNX exports go when the model folder is read-only (default ~/.cache/speechd)."""
    graph: Literal["auto", "float", "fused", "int8"] = "auto"
    """The decoder (`speechd.engine.EngineConfig.graph`): float, fused, int8 (ONNX Runtime on a
    CPU), or auto (ONNX Runtime's fastest within its quality bound, measured once per
    machine; torch's fused)."""
    lexicon: str | None = None
    """A pronunciation lexicon file (word or phrase = /phonemes/ or a respelling), applied to
    every text before G2P and reloaded when it changes (`speechd.text.LexiconFile`)."""
    # The worker's own knobs: None leaves `WorkerConfig`'s default, the one place each lives
    # (`Settings.worker_config` maps these to it).
    policy: Literal["deadline", "fifo"] | None = None
    """The worker's scheduler: "deadline" (speechd's), or "fifo", the baseline it is measured
    against (loadtest)."""
    receipts: PositiveInt | None = None
    """How many of the latest receipts (one per finished cast) `progress/done` keeps; the
    worker trims older ones. The api's metrics count the receipts they see, and its start
    estimates read the last few dozen."""
    max_active: PositiveInt | None = None
    """The most casts the worker makes at once, a hard cap on top of what its measured capacity
    admits; also how many of the first jobs in line may have their first chunk made ahead of
    their turn (`start: now`). None: capacity alone, and 4 ahead."""
    quantum: Seconds | None = None
    """The longest one chunk may take to synthesize (it cannot be interrupted, so it bounds
    how long a newcomer waits for the device); on a GPU the chunk length caps bind first."""
    comfortable_lead: Seconds | None = None
    """How far ahead of every listener the worker gets before it sleeps rather than racing a
    cast to its end (a cast nobody plays yet counts as played from its first audio): larger
    makes a long cast fetched whole come sooner, at the price of the device's idle time."""
    # Home Assistant's door (`speechd.wyoming`): off unless a URI is given.
    wyoming_uri: str | None = None
    """Where the Wyoming server listens: `tcp://host:port` or `unix:///path`; None: no
    Wyoming server (`speechd serve`, `speechd wyoming`)."""
    wyoming_zeroconf: str | None = None
    """Advertise the Wyoming server as `_wyoming._tcp.local.` under this name (mDNS, so Home
    Assistant finds it by itself); "" names it after the host; None: no advertising."""
    wyoming_allow: str = "private"
    """Who may connect to the Wyoming server over TCP (it has no authentication): addresses
    and networks (`192.168.1.0/24`, `10.8.0.7`), comma-separated, and the words `private`
    (loopback, the private IPv4 ranges, IPv6 unique local and link-local addresses: a home
    network) and `any`. A unix socket is the file's permissions' to guard."""
    wyoming_queue_share: Annotated[float, Meta(gt=0, le=1)] = 0.5
    """The share of `max_queue` Wyoming's requests may fill: one is refused (`queue_full`)
    while the queue holds that many casts (at least 1), so the HTTP api keeps the rest."""
    idle_unload: Seconds | None = None
    """Seconds with nothing to make after which the worker gives its model and device memory
    back (the next cast takes them again, waiting for the load); None keeps it loaded."""
    max_batch: Annotated[int, Meta(ge=1)] | None = None
    """The most chunks (of different casts) the worker renders in one forward pass; None is
    `auto`: measured at warm-up, the largest batch size that saves at least 10% per item (1 on
    a CPU). With N, batches still form only where the measured costs say they save time."""
    max_device_memory: Annotated[int, Meta(ge=1)] | None = None
    """Bytes the worker may hold on its device (`2G`, `512M`); chunks are planned within it,
    and torch's allocator (or ONNX Runtime's CUDA arena) is held to it. None: no cap."""
    default_voice: Annotated[str, Meta(min_length=1, max_length=MAX_VOICE_CHARS)] = "af_heart"
    voice_map: dict[str, str] = {}
    """Voice aliases (name -> voice spec) added to, or replacing, the engine's OpenAI names."""

    @property
    def store_url(self) -> str:
        return self.store or self.data_dir

    # -- the parts' own configurations: each mapped from the settings here, and only here --

    def sub_config(self, kind: type[C], /, **given: object) -> C:
        """A `kind` (a part's knobs, a msgspec Struct) from these settings: each of its fields
        that is a setting too takes the setting's value, `given` names the others; a None (a
        setting not given) keeps `kind`'s default, the one place each default lives."""
        fields: tuple[str, ...] = kind.__struct_fields__  # type: ignore[attr-defined]
        values = {name: getattr(self, name) for name in fields if name in self.__struct_fields__}
        values.update(given)
        return kind(**{name: value for name, value in values.items() if value is not None})

    def engine_config(self) -> EngineConfig:
        """The engine's configuration: the worker loads the model with it, and the api
        resolves voice names with the same default voice and aliases (the engine's OpenAI
        names with `voice_map` over them)."""
        aliases = {**EngineConfig().voice_map, **self.voice_map}
        return self.sub_config(EngineConfig, voice_map=aliases)

    def worker_config(self) -> WorkerConfig:
        """The worker's configuration (its own knobs: `WORKER_KNOBS`)."""
        from speechd.worker import WorkerConfig  # only a process that runs a worker asks

        knobs = {field: getattr(self, name) for name, field in WORKER_KNOBS.items()}
        return self.sub_config(
            WorkerConfig,
            store=self.store_url,
            engine=self.engine_config(),
            idle_unload_s=self.idle_unload,
            **knobs,
        )

    def stream_slots(self) -> StreamSlots:
        """The long-lived reads' caps (`max_streams`, `max_client_streams`), for one server:
        every door it runs counts in them."""
        return StreamSlots(self.max_streams, self.max_client_streams)


class SettingsError(ValueError):
    """A flag or `SPEECHD_*` variable has a value speechd cannot use."""


_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([smhd]?)\s*", re.IGNORECASE)


def parse_duration(value: str | float) -> float:
    """Seconds from `90`, `90s`, `15m`, `12h` or `30d`."""
    if isinstance(value, int | float):
        return float(value)
    match = _DURATION.fullmatch(value)
    if match is None:
        raise SettingsError(f"{value!r} is not a duration (try 90s, 15m, 12h or 30d)")
    return float(match.group(1)) * _UNITS[match.group(2).lower()]


_ENV_NAMES = {
    "api_keys": "API_KEY",
    "allowed_origins": "ALLOWED_ORIGIN",
    "allowed_hosts": "ALLOWED_HOST",
}
_FLAG_NAMES = {
    "api_keys": "api-key",
    "allowed_origins": "allowed-origin",
    "allowed_hosts": "allowed-host",
}
_LISTS = ("api_keys", "allowed_origins", "allowed_hosts")  # comma-separated in the environment
_ORIGIN = re.compile(r"[a-z][a-z0-9+.-]{0,31}://[^/\s?#]{1,255}")
_HOST_NAME = re.compile(r"[a-z0-9_-]{1,63}(?:\.[a-z0-9_-]{1,63}){0,15}")
_DURATIONS = ("retention", "shutdown_timeout", "live_idle_timeout", "idle_unload")


def _from_env(environ: Mapping[str, str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for field in msgspec.structs.fields(Settings):
        name = ENV_PREFIX + _ENV_NAMES.get(field.name, field.name.upper())
        raw = environ.get(name)
        if raw is None or raw == "":
            continue
        if field.name in _LISTS:
            values[field.name] = tuple(k.strip() for k in raw.split(",") if k.strip())
        elif field.name == "voice_map":
            values[field.name] = dict(pair.split("=", 1) for pair in raw.split(",") if "=" in pair)
        else:
            values[field.name] = raw
    return values


def load_settings(
    flags: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None
) -> Settings:
    """Settings from `flags` (None values = not given) over `environ` over the defaults."""
    environ = os.environ if environ is None else environ
    values = _from_env(environ)
    if "data_dir" not in values:
        values["data_dir"] = default_data_dir(environ)
    values.update({k: v for k, v in (flags or {}).items() if v is not None})
    for name in _DURATIONS:
        if name in values:
            values[name] = parse_duration(values[name])
    if values.get("allowed_origins"):
        values["allowed_origins"] = tuple(map(_origin, values["allowed_origins"]))
    if values.get("allowed_hosts"):
        values["allowed_hosts"] = tuple(map(_host_name, values["allowed_hosts"]))
    if values.get("max_device_memory") is not None:
        try:
            values["max_device_memory"] = parse_size(values["max_device_memory"])
        except ValueError as exc:
            raise SettingsError(
                f"--max-device-memory / {ENV_PREFIX}MAX_DEVICE_MEMORY: {exc}"
            ) from exc
    if "max_batch" in values:
        values["max_batch"] = _max_batch(values["max_batch"])
    if isinstance(values.get("device"), str):
        try:
            values["device"] = parse_device(values["device"])
        except ValueError as exc:
            raise SettingsError(f"--device / {ENV_PREFIX}DEVICE: {exc}") from exc
    uri = values.get("wyoming_uri")
    if isinstance(uri, str):
        problem = _wyoming_uri_problem(uri)
        if problem is not None:
            raise SettingsError(f"--wyoming-uri / {ENV_PREFIX}WYOMING_URI: {problem}")
    name = values.get("wyoming_zeroconf")
    if isinstance(name, str) and (
        len(name.encode("utf-8", "surrogatepass")) > 63 or not name.isprintable()
    ):
        raise SettingsError(
            f"--wyoming-zeroconf / {ENV_PREFIX}WYOMING_ZEROCONF: a name is at most 63 bytes"
            " (UTF-8) of printable characters"
        )
    if isinstance(values.get("wyoming_allow"), str):
        parse_networks(values["wyoming_allow"])
    if values.get("lexicon"):
        try:  # read now, so a broken file stops the start with its line, not a worker
            LexiconFile(str(values["lexicon"]))
        except (OSError, UnicodeDecodeError, LexiconError) as exc:
            raise SettingsError(f"--lexicon / {ENV_PREFIX}LEXICON: {exc}") from exc
    try:
        return msgspec.convert(values, Settings, strict=False)
    except msgspec.ValidationError as exc:
        raise SettingsError(_describe(exc)) from exc


def _max_batch(value: object) -> int | None:
    """`auto` (None) or a batch size of 1 or more."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        return None
    try:
        size = int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        size = 0
    if size < 1:
        raise SettingsError(
            f"--max-batch / {ENV_PREFIX}MAX_BATCH: {value!r} is not auto or a size of 1 or more"
        )
    return size


def _origin(value: str) -> str:
    """An allowed origin as browsers send it (`scheme://host[:port]`, lowercase), or `*`."""
    origin = value.strip().rstrip("/").lower()
    if origin != "*" and not _ORIGIN.fullmatch(origin):
        raise SettingsError(
            f"--allowed-origin / {ENV_PREFIX}ALLOWED_ORIGIN: {value!r} is not an origin"
            " (scheme://host[:port], e.g. https://app.example, or *)"
        )
    return origin


def _host_name(value: str) -> str:
    """A name `--allowed-host` allows (lowercase, no port), or `*`."""
    name = value.strip().lower().rstrip(".")
    if name != "*" and not _HOST_NAME.fullmatch(name):
        raise SettingsError(
            f"--allowed-host / {ENV_PREFIX}ALLOWED_HOST: {value!r} is not a host name"
            " (a name such as speech.lan, without a scheme or port, or *)"
        )
    return name


Network = ipaddress.IPv4Network | ipaddress.IPv6Network

PRIVATE_NETWORKS: tuple[Network, ...] = tuple(
    ipaddress.ip_network(n)
    for n in (
        "127.0.0.0/8",  # loopback
        "10.0.0.0/8",  # the private ranges (RFC 1918)
        "172.16.0.0/12",
        "192.168.0.0/16",
        "169.254.0.0/16",  # link-local
        "::1/128",  # loopback
        "fc00::/7",  # unique local (RFC 4193)
        "fe80::/10",  # link-local
    )
)
"""`--wyoming-allow private`: the addresses a home network's hosts have."""

_ANY: tuple[Network, ...] = (ipaddress.ip_network("0.0.0.0/0"), ipaddress.ip_network("::/0"))
_MAX_NETWORKS = 256


def parse_networks(value: str) -> tuple[Network, ...]:
    """The networks a `--wyoming-allow` value names (see `Settings.wyoming_allow`); an
    address is a network of one. SettingsError for anything else."""
    networks: list[Network] = []
    terms = [t.strip() for t in value.split(",") if t.strip()]
    if not terms or len(terms) > _MAX_NETWORKS:
        raise SettingsError(
            f"--wyoming-allow / {ENV_PREFIX}WYOMING_ALLOW: name 1 to {_MAX_NETWORKS} networks"
        )
    for term in terms:
        word = term.lower()
        if word in ("private", "any"):
            networks += PRIVATE_NETWORKS if word == "private" else _ANY
            continue
        try:
            networks.append(ipaddress.ip_network(term, strict=False))
        except ValueError:
            raise SettingsError(
                f"--wyoming-allow / {ENV_PREFIX}WYOMING_ALLOW: {term[:60]!r} is not an address"
                " or network (192.168.1.0/24, fd00::/8), private or any"
            ) from None
    return tuple(dict.fromkeys(networks))


def _wyoming_uri_problem(uri: str) -> str | None:
    """Why a Wyoming server cannot listen on `uri`, or None (`tcp://host:port`,
    `unix:///path`)."""
    parsed = urlsplit(uri)
    if parsed.scheme == "unix":
        return None if parsed.path else "a unix:// URI needs a socket path (unix:///run/x.sock)"
    if parsed.scheme != "tcp":
        return f"{uri!r}: use tcp://host:port or unix:///path"
    try:
        port = parsed.port
    except ValueError as exc:
        return f"{uri!r}: {exc}"
    if not parsed.hostname or port is None:
        return f"{uri!r}: a tcp:// URI needs a host and a port (tcp://0.0.0.0:10200)"
    return None


def _describe(exc: msgspec.ValidationError) -> str:
    message, _, path = str(exc).partition(" - at `$.")
    field = path.rstrip("`").split(".")[0].split("[")[0]
    if not field:
        return message
    flag = "--" + _FLAG_NAMES.get(field, field.replace("_", "-"))
    env = ENV_PREFIX + _ENV_NAMES.get(field, field.upper())
    return f"{flag} / {env}: {message}"
