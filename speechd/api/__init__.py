"""Every HTTP concern of speechd: the app and its lifespan (`app`), OpenAI's routes and the
live WebSocket (`openai_compat`), the cast API, the public read path and the pages
(`gateway`), the api's metrics (`metrics`), and the plumbing they share: body decoding
(`_bodies`), the error map (`_errors`), API keys (`_auth`), streamed bodies (`_streaming`).

The routes are thin: they decode, call the HTTP-free `speechd.service`, and shape the answer.
Nothing below this package imports it, and it never imports `speechd.worker` (workers are
heard from through the store, `speechd.casts`). Its surface is what `speechd.cli` needs to
serve it.
"""

from __future__ import annotations

from .app import WorkerSupervisor, close_streams, create_app
from .openai_compat import MAX_WS_MESSAGE_BYTES

__all__ = ["MAX_WS_MESSAGE_BYTES", "WorkerSupervisor", "close_streams", "create_app"]
