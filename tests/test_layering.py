"""Import direction between our packages and between planner's rooms, read from the source
with ``ast`` (lazy imports inside functions count too; imports under ``if TYPE_CHECKING:``
are annotations only and do not).

Packages: topologies imports none of ours; cost_models imports only topologies; solvers imports
none of ours; planner may import everything.

Rooms of planner (``docs/architecture.md``): ``report``, ``emit`` and ``run`` read Plans (or
plain data the CLI hands them) and import neither ``cost_models`` nor ``solvers`` nor a plan
family; the one exception is ``planner/run/kernels.py``, the runtime kernel the reference job
calls for real-time expert quotas. The plan families (``training``, ``experts``) never import
each other. ``inputs`` and ``plan`` are shared by every room and import no room but
``inputs``/``plan``. Only ``cli`` may import every room.
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
# planner's rooms: what each may import, as dotted prefixes of module names.
SHARED = {"planner.__version__", "planner.errors", "planner.files", "planner.inputs", "planner.plan",
          "topologies"}
ROOM_ALLOWED = {
    "inputs": SHARED | {"cost_models"},
    "plan": SHARED | {"cost_models"},
    "training": SHARED | {"planner.training", "cost_models", "solvers"},
    "experts": SHARED | {"planner.experts", "cost_models", "solvers"},
    "serving": SHARED | {"planner.serving", "cost_models", "solvers"},
    "report": SHARED | {"planner.report"},
    "emit": SHARED | {"planner.emit"},
    "run": SHARED | {"planner.run"},
}
EXCEPTIONS = {
    "planner/run/kernels.py": {"solvers.experts.quota"},  # the runtime kernel
    # The validator recomputes the split an engine's dispatch rule gives a placement (a pure
    # model of the engine, the same whichever solver planned it).
    "planner/plan/validate_experts.py": {"solvers.experts"},
}


def _type_checking_lines(tree: ast.AST) -> set[int]:
    """Line numbers inside ``if TYPE_CHECKING:`` blocks."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def imported_modules(path: Path) -> set[str]:
    """Dotted names of every absolute import in ``path`` (``from a.b import c`` gives both
    ``a.b`` and ``a.b.c``, so a sub-module imported by name counts as itself)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    skip = _type_checking_lines(tree)
    names: set[str] = set()
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def imported_packages(path: Path) -> set[str]:
    """Top-level names of every absolute import in ``path``."""
    return {name.split(".")[0] for name in imported_modules(path)}


def _ours(name: str) -> bool:
    return name.split(".")[0] in OURS


def _allowed(name: str, prefixes: set[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def room_violations(root: Path) -> dict[str, list[str]]:
    """Per file of a room of ``root/planner``, the imports of ours its room may not make."""
    bad: dict[str, list[str]] = {}
    for room, prefixes in ROOM_ALLOWED.items():
        for path in sorted((root / "planner" / room).rglob("*.py")):
            rel = str(path.relative_to(root))
            allowed = prefixes | EXCEPTIONS.get(rel, set())
            modules = {m for m in imported_modules(path) if _ours(m)}
            # ``from planner.plan import document`` names planner.plan and planner.plan.document:
            # a module is fine if it or a longer name it stands for is allowed.
            wrong = sorted(m for m in modules if not _allowed(m, allowed)
                           and not any(o.startswith(m + ".") and _allowed(o, allowed)
                                       for o in modules))
            wrong = [m for m in wrong if m != "planner"]  # ``from planner import __version__``
            if wrong:
                bad[rel] = wrong
    return bad


def test_every_package_is_checked():
    assert set(ALLOWED) == OURS
    assert all((ROOT / package / "__init__.py").is_file() for package in OURS)


def test_every_room_is_checked():
    rooms = {p.name for p in (ROOT / "planner").iterdir()
             if p.is_dir() and (p / "__init__.py").is_file()}
    assert rooms == set(ROOM_ALLOWED) | {"cli"}, rooms


@pytest.mark.parametrize("package", sorted(OURS))
def test_imports_follow_the_data_flow(package):
    bad = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        wrong = (imported_packages(path) & OURS) - ALLOWED[package] - {package}
        if wrong:
            bad[str(path.relative_to(ROOT))] = sorted(wrong)
    assert not bad, f"{package} may import only {sorted(ALLOWED[package])} of ours: {bad}"


def test_planner_rooms_follow_the_architecture():
    bad = room_violations(ROOT)
    assert not bad, f"imports that cross planner's rooms (docs/architecture.md): {bad}"


def test_room_check_catches_a_wrong_import(tmp_path):
    """The room check can fail: a report that calls a solver and a training module that
    imports the experts family are both caught."""
    for room in ROOM_ALLOWED:
        (tmp_path / "planner" / room).mkdir(parents=True)
    (tmp_path / "planner" / "report" / "bad.py").write_text(
        "from solvers.pipeline.sim import simulate\n")
    (tmp_path / "planner" / "training" / "bad.py").write_text(
        "def f():\n    from planner.experts.plan import plan_experts\n")
    (tmp_path / "planner" / "report" / "ok.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from planner.training.search import SearchStats\nfrom planner.plan import document\n")
    assert room_violations(tmp_path) == {
        "planner/report/bad.py": ["solvers.pipeline.sim", "solvers.pipeline.sim.simulate"],
        "planner/training/bad.py": ["planner.experts.plan", "planner.experts.plan.plan_experts"]}


def test_relative_imports_stay_inside_their_package():
    """A relative import cannot climb out of its top-level package."""
    for package in OURS:
        for path in (ROOT / package).rglob("*.py"):
            depth = len(path.relative_to(ROOT / package).parts)  # 1 for package/module.py
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ImportFrom) and node.level:
                    assert node.level <= depth, f"{path}: relative import leaves {package}"
