"""Every ``python`` code block of the documentation pages runs: one test per page of ``docs/**/*.md``.

The convention (``docs/contributing_docs.md``): a fenced block whose info string starts with the word
``python`` runs (plain, ``title="..."``, and markdown-exec's ``exec="on"`` blocks alike); ``text``,
``bash``, ``pycon`` and any other language do not. The blocks of one page run in order in one shared
namespace, like the cells of a notebook, with the repository root as working directory, matplotlib
on the Agg backend and what they print captured. A block that raises fails the page's test with the
page's path and the block's line number, and the traceback points at the line of the page.
"""

import contextlib
import io
import os
import re
import sys
import textwrap
import traceback
from pathlib import Path

import pytest

os.environ["MPLBACKEND"] = "Agg"  # before any block imports matplotlib

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("**/*.md"))
OPENING = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\n]*)$")


def code_blocks(text: str) -> list[tuple[int, str, str]]:
    """The fenced blocks of a page as ``(line of the opening fence (1-based), info string, code)``; indented
    fences (inside admonitions, tabs, lists) count, their indentation removed."""
    lines, blocks, i = text.splitlines(), [], 0
    while i < len(lines):
        m = OPENING.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, info = m["indent"], m["fence"], m["info"].strip()
        closing = re.compile(rf"^{re.escape(indent)}{fence[0]}{{{len(fence)},}}[ \t]*$")
        j = i + 1
        while j < len(lines) and not closing.match(lines[j]):
            j += 1
        body = [line[len(indent):] if line.startswith(indent) else line.lstrip() for line in lines[i + 1 : j]]
        blocks.append((i + 1, info, textwrap.dedent("\n".join(body))))
        i = j + 1
    return blocks


def runs(info: str) -> bool:
    """Whether a block with this info string runs: its language word is ``python``."""
    words = info.replace("{", " ").replace(".", " ").split()
    return bool(words) and words[0] == "python"


def python_blocks(page: Path) -> list[tuple[int, str]]:
    return [(line, code) for line, info, code in code_blocks(page.read_text()) if runs(info)]


def _page_id(page: Path) -> str:
    return page.relative_to(DOCS).as_posix()


@pytest.mark.parametrize("page", [p for p in PAGES if python_blocks(p)], ids=_page_id)  # pages of prose alone: nothing to run
def test_page_code_runs(page, monkeypatch):
    monkeypatch.chdir(ROOT)
    blocks = python_blocks(page)
    rel = page.relative_to(ROOT).as_posix()
    namespace = {"__name__": "__main__", "__file__": str(page)}
    try:
        for line, code in blocks:
            # padded so that the traceback's line numbers are the page's
            source = "\n" * line + code
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    exec(compile(source, rel, "exec"), namespace)
            except Exception as exc:  # any failure of a block fails the page
                tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
                pytest.fail(f"{rel}: the python block at line {line} raised {type(exc).__name__}: {exc}\n\n{tb}",
                            pytrace=False)
    finally:
        if "matplotlib.pyplot" in sys.modules:
            sys.modules["matplotlib.pyplot"].close("all")


def test_the_parser_finds_blocks_and_their_lines():
    text = "# t\n\n```python\nx = 1\n```\n\n!!! note\n    ```python title=\"a\"\n    y = x\n    ```\n```text\nno\n```\n" \
           "```python exec=\"on\"\nprint(1)\n```\n````markdown\n```python\nnot a block\n```\n````\n"
    found = [(line, info) for line, info, _ in code_blocks(text) if runs(info)]
    assert found == [(3, "python"), (8, 'python title="a"'), (14, 'python exec="on"')]
    assert code_blocks(text)[1][2] == "y = x"


def _readme_command(marker: str) -> str:
    """The fenced command after ``<!-- marker -->`` in the README (what .ci/run reads for the tests)."""
    text = (ROOT / "README.md").read_text()
    after = text.split(f"<!-- {marker} -->", 1)[1]
    return code_blocks(after)[0][2].strip()


def test_install_page_copies_the_readme_commands():
    page = (DOCS / "getting_started" / "install.md").read_text()
    commands = [code for _, info, code in code_blocks(page) if info == "bash"]
    for marker in ("tour-command", "test-command"):
        assert _readme_command(marker) in commands, f"docs/getting_started/install.md lacks the README's {marker}"


def test_api_reference_covers_the_public_names():
    """Every name of the public packages' ``__all__`` (``structmat``, ``nn``, ``matrices``, ``attention``) has an entry
    in ``docs/api/``; ``structmat.testing`` is rendered whole, and mkdocstrings drops what has no docstring."""
    import structmat
    import structmat.attention
    import structmat.matrices
    import structmat.nn
    import structmat.testing

    bare = [n for n in structmat.testing.__all__ if not getattr(structmat.testing, n).__doc__]
    assert not bare, f"structmat.testing names without a docstring (not rendered): {bare}"

    text = "\n".join(p.read_text() for p in sorted((DOCS / "api").glob("*.md")))
    documented = set(re.findall(r"^::: ([\w.]+)", text, re.M))
    with_members = re.findall(r"^::: ([\w.]+)\n(?:[ \t]+.*\n)*?[ \t]+members: \[([^\]]*)\]", text, re.M)
    documented |= {f"{ident}.{m}" for ident, members in with_members for m in re.split(r"\s*,\s*", members.strip())}
    names = [n for n in structmat.__all__ if n != "nn"] + [f"nn.{n}" for n in structmat.nn.__all__]
    names += [f"{pkg.__name__[10:]}.{n}" for pkg in (structmat.matrices, structmat.attention) for n in pkg.__all__]
    missing = [n for n in names if not any(d == f"structmat.{n}" or d.endswith("." + n.split(".")[-1]) for d in documented)]
    assert not missing, f"no API entry for {missing}"


def _public_objects() -> list[tuple[str, object]]:
    import structmat
    import structmat.attention
    import structmat.matrices
    import structmat.nn
    import structmat.testing

    packages = (structmat, structmat.nn, structmat.testing, structmat.matrices, structmat.attention)
    found = {}
    for pkg in packages:
        for name in pkg.__all__:
            obj = getattr(pkg, name)
            if callable(obj) and id(obj) not in found:
                found[id(obj)] = (f"{pkg.__name__}.{name}", obj)
    return sorted(found.values(), key=lambda item: item[0])


PUBLIC = _public_objects()


@pytest.mark.parametrize("name, obj", PUBLIC, ids=[name for name, _ in PUBLIC])
def test_public_docstring_examples_run_as_pasted(name, obj):
    """The examples of public names' docstrings (methods included) run in an empty namespace, as a user pasting
    them from the API pages would: ``--doctest-modules`` gives them the defining module's globals instead."""
    import doctest

    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    out = io.StringIO()
    for test in doctest.DocTestFinder(exclude_empty=True).find(obj, name, globs={}):
        runner.run(test, out=out.write)
    assert not runner.failures, out.getvalue()[-3000:]
