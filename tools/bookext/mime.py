"""One myst-nb mime renderer for the book's own output types.

A page's code cell may display a mime bundle whose type belongs to the book
(for example ``application/vnd.mlbook.live+json``, a live figure). JupyterLab
ignores such a type and shows the bundle's other entries; in the HTML build
myst-nb hands it here, and the handler registered for the type turns it into
docutils nodes. ``HANDLERS`` maps a mime type to ``handler(renderer, data)
-> list[nodes.Element]``, where ``data`` is myst-nb's MimeData (``.content``
is the output's value, ``.mime_type`` its type).
"""

from __future__ import annotations

from collections.abc import Callable

HANDLERS: dict[str, Callable] = {}  # mime type -> handler


def register(mime_type: str):
    """Decorator: ``handler`` renders ``mime_type`` in the HTML build."""

    def add(handler):
        HANDLERS[mime_type] = handler
        return handler

    return add


def _load_handlers() -> None:
    import importlib
    import pkgutil

    import bookext

    for info in pkgutil.iter_modules(bookext.__path__):
        if info.name != "mime":
            importlib.import_module(f"bookext.{info.name}")


class MlbookMime:
    """The renderer myst-nb loads from the entry point. The book's types come
    first in the HTML builder's priority list, so a bundle that also carries
    a widget view or an image is drawn from the book's type there."""

    mime_priority_overrides = []  # filled by _priorities() on first use

    @staticmethod
    def handle_mime(renderer, data, inline: bool):
        if not HANDLERS:
            _load_handlers()
        handler = HANDLERS.get(data.mime_type)
        if handler is None or inline:
            return None
        return handler(renderer, data)


def _priorities() -> list[tuple[str, str, int]]:
    _load_handlers()
    return [("html", mime, 0) for mime in HANDLERS]


MlbookMime.mime_priority_overrides = _priorities()
