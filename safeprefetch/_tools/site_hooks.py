"""MkDocs hooks for the site: model pages link their playground and source; API roles become links.

The model pages are ``docs/generate.py``'s output and must stay byte for
byte what it writes (``tests/test_docs.py``), so the site never edits them
on disk. While MkDocs renders one, this hook (which :mod:`.site` names in
the MkDocs config) appends a link to the model's playground page, and
points the page's link to the model's source file (``../../models/NAME.py``,
outside the docs folder) at the site's copy of that source; a link from any
page to the repository's ``README.md`` goes to the site's copy of it. MkDocs loads
this file by path and calls the functions by name; nothing else imports it.

The public docstrings cross-reference in Sphinx's roles (``:class:`Lease```),
which mkdocstrings leaves as text: ":class:" before the code. Once a page is
rendered, :func:`on_page_content` drops the role and, where the page
documents the name (an anchor ``safeprefetch.Lease``, or one ending in
``.Lease``), links the code to it; ``~`` keeps only the last component, as
in Sphinx.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["on_page_content", "on_page_markdown"]

#: The site's copy of the repository's README.md (see ``site._readme``).
README = "readme.md"
_ROLE = re.compile(r":(?:class|func|meth|data|mod|attr|exc|obj):<code>([^<]*)</code>")
_ID = re.compile(r'\bid="([\w.]+)"')


def on_page_markdown(markdown: str, page: Any, files: Any, **_: Any) -> str:
    """Point links to the repository's README at the site's copy; link ``models/NAME.md`` to its
    playground and its source (when the site has them)."""
    uri = page.file.src_uri
    depth = uri.count("/")
    if files.get_file_from_path(README) is not None:  # docs/x.md links ../README.md; the site has readme.md
        markdown = markdown.replace("](" + "../" * (depth + 1) + "README.md", "](" + "../" * depth + README)
    if not (uri.startswith("models/") and uri.endswith(".md") and depth == 1):
        return markdown
    name = uri[len("models/"):-len(".md")]
    if files.get_file_from_path(f"source/{name}.md") is not None:
        markdown = markdown.replace(f"](../../models/{name}.py)", f"](../source/{name}.md)")
    if files.get_file_from_path(f"playground/{name}.md") is not None:
        markdown += (f"\n\n---\n\n**Play it:** be the scheduler of `{name}` in the "
                     f"[playground](../playground/{name}.md).\n")
    return markdown


def on_page_content(html: str, page: Any, **_: Any) -> str:
    """Replace the Sphinx roles left in rendered docstrings by code, linked to the page's own anchor."""
    if ":<code>" not in html:
        return html
    ids = set(_ID.findall(html))

    def link(match: re.Match) -> str:
        written = match.group(1)
        target = written.lstrip("~").lstrip(".")
        shown = target.rsplit(".", 1)[-1] if written.startswith("~") else target
        found = [i for i in ids if i == target or i.endswith("." + target)]
        code = f"<code>{shown}</code>"
        return f'<a href="#{found[0]}">{code}</a>' if len(found) == 1 else code

    return _ROLE.sub(link, html)
