"""MkDocs hooks for the site: a model page links its playground and its source.

The model pages are ``docs/generate.py``'s output and must stay byte for
byte what it writes (``tests/test_docs.py``), so the site never edits them
on disk. While MkDocs renders one, this hook (which :mod:`.site` names in
the MkDocs config) appends a link to the model's playground page, and
points the page's link to the model's source file (``../../models/NAME.py``,
outside the docs folder) at the site's copy of that source. MkDocs loads
this file by path and calls the functions by name; nothing else imports it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["on_page_markdown"]


def on_page_markdown(markdown: str, page: Any, files: Any, **_: Any) -> str:
    """Link ``models/NAME.md`` to its playground and its source (when the site has them); leave other pages."""
    uri = page.file.src_uri
    if not (uri.startswith("models/") and uri.endswith(".md") and uri.count("/") == 1):
        return markdown
    name = uri[len("models/"):-len(".md")]
    if files.get_file_from_path(f"source/{name}.md") is not None:
        markdown = markdown.replace(f"](../../models/{name}.py)", f"](../source/{name}.md)")
    if files.get_file_from_path(f"playground/{name}.md") is not None:
        markdown += (f"\n\n---\n\n**Play it:** be the scheduler of `{name}` in the "
                     f"[playground](../playground/{name}.md).\n")
    return markdown
