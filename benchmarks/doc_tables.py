"""Keep docs/benchmarks.md current: each benchmark rewrites its own marked section."""
from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"
HEAD = ("# Benchmarks\n\nEach section is written by the script it names; raw results are in "
        "`benchmarks/results/`. Machine: the project's standard 2-core, 24 GiB box unless a "
        "section says otherwise.\n")


def update_section(name: str, lines: list[str]) -> None:
    """Replace (or append) the block between ``<!-- name -->`` and ``<!-- /name -->``."""
    text = DOC.read_text() if DOC.exists() else HEAD
    block = f"<!-- {name} -->\n" + "\n".join(lines) + f"\n<!-- /{name} -->"
    pattern = re.compile(rf"<!-- {re.escape(name)} -->.*?<!-- /{re.escape(name)} -->", re.S)
    text = pattern.sub(lambda _: block, text) if pattern.search(text) else text + "\n" + block + "\n"
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text(text)
