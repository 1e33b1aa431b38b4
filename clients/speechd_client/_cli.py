"""The `speechd-client` command.

    speechd-client say "Hello." -o hello.mp3     text (or --file, or stdin) to audio, streamed
    llm "..." | speechd-client say --live | mpv - stdin spoken as it arrives (a live cast)
    speechd-client say -f ch1.txt -o ch1.mp3 --captions ch1.vtt     ... and its subtitles
    speechd-client cast --file chapter.txt       queue a cast, print its link
    speechd-client follow <id or link> | mpv -   a cast's audio, live while it is generated
    speechd-client voices                        the voices the server has
    speechd-client book novel.epub -o novel.m4b  a book, made in the background, then saved

`--url` (SPEECHD_URL) names the server and `--api-key` (SPEECHD_API_KEY) the key. Long work
shows a progress line on stderr when it is a terminal. Errors print one line and exit 1
(2 for a usage error, 130 when interrupted).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, BinaryIO

from ._calls import BOOK_TYPES, DEFAULT_TIMEOUT, DEFAULT_URL, MAX_SPEECH_CHARS
from ._cli_io import (
    CommandError,
    UsageError,
    captions_format,
    cast_id_of,
    check_output,
    ids_as_operands,
    output_to,
    read_text,
    response_format,
    stdin_pieces,
    write_captions,
)
from ._client import AsyncAudioStream, AsyncClient
from ._errors import SpeechdClientError, StreamInterrupted
from ._live import AsyncLiveCast
from ._progress import ProgressBar
from ._version import __version__
from ._wire import FORMATS, CastView

__all__ = ["build_parser", "main"]

PROG = "speechd-client"
_POLL_S = 0.5


# -- the command line -------------------------------------------------------------------------


def _connection_flags(parser: argparse.ArgumentParser, *, defaults: bool) -> None:
    # On the main parser with defaults, and on each command without (SUPPRESS), so that the
    # flags work before or after the command name.
    def default(value: object) -> object:
        return value if defaults else argparse.SUPPRESS

    parser.add_argument(
        "--url",
        default=default(os.environ.get("SPEECHD_URL") or DEFAULT_URL),
        help=f"the speechd server (SPEECHD_URL; default {DEFAULT_URL})",
    )
    parser.add_argument(
        "--api-key",
        default=default(os.environ.get("SPEECHD_API_KEY") or None),
        help="API key, if the server needs one (SPEECHD_API_KEY)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=default(DEFAULT_TIMEOUT),
        help=f"seconds to wait for each answer (default {DEFAULT_TIMEOUT:g})",
    )
    parser.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        default=default(False),
        help="no progress line (there is none when stderr is not a terminal)",
    )


def _text_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("text", nargs="?", help="the text (default: --file, or stdin)")
    parser.add_argument("-f", "--file", help="read the text from this file ('-': stdin)")
    parser.add_argument("--voice", help="a voice id (see `voices`), an OpenAI name, or a blend")
    parser.add_argument("--speed", type=float, help="0.25 to 4.0 (default 1.0)")
    parser.add_argument(
        "--format",
        choices=FORMATS,
        help="audio format (default: from the output file's suffix, else mp3)",
    )
    parser.add_argument("--model", help="tts-1, tts-1-hd, kokoro, ... (all Kokoro-82M)")


def _output_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-o", "--output", help="write the audio here ('-' or absent: stdout, if not a terminal)"
    )
    parser.add_argument(
        "--captions",
        metavar="FILE",
        help="also write the words as subtitles timed to the audio: WebVTT, or SubRip for .srt",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Talk to a speechd server: speak text, cast it, follow casts."
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    _connection_flags(parser, defaults=True)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    say = commands.add_parser(
        "say", help="speak text into an audio file or stdout, streamed as it is made"
    )
    _text_flags(say)
    _output_flag(say)
    say.add_argument(
        "--start",
        choices=["smooth", "now"],
        help="on a server slower than real time: hold the audio back until it plays through "
        "without a stall (smooth), or take the first audio at once (now) (the server's choice)",
    )
    say.add_argument(
        "--live",
        action="store_true",
        help="read stdin as it arrives and speak it as it comes (a live cast: pipe an LLM in)",
    )

    cast = commands.add_parser("cast", help="queue a cast and print its link")
    _text_flags(cast)
    cast.add_argument("--title", help="the cast's title (default: its first sentence)")

    follow = commands.add_parser(
        "follow", help="save or pipe a cast's audio, live while it is generated"
    )
    follow.add_argument("cast", help="the cast's id or link")
    _output_flag(follow)

    commands.add_parser("voices", help="list the server's voices")

    book = commands.add_parser(
        "book",
        help="make an audiobook of an EPUB, Markdown or text file (run it again to resume)",
    )
    book.add_argument("file", help="the book: .epub, .md or .txt")
    book.add_argument("-o", "--output", help="write the audiobook here (.m4b or .mp3)")
    book.add_argument("--voice", help="a voice id (see `voices`), an OpenAI name, or a blend")
    book.add_argument("--speed", type=float, help="0.25 to 4.0 (default 1.0)")
    book.add_argument("--chapters", help="the chapters to make, like 3-5 or 1,4 (default all)")
    book.add_argument(
        "--chapter-voices", help="chapters read in their own voice, like 2=am_adam,5-7=bf_emma"
    )
    book.add_argument("--chapter-speeds", help="chapters read at their own speed, like 2=1.2")
    book.add_argument(
        "--list", action="store_true", help="list the chapters and their lengths, then stop"
    )
    for sub in commands.choices.values():
        _connection_flags(sub, defaults=False)
    return parser


# -- the commands -----------------------------------------------------------------------------


async def _watch(client: AsyncClient, cast_id: str, bar: ProgressBar) -> None:
    """Feed the bar the cast's progress until it finishes. Best effort: progress must never
    fail a transfer, so a status that cannot be read just ends the watching."""
    with contextlib.suppress(SpeechdClientError):
        while True:
            view = await client.cast_status(cast_id)
            bar.cast(view)
            if view.finished:
                return
            await asyncio.sleep(_POLL_S)


async def _final_status(client: AsyncClient, cast_id: str) -> CastView | None:
    try:
        return await client.cast_status(cast_id)
    except SpeechdClientError:
        return None


async def _receive(
    client: AsyncClient,
    audio: AsyncAudioStream,
    cast_id: str | None,
    sink: BinaryIO,
    label: str | None,
) -> None:
    """Copy the audio to `sink` as it arrives; with a label, show progress under that name."""
    bar = ProgressBar(sys.stderr, label) if label else None
    watcher = asyncio.create_task(_watch(client, cast_id, bar)) if bar and cast_id else None
    try:
        async for data in audio:
            sink.write(data)
            sink.flush()
            if bar:
                bar.received(len(data))
    except BaseException as exc:
        if bar:
            bar.close()  # end the line, so an error prints on one of its own
        if isinstance(exc, StreamInterrupted) and cast_id:  # say why, if the cast knows
            view = await _final_status(client, cast_id)
            if view is not None and view.status == "failed":
                again = " (the same command tries again)" if view.retryable else ""
                raise StreamInterrupted(f"The cast failed: {view.error}{again}") from exc
        raise
    finally:
        if watcher:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
    if bar:
        bar.close(await _final_status(client, cast_id) if cast_id else None)


def _label(args: argparse.Namespace, name: str) -> str | None:
    return None if args.quiet or not sys.stderr.isatty() else name


def _held(delay: float) -> str:
    return (
        f"{PROG}: the server is slower than real time: the audio starts in {delay:.1f} s, so"
        " that it plays without a stall (--start now: the first audio at once)"
    )


async def _say(client: AsyncClient, args: argparse.Namespace) -> None:
    check_output(args.output)
    captions = captions_format(args.captions)
    if args.live:
        await _say_live(client, args, captions)
        return
    text = read_text(args)
    options: dict[str, Any] = {
        "voice": args.voice,
        "model": args.model,
        "speed": args.speed,
        "response_format": response_format(args),
    }
    label = _label(args, "say")
    with output_to(args.output) as sink:
        if len(text) <= MAX_SPEECH_CHARS:
            async with client.speech(text, start=args.start, **options) as audio:
                if audio.start_delay > 0 and not args.quiet:
                    print(_held(audio.start_delay), file=sys.stderr, flush=True)
                await _receive(client, audio, audio.cast_id, sink, label)
            cast_id = audio.cast_id
        else:  # longer than the OpenAI route takes: the same cast through the cast API
            created = await client.submit_cast(text, **options)
            async with client.follow(created.id) as audio:
                await _receive(client, audio, created.id, sink, label)
            cast_id = created.id
    if captions is not None:
        await write_captions(client, cast_id, args.captions, captions)


_PIECE_CHARS = 4096  # the server's largest piece


async def _feed(cast: AsyncLiveCast, queue: asyncio.Queue[str | None]) -> None:
    """Append what stdin gave, all that has gathered per request, then say `done`."""
    while True:
        parts = [await queue.get()]
        while not queue.empty() and parts[-1] is not None:
            parts.append(queue.get_nowait())
        ended = parts[-1] is None
        text = "".join(p for p in parts if p is not None)
        for start in range(0, len(text), _PIECE_CHARS):
            await cast.append(text[start : start + _PIECE_CHARS])
        if ended:
            await cast.done()
            return


async def _say_live(client: AsyncClient, args: argparse.Namespace, captions: str | None) -> None:
    if args.text is not None or args.file not in (None, "-"):
        raise UsageError("--live reads stdin: pipe the text in (give no text or --file)")
    if sys.stdin.isatty():
        raise UsageError("--live reads stdin as it arrives: pipe the text in")
    cast = await client.live_cast(
        voice=args.voice, model=args.model, speed=args.speed, response_format=response_format(args)
    )
    queue: asyncio.Queue[str | None] = asyncio.Queue()
    loop = asyncio.get_running_loop()
    threading.Thread(target=stdin_pieces, args=(loop, queue), daemon=True).start()
    feeding = asyncio.create_task(_feed(cast, queue))
    with output_to(args.output) as sink:
        async with client.follow(cast.id) as audio:
            receiving = asyncio.create_task(
                _receive(client, audio, cast.id, sink, _label(args, "say --live"))
            )
            done, _ = await asyncio.wait({feeding, receiving}, return_when=asyncio.FIRST_EXCEPTION)
            if feeding in done and feeding.exception() is not None:
                receiving.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await receiving
                raise feeding.exception()  # type: ignore[misc]
            await receiving
    await feeding
    if captions is not None:
        await write_captions(client, cast.id, args.captions, captions)


async def _cast(client: AsyncClient, args: argparse.Namespace) -> None:
    created = await client.submit_cast(
        read_text(args),
        voice=args.voice,
        model=args.model,
        speed=args.speed,
        response_format=args.format,
        title=args.title,
    )
    print(created.url)


async def _follow(client: AsyncClient, args: argparse.Namespace) -> None:
    cast_id = cast_id_of(args.cast)
    check_output(args.output)
    captions = captions_format(args.captions)
    with output_to(args.output) as sink:
        async with client.follow(cast_id) as audio:
            await _receive(client, audio, cast_id, sink, _label(args, "follow"))
    if captions is not None:
        await write_captions(client, cast_id, args.captions, captions)


async def _voices(client: AsyncClient, args: argparse.Namespace) -> None:
    for voice in await client.voices():
        print(f"{voice.id}\t{voice.name}")


async def _book(client: AsyncClient, args: argparse.Namespace) -> None:
    """Upload the book (the same file and options find the same book: a second run resumes
    it), show its progress, then write its file."""
    suffix = os.path.splitext(args.file)[1].lower()
    content_type = BOOK_TYPES.get(suffix)
    if content_type is None:
        raise UsageError(f"a book is a .epub, .md or .txt file, not {args.file!r}")
    fmt = "mp3" if (args.output or "").lower().endswith(".mp3") else "m4b"
    if not args.list:
        check_output(args.output)
        if not args.output or args.output == "-":
            raise UsageError("give the audiobook's file with -o (book.m4b or book.mp3)")
    try:
        data = await asyncio.to_thread(Path(args.file).read_bytes)
    except OSError as exc:
        raise CommandError(f"cannot read {args.file}: {exc.strerror or exc}") from exc
    view = await client.create_book(
        data,
        content_type,
        voice=args.voice,
        speed=args.speed,
        format=fmt,
        chapters=args.chapters,
        chapter_voices=args.chapter_voices,
        chapter_speeds=args.chapter_speeds,
    )
    if args.list:
        for chapter in view.chapters:
            mark = "" if chapter.chosen else "  (not chosen)"
            read = f"{chapter.voice} x{chapter.speed:g}"
            print(f"{chapter.number}\t{chapter.chars} chars\t{read}\t{chapter.title}{mark}")
        return
    show = _label(args, "book") is not None
    while not view.finished:
        if show:
            making = next((c for c in view.chapters if c.state == "generating"), None)
            doing = f", chapter {making.number}: {making.title[:40]}" if making else ""
            eta = f", about {view.eta_s:.0f} s left" if view.eta_s is not None else ""
            print(f"\r\x1b[Kbook {view.progress:.0%}{doing}{eta}", end="", file=sys.stderr)
        await asyncio.sleep(_POLL_S * 4)
        view = await client.book_status(view.id)
    if show:
        print(file=sys.stderr)
    if view.state != "done":
        raise CommandError(f"the book was not made ({view.state}); run the command again")
    with output_to(args.output) as sink:
        async with client.book_audio(view.id, fmt) as audio:
            async for data in audio:
                sink.write(data)


_COMMANDS = {
    "say": _say,
    "cast": _cast,
    "follow": _follow,
    "voices": _voices,
    "book": _book,
}


async def _run(args: argparse.Namespace) -> None:
    async with AsyncClient(args.url, api_key=args.api_key, timeout=args.timeout) as client:
        await _COMMANDS[args.command](client, args)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = build_parser().parse_args(ids_as_operands(sys.argv[1:] if argv is None else argv))
    try:
        asyncio.run(_run(args))
    except CommandError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return exc.status
    except SpeechdClientError as exc:
        print(f"{PROG}: {exc.message}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # Whoever read stdout (a player) went away; say nothing, and keep Python's exit
        # flush from failing on the closed pipe too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as exc:  # writing to stdout failed (a full disk behind a redirect, say)
        print(f"{PROG}: cannot write stdout: {exc.strerror or exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    return 0
