"""What an attention/FFN disaggregated (AFD) serving plan can be launched with today.

Neither vLLM nor SGLang runs AFD in a release. vLLM's external AFD plugin
(``vllm-project/afd-plugin``, README "Using the Plugin"; ``afd_plugin/config.py::AFDConfig``)
takes one object per engine, ``--additional-config '{"afd": {...}}'`` with ``role``
(``attention`` | ``ffn``), ``connector``, ``host``, ``port``, ``num_attention_ranks`` and
``num_ffn_ranks``, and wants ``VLLM_USE_V2_MODEL_RUNNER=0``. Its CUDA connector
``P2pNcclAFDConnector`` requires ``num_attention_ranks >= num_ffn_ranks`` and an exact multiple
(``afd_plugin/distributed/topology.py::validate_p2p_topology``); an attention rank is one
attention GPU (``(dp_rank * pcp + pcp_rank) * tp + tp_rank``, ``resolve_role_rank``). SGLang's
AFD (sgl-project/sglang#36258) runs on Ascend NPUs only, for Qwen3-MoE.

So ``planner emit vllm`` on an AFD plan writes, per AFD unit, the plugin's ``afd`` object for
each role (``afd_unit<u>_<role>.json``), and ``afd_roles.csv``: every instance's role, unit,
host and GPUs, the table a user's launcher (or ``planner.runtime``) follows. It writes no shell
script: the plugin's launch recipe is not a released interface. ``planner emit sglang`` refuses
AFD plans. The ports count up from the plugin's default 1239, one per unit.
"""
from __future__ import annotations

import csv
import io
import json

from planner.emit.types import Emission, UnsupportedByFormat
from planner.plan.document import Plan

CONNECTOR = "P2pNcclAFDConnector"
FIRST_AFD_PORT = 1239  # afd-plugin's default ``port``
PLUGIN = "vllm-project/afd-plugin"


def _pools(plan: Plan) -> dict[str, dict]:
    s = plan.serving or {}
    pools = {p.get("role"): p for p in s.get("pools", []) if isinstance(p, dict)}
    for role in ("attention", "ffn"):
        if role not in pools:
            raise ValueError(f"plan: an afd plan needs an {role} pool in serving.pools")
    return pools


def _int(pool: dict, key: str) -> int:
    value = pool.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"plan: serving.pools[{pool.get('role')}].{key} must be an integer "
                         f">= 1, got {value!r}")
    return value


def units(plan: Plan) -> list[dict]:
    """Per AFD unit: its attention instances, its FFN instance, and the rank counts the plugin
    sees; ValueError when the plugin's connector cannot run the unit."""
    pools = _pools(plan)
    att, ffn = pools["attention"], pools["ffn"]
    n_units = _int(ffn, "workers")
    tp, att_instances = _int(att, "tp"), _int(att, "workers")
    if att_instances % n_units:
        raise ValueError(f"plan: {att_instances} attention instances do not split evenly over "
                         f"{n_units} AFD units")
    per_unit = att_instances // n_units
    a_ranks, f_ranks = per_unit * tp, _int(ffn, "ep")
    if a_ranks < f_ranks or a_ranks % f_ranks:
        raise UnsupportedByFormat(
            f"vllm: {PLUGIN}'s {CONNECTOR} needs attention ranks >= FFN ranks in "
            f"an exact multiple (validate_p2p_topology); each unit of this plan "
            f"has {a_ranks} attention and {f_ranks} FFN ranks")
    instances = (plan.serving or {}).get("instances", [])
    of = {role: [i for i in instances if isinstance(i, dict) and i.get("role") == role]
          for role in ("attention", "ffn")}
    out = []
    for u in range(n_units):
        ffn_inst = of["ffn"][u] if u < len(of["ffn"]) else None
        if ffn_inst is None or not ffn_inst.get("nodes"):
            raise ValueError(f"plan: serving.instances has no ffn instance {u}")
        out.append({"unit": u, "attention": of["attention"][u * per_unit:(u + 1) * per_unit],
                    "ffn": ffn_inst, "num_attention_ranks": a_ranks,
                    "num_ffn_ranks": f_ranks, "host": ffn_inst["nodes"][0]["host"],
                    "port": FIRST_AFD_PORT + u})
    return out


def afd_config(unit: dict, role: str) -> dict:
    """The plugin's ``--additional-config`` object of one role of one unit."""
    return {"afd": {"role": role, "connector": CONNECTOR, "host": unit["host"],
                    "port": unit["port"], "num_attention_ranks": unit["num_attention_ranks"],
                    "num_ffn_ranks": unit["num_ffn_ranks"]}}


def roles_csv(found: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["unit", "role", "instance", "host", "gpus", "afd_host", "afd_port"])
    for u in found:
        for role, insts in (("attention", u["attention"]), ("ffn", [u["ffn"]])):
            for inst in insts:
                for node in inst.get("nodes", []):
                    w.writerow([u["unit"], role, inst.get("index"), node.get("host"),
                                " ".join(str(g) for g in node.get("gpus", [])), u["host"],
                                u["port"]])
    return buf.getvalue()


def render_vllm_afd(plan: Plan) -> Emission:
    found = units(plan)
    files = [("afd_roles.csv", roles_csv(found))]
    for u in found:
        for role in ("attention", "ffn"):
            files.append((f"afd_unit{u['unit']}_{role}.json",
                          json.dumps(afd_config(u, role), indent=1, sort_keys=True) + "\n"))
    notes = (f"vLLM runs AFD only through the external plugin {PLUGIN}: pass each "
             "afd_unit<u>_<role>.json as --additional-config to the engines of that role, with "
             "VLLM_USE_V2_MODEL_RUNNER=0; the plugin documents DeepSeek-V2/V3/V3.2.",
             "No launch script is written: the plugin's launch recipe is not a released "
             "interface. The prefill pool and its KV transfer to the attention pool are the "
             "plan's, not the plugin's.",
             f"Micro-batches planned: {(plan.serving or {}).get('micro_batches', 1)} (the "
             "plugin's dual-batch overlap runs two).")
    return Emission(tuple(files), notes)
