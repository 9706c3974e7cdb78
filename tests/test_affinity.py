"""planner.run.affinity: local ranks get disjoint blocks of the cores, every thread of the
process follows (those started before and after), and nothing is pinned where the ranks do not
fit or the user says no."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from planner.run.affinity import Pinning, core_blocks, pin_local_rank, shared_cores

ROOT = Path(__file__).resolve().parents[1]
linux_only = pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or not os.path.isdir("/proc/self/task"),
    reason="sched_setaffinity and /proc are Linux's")


@pytest.mark.parametrize("cores, ranks", [((0, 1), 2), ((3, 1, 2, 0), 2), (tuple(range(7)), 3),
                                          ((5,), 1), (tuple(range(16)), 16)])
def test_blocks_are_disjoint_equal_and_in_core_order(cores, ranks):
    blocks = core_blocks(cores, ranks)
    assert len(blocks) == ranks
    assert {len(b) for b in blocks} == {len(cores) // ranks}
    flat = [c for b in blocks for c in b]
    assert len(set(flat)) == len(flat) and set(flat) <= set(cores)
    assert flat == sorted(flat)  # rank r's block comes before rank r + 1's


@pytest.mark.parametrize("cores, ranks", [((0, 1), 3), ((0,), 2), ((0, 1), 0)])
def test_no_blocks_where_the_ranks_do_not_fit(cores, ranks):
    assert core_blocks(cores, ranks) == []


@pytest.mark.parametrize("cores, ranks, want", [
    ((0, 1), 3, [(0,), (1,), (0,)]), ((3, 1), 5, [(1,), (3,), (1,), (3,), (1,)]),
    ((4,), 2, [(4,), (4,)]), ((0, 1), 0, []), ((), 2, [])])
def test_shared_cores_go_round_robin_in_core_order(cores, ranks, want):
    assert shared_cores(cores, ranks) == want


def test_record_says_what_was_done():
    assert Pinning((0, 1), (1,)).record() == {"cores": 2, "pinned": True, "pinned_cores": [1]}
    assert Pinning((0, 1), why_not="3 local ranks on 2 cores").record() == {
        "cores": 2, "pinned": False, "not_pinned": "3 local ranks on 2 cores"}


_CHILD = """
import json, os, threading
from planner.run.affinity import pin_local_rank
seen = {}
share = os.environ.get("SHARE") == "1"
before = threading.Event(); stop = threading.Event()
def early():
    seen["early_tid"] = threading.get_native_id(); before.set(); stop.wait(10)
t = threading.Thread(target=early, daemon=True); t.start(); before.wait(10)
p = pin_local_rank(share=share)
def late():
    seen["late"] = sorted(os.sched_getaffinity(0))
u = threading.Thread(target=late); u.start(); u.join()
print(json.dumps({"record": p.record(), "main": sorted(os.sched_getaffinity(0)),
                  "early": sorted(os.sched_getaffinity(seen["early_tid"])), "late": seen["late"]}))
stop.set()
"""


def _child(cores: list[int], **env: str) -> dict:
    """Run :data:`_CHILD` under ``taskset``-like affinity ``cores``, with ``env``."""
    code = f"import os; os.sched_setaffinity(0, {cores!r})\n" + _CHILD
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT), **env})
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


def _two_cores() -> list[int]:
    """The first two cores this process may use (the test is skipped with fewer)."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip("needs 2 cores")
    return cores[:2]


@linux_only
def test_each_local_rank_and_all_its_threads_get_their_block():
    pair = _two_cores()
    for rank in (0, 1):
        got = _child(pair, LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2")
        assert got["record"]["pinned"] and got["record"]["cores"] == 2
        assert got["main"] == got["early"] == got["late"] == [pair[rank]]


@linux_only
@pytest.mark.parametrize("env, why", [({"PLANNER_PIN": "0"}, "PLANNER_PIN=0"),
                                      ({"LOCAL_WORLD_SIZE": "3"}, "3 local ranks on 2 cores")])
def test_left_alone_where_told_or_the_ranks_do_not_fit(env, why):
    pair = _two_cores()
    got = _child(pair, **{"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2", **env})
    assert got["record"] == {"cores": 2, "pinned": False, "not_pinned": why}
    assert got["main"] == got["early"] == got["late"] == pair


@linux_only
def test_ranks_that_outnumber_the_cores_share_them_when_asked():
    pair = _two_cores()
    for rank in (0, 1, 2):
        got = _child(pair, LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="3", SHARE="1")
        assert got["record"] == {"cores": 2, "pinned": True, "pinned_cores": [pair[rank % 2]]}
        assert got["main"] == got["early"] == got["late"] == [pair[rank % 2]]
    # PLANNER_PIN=0 still leaves them alone
    got = _child(pair, LOCAL_RANK="2", LOCAL_WORLD_SIZE="3", SHARE="1", PLANNER_PIN="0")
    assert not got["record"]["pinned"] and got["main"] == pair


def test_no_proc_means_not_pinned(tmp_path):
    got = pin_local_rank({"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}, str(tmp_path / "none"))
    assert not got.pinned and got.why_not


def test_an_nccl_rank_keeps_its_cores():
    from planner.run.affinity import pin_rank_for

    before = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    got = pin_rank_for("nccl")
    assert not got.pinned and got.why_not == "GPU ranks (nccl)"
    if before is not None:
        assert os.sched_getaffinity(0) == before
