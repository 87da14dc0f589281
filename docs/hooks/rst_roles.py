"""mkdocs hook: show the reST markup of the library's docstrings as the reader expects it.

The docstrings are numpy style and keep Sphinx roles such as ``:class:`~structmat.Product```;
mkdocstrings renders them as literal text (":class:" followed by the code). This hook rewrites
each role on the rendered pages to the code alone, Sphinx's way: ``~a.b.C`` shows ``C``, any
other target shows in full. The types of the *Parameters* tables are rendered as inline code with
their reST literals' double backquotes inside (``array_like, shape ``(*, T)`` ``): the hook drops
those backquotes. Only the pages under ``docs/api/`` are touched, and the site only, never the docstrings.
"""

from __future__ import annotations

import re

ROLES = r"(?::py)?:(?:class|meth|func|mod|attr|data|exc|obj|const)"
# after markdown: the role's text, then the target as inline code
RENDERED = re.compile(ROLES + r":<code>(~?)([^<]+)</code>")
# left raw (inside a code block or a literal): :role:`target`
RAW = re.compile(ROLES + r":`(~?)([^`]+)`")
# inline code (no highlighting spans inside) holding reST double backquotes
LITERAL_IN_CODE = re.compile(r"<code>([^<]*``[^<]*)</code>")


def _target(tilde: str, name: str) -> str:
    return name.rsplit(".", 1)[-1] if tilde else name


def on_page_content(html: str, *, page, **kwargs) -> str:
    if not page.file.src_uri.startswith("api/"):  # only the API reference renders docstrings
        return html
    html = RENDERED.sub(lambda m: f"<code>{_target(m[1], m[2])}</code>", html)
    html = RAW.sub(lambda m: _target(m[1], m[2]), html)
    return LITERAL_IN_CODE.sub(lambda m: "<code>" + m[1].replace("``", "") + "</code>", html)
