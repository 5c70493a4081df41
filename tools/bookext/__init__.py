"""Sphinx-side pieces of the book's HTML build (not part of the mlbook
package a reader imports): the myst-nb mime renderer for the book's own
output types. tools/bookbuild runs jupyter-book with tools/ on PYTHONPATH,
and pyproject.toml registers ``bookext.mime:MlbookMime`` under myst-nb's
``myst_nb.mime_renderers`` entry point.
"""
