"""Import direction between our packages, read from the source with ``ast``.

topologies imports none of ours; cost_models imports only topologies; solvers imports none of
ours; planner may import everything. Lazy imports inside functions count too.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OURS = {"topologies", "cost_models", "solvers", "planner"}
ALLOWED = {
    "topologies": set(),
    "cost_models": {"topologies"},
    "solvers": set(),
    "planner": {"topologies", "cost_models", "solvers"},
}


def imported_packages(path: Path) -> set[str]:
    """Top-level names of every absolute import in ``path``."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_every_package_is_checked():
    assert set(ALLOWED) == OURS
    assert all((ROOT / package / "__init__.py").is_file() for package in OURS)


@pytest.mark.parametrize("package", sorted(OURS))
def test_imports_follow_the_data_flow(package):
    bad = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        wrong = (imported_packages(path) & OURS) - ALLOWED[package] - {package}
        if wrong:
            bad[str(path.relative_to(ROOT))] = sorted(wrong)
    assert not bad, f"{package} may import only {sorted(ALLOWED[package])} of ours: {bad}"


def test_relative_imports_stay_inside_their_package():
    """A relative import cannot leave its package here: each package is one level deep."""
    for package in OURS:
        for path in (ROOT / package).rglob("*.py"):
            depth = len(path.relative_to(ROOT / package).parts)  # 1 for package/module.py
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ImportFrom) and node.level:
                    assert node.level <= depth, f"{path}: relative import leaves {package}"
