"""MkDocs hooks of the documentation site (mkdocs.yml, ``hooks:``).

The docstrings name other objects with reStructuredText roles (``:class:`surge.Module```), which Markdown does not
know: mkdocstrings renders the role's name as text before the code span (``:class: surge.Module``). The role adds
nothing a reader needs, so the rendered pages drop it and keep the code span.
"""

from __future__ import annotations

import re
from typing import Any

_ROLE = re.compile(r":(?:class|mod|func|meth|attr|data|exc|obj|const|py:\w+):(?=<code>)")


def on_page_content(html: str, **kwargs: Any) -> str:
    """The page's HTML with every role prefix before a code span removed."""
    return _ROLE.sub("", html)
