"""Every HTTP concern of speechd: the app and its lifespan (`app`), OpenAI's routes, live
casts' input route and WebSocket (`openai_compat`), the cast API, the public read path, the
pages and their static files (`gateway`), the api's metrics (`metrics`), and the plumbing they
share in private modules: body decoding (`_bodies`), the error map (`_errors`), API keys and
bearer tokens (`_auth`), the links' base and the headers that name a cast (`_links`; the links
themselves are `speechd.service`'s, which the Wyoming door builds alike), wire field types
(`_fields`), streamed bodies and their aborts (`_streaming`), client addresses (`_clients`)
and stream slots per client (`_slots`).

The routes are thin: they decode, call the HTTP-free `speechd.service`, and shape the answer.
Nothing below this package imports it, and it imports neither `speechd.worker` (workers are
heard from through the store, which the service reads) nor the store itself: the service is
its one door to it. Its surface is what `speechd.cli` needs to serve it.
"""

from __future__ import annotations

from .app import WorkerSupervisor, close_streams, create_app
from .openai_compat import MAX_WS_MESSAGE_BYTES

__all__ = ["MAX_WS_MESSAGE_BYTES", "WorkerSupervisor", "close_streams", "create_app"]
