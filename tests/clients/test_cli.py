"""The `speechd-client` command, run as a process against the live server (see conftest)."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import httpx
import pytest

from harness.servers import LiveServer, free_port
from speechd_client import MAX_SPEECH_CHARS

from ._support import audio_of, run_cli, run_cli_on_terminal
from .conftest import AUDIO_PER_CHAR, KEY, VOICES

_texts = itertools.count()


def text(words: int = 12) -> str:
    """A text no other test speaks (identical requests share one cast)."""
    n = next(_texts)
    return " ".join(f"cli{n} word{i}." for i in range(words))


def speech(server: LiveServer, said: str, fmt: str) -> bytes:
    """The same cast's audio straight from the api, to compare with what the command saved."""
    response = httpx.post(
        server.v1 + "/audio/speech",
        json={"input": said, "response_format": fmt},
        headers={"authorization": f"Bearer {KEY}"},
        timeout=60,
    )
    response.raise_for_status()
    return response.content


def test_say_writes_the_file_its_suffix_names(server: LiveServer, tmp_path: Path) -> None:
    said = text()
    run = run_cli("say", said, "-o", str(tmp_path / "out.wav"), url=server.url, key=KEY)
    assert (run.code, run.stdout, run.stderr) == (0, b"", "")  # no terminal: no progress
    saved = (tmp_path / "out.wav").read_bytes()
    assert saved == speech(server, said, "wav")
    assert audio_of(saved)[0] == 24000


def test_say_from_stdin_to_stdout(server: LiveServer) -> None:
    said = text()
    run = run_cli("say", "--voice", "af_heart", url=server.url, key=KEY, stdin=said.encode())
    assert run.code == 0 and run.stderr == ""
    assert run.stdout == speech(server, said, "mp3")  # mp3 when nothing names a format


def test_say_from_a_file_with_the_flags(server: LiveServer, tmp_path: Path) -> None:
    source = tmp_path / "text.txt"
    source.write_text(text(), encoding="utf-8")
    run = run_cli(
        "--url", server.url + "/v1", "say", "--file", str(source), "--speed", "1.5",
        "--format", "flac", "--model", "kokoro", "--api-key", KEY, "-o", "-",
        url=None,
    )  # fmt: skip
    assert run.code == 0, run.stderr
    assert run.stdout.startswith(b"fLaC")


def test_say_a_text_longer_than_the_openai_route_takes(server: LiveServer, tmp_path: Path) -> None:
    long = " ".join(itertools.repeat(text(5), 200))
    assert len(long) > MAX_SPEECH_CHARS
    run = run_cli("say", "-f", "-", "-o", str(tmp_path / "long.mp3"), url=server.url, key=KEY,
                  stdin=long.encode())  # fmt: skip
    assert run.code == 0, run.stderr
    _, seconds = audio_of((tmp_path / "long.mp3").read_bytes())
    assert seconds == pytest.approx(len(long) * AUDIO_PER_CHAR, abs=0.2)


def test_cast_prints_the_link_and_follow_saves_or_pipes_it(
    server: LiveServer, tmp_path: Path
) -> None:
    said = text(30)
    run = run_cli("cast", said, "--format", "wav", "--title", "Hi", url=server.url, key=KEY)
    assert run.code == 0 and run.stderr == ""
    link = run.stdout.decode().strip()
    assert re.fullmatch(re.escape(server.url) + r"/c/[A-Za-z0-9_-]+", link), link
    saved = run_cli("follow", link, "-o", str(tmp_path / "cast.wav"), url=server.url)
    assert saved.code == 0 and saved.stdout == b"", saved.stderr
    piped = run_cli("follow", link.rsplit("/", 1)[1], url=server.url)  # an id works too
    saved_bytes = (tmp_path / "cast.wav").read_bytes()
    # The same file, but for the wav header's sizes: a cast still growing says "unknown"
    # (0xFFFFFFFF), a finished one its true sizes.
    assert _sizes_masked(piped.stdout) == _sizes_masked(saved_bytes)
    assert _sizes_masked(saved_bytes) == _sizes_masked(speech(server, said, "wav"))


def _sizes_masked(wav: bytes) -> bytes:
    return wav[:4] + wav[8:40] + wav[44:]


def test_voices(server: LiveServer) -> None:
    run = run_cli("voices", url=server.url)
    assert run.code == 0
    lines = run.stdout.decode().splitlines()
    assert set(VOICES) <= {line.split("\t")[0] for line in lines}
    assert "af_heart\tHeart (American English, female)" in lines


def test_an_unknown_voice_lists_the_voices_and_leaves_no_file(
    server: LiveServer, tmp_path: Path
) -> None:
    out = tmp_path / "nope.mp3"
    run = run_cli("say", text(), "--voice", "xx_nobody", "-o", str(out), url=server.url, key=KEY)
    assert run.code == 1
    assert "xx_nobody" in run.error_line and all(v in run.error_line for v in VOICES)
    assert not out.exists()


def test_a_missing_key_says_how_to_pass_one(server: LiveServer) -> None:
    run = run_cli("say", text(), url=server.url)
    assert run.code == 1
    assert "needs an API key" in run.error_line
    assert "--api-key" in run.error_line and "SPEECHD_API_KEY" in run.error_line


def test_a_wrong_key(server: LiveServer) -> None:
    run = run_cli("say", text(), "--api-key", "sk-wrong", url=server.url, key=KEY)
    assert run.code == 1 and "Incorrect API key" in run.error_line


def test_no_server_says_where_and_how_to_start_one() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    run = run_cli("voices", url=url)
    assert run.code == 1
    line = run.error_line
    assert url in line and "connection refused" in line and "speechd serve" in line


def test_a_cast_failing_mid_stream_leaves_no_file(server: LiveServer, tmp_path: Path) -> None:
    out = tmp_path / "broken.wav"
    said = f"{text(2)} one two POISON three"
    run = run_cli("say", said, "-o", str(out), url=server.url, key=KEY)
    line = run.error_line
    # With the cast API the command learns why: "The cast failed: ..."
    assert run.code == 1 and ("ended early" in line or "cast failed" in line), line
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["say"], "give the text as an argument, with --file, or on stdin"),
        (["say", "a", "--file", "b"], "not both"),
        (["say", "--file", "/nonexistent/text.txt"], "cannot read /nonexistent/text.txt"),
        (["follow", "http://x/elsewhere/"], "neither a cast id nor a cast link"),
    ],
)
def test_usage_errors(args: list[str], message: str, tmp_path: Path) -> None:
    run = run_cli_on_terminal(*args, "-o", str(tmp_path / "x.mp3"), url="http://127.0.0.1:9")
    assert run.code == 2 and message in run.stderr and "Traceback" not in run.stderr


def test_empty_text_is_refused_before_asking(tmp_path: Path) -> None:
    run = run_cli("say", "-o", str(tmp_path / "x.mp3"), url="http://127.0.0.1:9", stdin=b" \n")
    assert run.code == 2 and "no text" in run.stderr


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_an_output_that_cannot_be_written(server: LiveServer) -> None:
    run = run_cli("say", text(), "-o", "/dev/full", url=server.url, key=KEY)
    assert run.code == 1 and "cannot write /dev/full: No space left" in run.error_line
    assert Path("/dev/full").exists()  # a device is never removed


def test_text_that_is_not_utf8(tmp_path: Path) -> None:
    run = run_cli("say", "-o", str(tmp_path / "x.mp3"), url="http://127.0.0.1:9", stdin=b"\xff\xfe")
    assert run.code == 2 and "stdin is not UTF-8 text" in run.error_line


def test_audio_never_goes_to_a_terminal(server: LiveServer) -> None:
    run = run_cli_on_terminal("say", text(), url=server.url, key=KEY, stdout_too=True)
    assert run.code == 2 and "stdout is a terminal" in run.stderr


def test_no_progress_when_stderr_is_piped(server: LiveServer, tmp_path: Path) -> None:
    run = run_cli("say", text(40), "-o", str(tmp_path / "a.mp3"), url=server.url, key=KEY)
    assert run.code == 0 and run.stderr == ""


def test_progress_on_a_terminal(server: LiveServer, tmp_path: Path) -> None:
    run = run_cli_on_terminal(
        "say", text(40), "-o", str(tmp_path / "a.mp3"), url=server.url, key=KEY
    )
    assert run.code == 0, run.stderr
    # One line redrawn in place ("\r"), then the cast's link; the terminal shows "\n" as "\r\n".
    bar, link = run.stderr.replace("\r\n", "\n").rstrip("\n").split("\n")
    draws = bar.split("\r")[1:]
    assert draws and all("KiB" in draw for draw in draws)
    done = re.fullmatch(
        r"say  \[#+\] (\d+)/\1 chunks  [\d.]+ s audio  done  \d+ KiB\x1b\[K", draws[-1]
    )
    assert done and int(done.group(1)) > 1, draws[-1]
    assert re.fullmatch("cast: " + re.escape(server.url) + r"/c/[A-Za-z0-9_-]+", link), link
    quiet = run_cli_on_terminal(
        "say", text(), "-q", "-o", str(tmp_path / "b.mp3"), url=server.url, key=KEY
    )
    assert quiet.code == 0 and quiet.stderr == ""


def test_an_error_after_progress_prints_on_its_own_line(server: LiveServer, tmp_path: Path) -> None:
    said = f"{text(2)} one two POISON three"
    run = run_cli_on_terminal("say", said, "-o", str(tmp_path / "a.wav"), url=server.url, key=KEY)
    shown = run.stderr.replace("\r\n", "\n").rstrip("\n").split("\n")
    assert run.code == 1 and len(shown) >= 2, run.stderr
    assert shown[0].startswith("\rsay  ") and shown[-1].startswith("speechd-client: "), shown


@pytest.mark.parametrize("where", ["first", "last"])
def test_follow_takes_an_id_that_starts_with_a_dash(where: str, tmp_path: Path) -> None:
    # One cast id in 64 starts with "-"; argparse alone would call it an unknown option.
    cast = "-" + "a" * 21
    out = ["-o", str(tmp_path / "x.wav")]
    args = [cast, *out] if where == "first" else [*out, cast]
    run = run_cli_on_terminal("follow", *args, url="http://127.0.0.1:9")
    assert run.code == 1 and "unrecognized" not in run.stderr and "Traceback" not in run.stderr
