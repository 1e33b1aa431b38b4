"""The `speechd` command.

    speechd serve    the api, a supervised worker and the embedded store, in one command
    speechd api      the api alone, against a store that workers share
    speechd worker   one worker alone (it loads the model), against the same store
    speechd wyoming  the Wyoming server (Home Assistant) alone, against the same store
    speechd top      the workers, their devices and the casts in flight, live from /metrics

Every flag has a `SPEECHD_*` environment variable (see `speechd.config`). SIGTERM or SIGINT
ends the streams that follow live casts (SSE, long-polls, live audio), stops accepting
connections, lets the other in-flight responses finish (up to `--shutdown-timeout`), stops
the worker and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import socket
import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from speechd import __version__
from speechd.config import Settings, SettingsError, load_settings
from speechd.engine import DEVICE_HELP
from speechd.limits import StreamSlots
from speechd.logs import configure_logging, mask_handlers, mask_url

if TYPE_CHECKING:
    from speechd.api import WorkerSupervisor
    from speechd.wyoming import WyomingDoor

__all__ = ["build_parser", "main", "run_api"]

log = logging.getLogger("speechd")

def _store_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("store")
    group.add_argument(
        "--data-dir", help="data folder of the embedded store (default ~/.local/share/speechd)"
    )
    group.add_argument(
        "--store", help="store URL: a folder, or nats://host:port (default: data dir)"
    )
    parser.add_argument(
        "--log-level", choices=["critical", "error", "warning", "info", "debug"], help="(info)"
    )


def _api_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("api")
    group.add_argument("--host", help="address to listen on (127.0.0.1)")
    group.add_argument("--port", type=int, help="port to listen on (8000)")
    group.add_argument(
        "--api-key",
        dest="api_keys",
        action="append",
        help="accept this Bearer key for speech requests (repeatable; none = open)",
    )
    group.add_argument("--max-queue", type=int, help="queued casts before 429 (64)")
    group.add_argument(
        "--retention", help="remove casts untouched this long, e.g. 30d (default: keep)"
    )
    group.add_argument("--public-url", help="base URL for cast links (default: the request's)")
    group.add_argument(
        "--allowed-origin",
        dest="allowed_origins",
        action="append",
        help="a web origin (https://app.example) whose pages may send requests from a browser: "
        "POSTs, live-cast WebSockets and CORS (repeatable; * for any; default: only this "
        "server's own pages)",
    )
    group.add_argument(
        "--allowed-host",
        dest="allowed_hosts",
        action="append",
        metavar="NAME",
        help="a name (speech.lan) browser pages may reach this server by, besides an IP "
        "address, localhost, this machine's name, --host and --public-url's host "
        "(repeatable; * for any)",
    )
    group.add_argument(
        "--share-casts",
        choices=["all", "per-key"],
        help="share a cast made from the same request with every caller (all), or only "
        "between callers of one API key (per-key) (all)",
    )
    group.add_argument(
        "--shutdown-timeout", help="seconds in-flight responses get on shutdown (30)"
    )
    group.add_argument("--max-body-bytes", type=int, help="request body limit (1 MiB)")
    group.add_argument(
        "--live-idle-timeout",
        help="close a live cast's input idle this long, as if it were done (60s)",
    )
    group.add_argument(
        "--read-rate", type=float, help="public reads per second per client, after the burst (20)"
    )
    group.add_argument("--read-burst", type=int, help="public reads a client may make at once (60)")
    group.add_argument(
        "--start",
        choices=["smooth", "now"],
        help="streamed speech: hold audio back until it can play through (smooth), or send "
        "the first audio at once (now) (smooth)",
    )
    group.add_argument(
        "--client-header",
        help="header trusted proxies append the client address to, e.g. x-forwarded-for "
        "(default: the peer address)",
    )
    group.add_argument(
        "--trusted-proxies",
        type=int,
        help="proxies in front of speechd that append to --client-header (1)",
    )
    group.add_argument(
        "--max-streams",
        type=int,
        help="long-lived reads (SSE, long-polls, live audio, "
        "waiting speech, live-cast WebSockets, Wyoming connections) the api holds before 503 "
        "(512)",
    )
    group.add_argument(
        "--max-client-streams", type=int, help="long-lived reads one client holds before 429 (64)"
    )


def _wyoming_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("wyoming (Home Assistant)")
    group.add_argument(
        "--wyoming-uri",
        help="serve the Wyoming protocol on tcp://host:port or unix:///path, e.g. "
        "tcp://0.0.0.0:10200 (default: off)",
    )
    group.add_argument(
        "--wyoming-zeroconf",
        nargs="?",
        const="",
        metavar="NAME",
        help="advertise the Wyoming server over mDNS as NAME (default speechd-<host>), so "
        "Home Assistant discovers it",
    )
    group.add_argument(
        "--wyoming-allow",
        metavar="CIDR[,CIDR...]",
        help="who may connect to the Wyoming server over TCP (it has no authentication): "
        "addresses and networks, private (loopback and the private ranges: a home network) "
        "or any (private)",
    )
    group.add_argument(
        "--wyoming-queue-share",
        type=float,
        metavar="SHARE",
        help="the share of --max-queue Wyoming's requests may fill, so HTTP callers keep the "
        "rest (0.5)",
    )


def _wyoming_command_flags(parser: argparse.ArgumentParser) -> None:
    """The api's settings a Wyoming server run apart reads too (help as for `speechd api`)."""
    group = parser.add_argument_group("casts")
    group.add_argument("--max-queue", type=int, help="queued casts before a full queue (64)")
    group.add_argument(
        "--live-idle-timeout", help="close a streamed synthesis's input idle this long (60s)"
    )
    group.add_argument(
        "--start",
        choices=["smooth", "now"],
        help="hold a synthesis's first audio until it can play through (smooth), or send it "
        "at once (now) (smooth)",
    )
    group.add_argument("--public-url", help="the api's base URL, for cast links in audio-start")
    group.add_argument("--max-streams", type=int, help="connections held in all (512)")
    group.add_argument(
        "--max-client-streams", type=int, help="connections one client holds (64)"
    )


def _voice_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--default-voice", help="voice used when a request names none (af_heart)")


def _worker_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("worker")
    group.add_argument("--model-dir", help="local Kokoro-82M folder (default: Hugging Face)")
    group.add_argument("--device", help=f"{DEVICE_HELP} (auto)")
    group.add_argument(
        "--engine",
        choices=["auto", "torch", "onnx"],
        help="runtime: torch, ONNX Runtime, or auto (ONNX Runtime when installed) (auto)",
    )
    group.add_argument(
        "--onnx-model", help="an existing Kokoro ONNX export (default: export the weights once)"
    )
    group.add_argument(
        "--cache-dir", help="for ONNX exports of a read-only model folder (~/.cache/speechd)"
    )
    group.add_argument(
        "--graph",
        choices=["auto", "float", "fused", "int8"],
        help="the decoder: float, fused (float, rewritten), int8 (ONNX Runtime on a CPU), or "
        "auto: ONNX Runtime's fastest within its quality bound, measured once per machine; "
        "torch's fused (auto)",
    )
    group.add_argument(
        "--lexicon",
        help="pronunciation lexicon file (word = /phonemes/ or respelling), reloaded on change",
    )
    group.add_argument(
        "--threads", type=int, help="CPU threads for the runtime (default: the runtime's)"
    )
    from speechd.worker import WorkerConfig  # torch-free; its defaults are the worker's

    default = WorkerConfig()
    group.add_argument(
        "--policy",
        choices=["deadline", "fifo"],
        help=f"scheduler; fifo is a baseline ({default.policy})",
    )
    group.add_argument(
        "--quantum", help=f"longest synthesis of one chunk, in seconds ({default.quantum_s:g})"
    )
    group.add_argument(
        "--comfortable-lead",
        metavar="SECONDS",
        help="how far ahead of every listener the worker gets before it sleeps "
        f"({default.comfortable_lead_s:g})",
    )
    group.add_argument(
        "--receipts",
        type=int,
        help=f"latest receipts progress/done keeps, older trimmed ({default.receipts})",
    )
    group.add_argument(
        "--max-active",
        type=int,
        metavar="N",
        help="the most casts made at once, on top of what the measured capacity admits; also "
        "how many jobs in line may have a first chunk made ahead (default: capacity, 4 ahead)",
    )
    group.add_argument(
        "--idle-unload",
        metavar="DURATION",
        help="give the model and its device memory back after this long with nothing to "
        "make, e.g. 5m; the next cast takes it again (default: off)",
    )
    group.add_argument(
        "--max-batch",
        metavar="auto|N",
        help="the most chunks of different casts rendered in one forward pass; auto measures "
        "at warm-up and keeps the largest size that saves 10%% per item (1 on a CPU); with N, "
        "batches still form only where they save time (default: auto)",
    )
    group.add_argument(
        "--max-device-memory",
        metavar="SIZE",
        help="the most the worker holds on its device, e.g. 2G; chunks are planned within "
        "it (default: no cap)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="speechd",
        description="OpenAI-compatible speech server for Kokoro-82M; every synthesis is a "
        "durable, shareable cast.",
        epilog="Every flag can also be set as SPEECHD_<FLAG> in the environment.",
    )
    parser.add_argument("--version", action="version", version=f"speechd {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve = commands.add_parser("serve", help="api + supervised worker + embedded store")
    api = commands.add_parser("api", help="the api alone, against a shared store")
    worker = commands.add_parser("worker", help="one worker alone, against a shared store")
    for sub in (serve, api, worker):
        _store_flags(sub)
        _voice_flag(sub)
    for sub in (serve, api):
        _api_flags(sub)
    for sub in (serve, worker):
        _worker_flags(sub)
    wyoming = commands.add_parser(
        "wyoming", help="the Wyoming server (Home Assistant) alone, against a shared store"
    )
    _store_flags(wyoming)
    _voice_flag(wyoming)
    _wyoming_command_flags(wyoming)
    for sub in (serve, api, wyoming):
        _wyoming_flags(sub)
    top = commands.add_parser("top", help="workers, devices and casts, live from an api")
    top.add_argument(
        "--url",
        default=None,
        help="the api to watch (SPEECHD_URL, else http://127.0.0.1:8000)",
    )
    top.add_argument("--interval", type=float, default=2.0, help="seconds between frames (2)")
    top.add_argument("--once", action="store_true", help="print one frame and exit")
    return parser


def _configure_logging(settings: Settings) -> None:
    # Every line masked: no cast id, no store credentials (speechd.logs).
    configure_logging(settings.log_level)


@contextlib.contextmanager
def _signals_end_the_server() -> Iterator[None]:
    """uvicorn turns SIGTERM/SIGINT into a graceful shutdown, then re-raises the signal with
    the handler it found; with this no-op installed that re-raise ends nothing, and the
    command exits 0."""
    handled = (signal.SIGINT, signal.SIGTERM)
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in handled}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _store_error(url: str) -> str | None:
    """Why the store at `url` cannot be opened, or None: checked before serving, so a wrong
    `--store` (an unreachable NATS, say) is one line instead of a failed startup's traceback."""
    from speechd.durable import DurableError, open_store

    async def probe() -> None:
        store = await open_store(url)
        await store.close()

    try:
        asyncio.run(probe())
    except DurableError as exc:
        return str(exc)
    return None


def run_api(settings: Settings, *, supervisor: WorkerSupervisor | None = None) -> int:
    """Serve the api (and run `supervisor` with it) until SIGTERM/SIGINT; 0 on a clean stop."""
    import uvicorn

    from speechd.api import MAX_WS_MESSAGE_BYTES, close_streams, create_app

    failure = _store_error(settings.store_url)
    if failure is not None:
        log.error("cannot open the store: %s", failure)
        return 1
    # One stream-slot table for both doors: Wyoming connections count in the api's caps.
    slots = settings.stream_slots()
    app = create_app(settings, supervisor=supervisor, slots=slots)
    doors: list[WyomingDoor] = []

    class Server(uvicorn.Server):
        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            # uvicorn waits on in-flight responses before the app's own shutdown runs; a
            # listener following a cast still generating must not hold that wait up.
            await close_streams(app)
            for door in doors:
                await door.close()
            await super().shutdown(sockets)

    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        lifespan="on",
        timeout_graceful_shutdown=settings.shutdown_timeout,  # type: ignore[arg-type]
        # Who the client is (per-client read limits) and where links point are explicit
        # settings (--client-header, --public-url), not whatever X-Forwarded-* a loopback
        # peer sends.
        proxy_headers=False,
        # A live cast's WebSocket takes one piece per message: a longer one is refused
        # before it is read.
        ws_max_size=MAX_WS_MESSAGE_BYTES,
    )
    mask_handlers()  # uvicorn's own handlers (its access log) were made with the config
    server = Server(config)
    log.info(
        "speechd %s: api on http://%s:%d, store %s, %s",
        __version__,
        settings.host,
        settings.port,
        mask_url(settings.store_url),
        f"{len(settings.api_keys)} API key(s)" if settings.api_keys else "open (no API keys)",
    )
    with _signals_end_the_server():
        if settings.wyoming_uri is None:
            server.run()
        elif not asyncio.run(_serve_with_wyoming(server, settings, slots, doors)):
            return 1
    return 0 if server.started else 1


async def _serve_with_wyoming(
    server: Any, settings: Settings, slots: StreamSlots, doors: list[WyomingDoor]
) -> bool:
    """Serve the api with the Wyoming server beside it, in one event loop: its connections
    hold the api's own stream slots, so `--max-streams` and `--max-client-streams` count
    both doors. False when the Wyoming address cannot be listened on (the api never starts)."""
    from speechd.wyoming import wyoming_door

    async with contextlib.AsyncExitStack() as stack:
        try:
            door = await stack.enter_async_context(wyoming_door(settings, slots=slots))
        except OSError as exc:
            log.error("cannot serve Wyoming on %s: %s", settings.wyoming_uri, exc)
            return False
        doors.append(door)
        await server.serve()
    return True


def _serve(settings: Settings) -> int:
    from speechd.worker import Supervisor

    return run_api(settings, supervisor=Supervisor(settings.worker_config()))


def _worker(settings: Settings) -> int:
    from speechd.worker import run_worker

    return run_worker(settings.worker_config())


def _wyoming(settings: Settings) -> int:
    from speechd.wyoming import run_wyoming

    failure = _store_error(settings.store_url)
    if failure is not None:
        log.error("cannot open the store: %s", failure)
        return 1
    return run_wyoming(settings)


def _top(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    import os

    from speechd.telemetry import run_top

    if not 0.1 <= args.interval <= 3600:
        parser.error("--interval: between 0.1 and 3600 seconds")
    url = args.url or os.environ.get("SPEECHD_URL") or "http://127.0.0.1:8000"
    try:
        return run_top(url, interval_s=args.interval, once=args.once)
    except KeyboardInterrupt:
        return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "top":
        return _top(args, parser)
    flags: dict[str, Any] = {k: v for k, v in vars(args).items() if k != "command"}
    for name in ("api_keys", "allowed_origins", "allowed_hosts"):
        if flags.get(name) is not None:
            flags[name] = tuple(flags[name])
    try:
        settings = load_settings(flags)
    except SettingsError as exc:
        parser.error(str(exc))
    if args.command == "wyoming" and settings.wyoming_uri is None:
        parser.error("speechd wyoming needs --wyoming-uri (SPEECHD_WYOMING_URI), e.g. tcp://0.0.0.0:10200")
    _configure_logging(settings)
    command = {"serve": _serve, "api": run_api, "worker": _worker, "wyoming": _wyoming}[
        args.command
    ]
    return command(settings)


if __name__ == "__main__":
    sys.exit(main())
