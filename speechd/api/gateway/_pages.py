"""The two HTML pages (paste, player) and the package's static files, served from an allowlist."""

from __future__ import annotations

import html
from functools import cache
from importlib import resources

import msgspec

from speechd.audio import LAYOUTS

__all__ = [
    "PAGE_HEADERS",
    "STATIC_FILES",
    "book_page",
    "missing_page",
    "paste_page",
    "player_page",
    "static_file",
]

# Pages hold only our own scripts and talk only to this origin; cast links are capabilities,
# so they never leak through a Referer.
PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "media-src 'self' blob:; connect-src 'self'; base-uri 'none'; form-action 'self'; "
        "frame-ancestors 'none'"
    ),
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
}

STATIC_FILES = {
    "speechd.css": "text/css; charset=utf-8",
    "paste.js": "text/javascript; charset=utf-8",
    "player.js": "text/javascript; charset=utf-8",
    "timeline.js": "text/javascript; charset=utf-8",
    "decode.js": "text/javascript; charset=utf-8",
    "book.js": "text/javascript; charset=utf-8",
}


def static_file(name: str) -> tuple[bytes, str] | None:
    """The bytes and content type of a shipped static file, or None if `name` is not one."""
    kind = STATIC_FILES.get(name)
    if kind is None:
        return None
    return resources.files(__package__).joinpath("static", name).read_bytes(), kind


def _page(title: str, body: str, script: str | None, attrs: str = "") -> str:
    module = f'<script type="module" src="/static/{script}"></script>' if script else ""
    return (
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)}</title>"
        '<link rel="stylesheet" href="/static/speechd.css">'
        f"{module}</head>\n<body{attrs}>\n{body}\n</body></html>\n"
    )


def paste_page() -> str:
    body = """<main class="paste">
<header><h1><a href="/" class="home">speechd</a></h1>
<p class="lede">Paste a text, pick a voice, and get a link you can listen to right away.</p>
</header>
<form id="cast-form" autocomplete="off">
<label for="text">Text</label>
<textarea id="text" name="input" required rows="14" maxlength="200000"
 placeholder="Paste an article, a chapter, your notes…"></textarea>
<p class="hint"><span id="count">0</span> characters</p>
<div class="row">
<label>Voice <select id="voice" name="voice"><option value="">default</option></select></label>
<label>Speed <input id="speed" name="speed" type="range" min="0.5" max="2" step="0.05" value="1">
<output id="speed-out" for="speed">1.00&times;</output></label>
<label>Format <select id="format" name="response_format">
<option value="mp3">mp3</option><option value="wav">wav</option><option value="pcm">pcm</option>
<option value="flac">flac</option><option value="opus">opus</option><option value="aac">aac</option>
</select></label>
</div>
<label for="title">Title <span class="hint">(optional: taken from the text)</span></label>
<input id="title" name="title" maxlength="200">
<div id="key-row" hidden><label for="api-key">API key</label>
<input id="api-key" type="password" autocomplete="off"></div>
<p><button type="submit" id="submit">Create cast</button></p>
<p id="form-error" class="error" role="alert" hidden></p>
</form>
</main>"""
    return _page("speechd", body, "paste.js")


@cache
def _layouts_json() -> str:
    """speechd.audio's per-record decoding facts, for the player (a JSON data block)."""
    layouts = {fmt: layout.to_json() for fmt, layout in LAYOUTS.items()}
    return msgspec.json.encode(layouts).decode().replace("</", "<\\/")


def player_page(cast_id: str, title: str) -> str:
    # `cast_id` passed is_cast_id (url-safe base64 only); the title is the caster's text.
    body = f"""<script type="application/json" id="layouts">{_layouts_json()}</script>
<main class="player">
<header><p><a href="/" class="home">speechd</a></p>
<h1 id="title">{html.escape(title)}</h1><p id="meta" class="hint"></p></header>
<section class="controls">
<button id="play" type="button" disabled>Play</button>
<button id="resume" type="button" hidden>Resume</button>
<span class="time"><span id="clock">0:00</span> / <span id="duration">0:00</span></span>
<div id="bar" class="bar" title="Click to seek">
<div id="bar-ready"></div><div id="bar-played"></div></div>
<p id="status" role="status">Loading…</p>
</section>
<p id="failure" class="error" role="alert" hidden></p>
<p id="now" class="now" aria-live="polite"></p>
<ol id="captions" class="captions" aria-label="Transcript"></ol>
<pre id="source" class="source" aria-label="Your text" hidden></pre>
<p class="links"><a id="download" href="/v1/casts/{cast_id}/audio">Download audio</a> ·
<a id="subtitles" href="/v1/casts/{cast_id}/captions.vtt" download>Subtitles (WebVTT)</a> ·
<a id="subtitles-srt" href="/v1/casts/{cast_id}/captions.srt" download>SubRip</a></p>
</main>"""
    return _page(f"{title} · speechd", body, "player.js", f' data-cast-id="{cast_id}"')


def book_page(book_id: str, title: str) -> str:
    # `book_id` passed is_book_id (url-safe base64 only); the title is the uploader's text.
    body = f"""<main class="player book">
<header><p><a href="/" class="home">speechd</a></p>
<h1 id="title">{html.escape(title or "A book")}</h1><p id="meta" class="hint"></p></header>
<p id="resume" class="now" hidden><a id="resume-link" href="#">Continue</a></p>
<p id="status" role="status">Loading…</p>
<ol id="chapters" class="chapters" aria-label="Chapters"></ol>
<p class="links"><a id="download" hidden>Download the audiobook</a></p>
</main>"""
    return _page(f"{title or 'A book'} · speechd", body, "book.js", f' data-book-id="{book_id}"')


def missing_page(thing: str = "cast") -> str:
    body = f"""<main class="player"><header><p><a href="/" class="home">speechd</a></p>
<h1>No such {thing}</h1></header>
<p>This link does not lead to a {thing}. It may be mistyped, or the {thing} was removed.</p>
</main>"""
    return _page(f"No such {thing} · speechd", body, None)
