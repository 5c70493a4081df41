"""Each script in a page's head once (a Sphinx extension, listed in
_config.yml's ``sphinx.extra_extensions`` as ``bookext.pagehead``).

Jupyter Book's build registers the inline scripts of sphinx-thebe and
sphinx-togglebutton twice, so every page carried each twice: the second
copy of sphinx-thebe's configuration re-declares its ``const THEBE_JS_URL``
and threw "Identifier 'THEBE_JS_URL' has already been declared" on every
page. The page's list of scripts keeps the first of identical entries (same
file or inline body, same attributes, same priority), in order.
"""

from __future__ import annotations


def unique_scripts(app, pagename, templatename, context, doctree) -> None:
    """html-page-context, after every other handler: drop repeated scripts."""
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, kept = set(), []
    for script in scripts:
        # an inline script's file is None from one registration, "" from the
        # other
        attributes = getattr(script, "attributes", {})
        key = (
            getattr(script, "filename", script) or "",
            getattr(script, "priority", 500),
            tuple(sorted(attributes.items())),
        )
        if key not in seen:
            seen.add(key)
            kept.append(script)
    scripts[:] = kept


def setup(app):
    app.connect("html-page-context", unique_scripts, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}
