"""Books over HTTP: `POST /v1/books` (an EPUB, Markdown or plain-text upload, as the body or a
multipart form), a book's status, its cancel, and a chapter opened by a listener
(`books_router`). The service behind them is `speechd.service.BookService`; a chapter is an
ordinary cast, read through the cast routes."""

from __future__ import annotations

from ._routes import books_router

__all__ = ["books_router"]
