"""Every ``python`` code block of the documentation pages runs (the blocks of a page share one namespace)."""

import re
from pathlib import Path

import pytest

PAGES = sorted((Path(__file__).resolve().parents[1] / "docs").glob("**/*.md"))
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


@pytest.mark.parametrize("page", [p for p in PAGES if BLOCK.search(p.read_text())], ids=lambda p: p.stem)
def test_page_examples_run(page):
    namespace = {"__name__": f"docs_{page.stem}"}
    blocks = BLOCK.findall(page.read_text())
    for i, block in enumerate(blocks):
        exec(compile(block, f"{page.name}[block {i}]", "exec"), namespace)  # a failing example fails here
    assert blocks
