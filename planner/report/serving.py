"""Serving reports: the search's best colocated and disaggregated deployments side by side, the
top plans per mode, a Pareto picture, and one estimate. They format what they are handed."""
from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text


def _layout(pool: dict) -> str:
    if pool["role"] == "ffn":  # expert GPUs of each AFD unit, expert parallel
        return f"ep{pool['ep']} x{pool['workers']}"
    parts = [f"tp{pool['tp']}"]
    for key in ("pp", "dp", "ep"):
        if pool.get(key, 1) > 1:
            parts.append(f"{key}{pool[key]}")
    return "·".join(parts) + f" b{pool['batch']} x{pool['workers']}"


def layout_text(plan: dict) -> str:
    """One line per pool: role, degrees, batch and instances (AFD: the micro-batches)."""
    m = plan.get("micro_batches")
    return "\n".join(f"{p['role'][:3]} {_layout(p)}" + (f" m{m}" if m and p["role"] ==
                                                           "attention" else "")
                     for p in plan["pools"])


def plans_table(plans: list[dict], title: str) -> Table:
    """One row per plan; where the cluster prices its GPUs, output kilotokens per dollar too
    (what ``--objective per-dollar`` ranks by)."""
    priced = bool(plans) and all("output_tokens_per_dollar" in p for p in plans)
    t = Table(title=title, title_justify="left")
    for name, just in (("#", "right"), ("mode", "left"), ("layout", "left"),
                       ("GPUs", "right"), ("tok/s\n/GPU", "right"), ("tok/s\n/user", "right"),
                       ("TTFT\nms", "right"), ("TPOT\nms", "right"), ("SLO", "left")):
        t.add_column(name, justify=just, overflow="fold", no_wrap=name != "layout")
        if priced and name == "tok/s\n/GPU":
            t.add_column("ktok\n/$", justify="right", no_wrap=True)
    for i, p in enumerate(plans, 1):
        dollars = [f"{p['output_tokens_per_dollar'] / 1e3:.0f}"] if priced else []
        t.add_row(str(i), p["mode"], layout_text(p), str(p["gpus"]),
                  f"{p['output_tokens_per_s_per_gpu']:.0f}", *dollars,
                  f"{p['output_tokens_per_s_per_user']:.1f}",
                  "inf" if p["ttft_s"] is None else f"{p['ttft_s'] * 1e3:.0f}",
                  f"{p['tpot_s'] * 1e3:.1f}", "met" if p["meets_slo"] else "missed")
    if any(p.get("mode") == "colocated" for p in plans):
        t.caption = ("TPOT: the mean at the plan's rate; a colocated TPOT target is judged "
                     "with every slot busy ('planner explain' shows both)")
    return t


def pareto_plot(points: list[dict], width: int = 56, height: int = 12) -> Text:
    """Tokens/s/GPU (up) against tokens/s/user (right): c colocated, d disaggregated decode."""
    if not points:
        return Text("")
    xs = [p["tokens_per_s_per_user"] for p in points]
    ys = [p["tokens_per_s_per_gpu"] for p in points]
    x0, x1, y1 = min(xs), max(xs), max(ys)
    grid = [[" "] * width for _ in range(height)]
    for p in points:
        col = int((p["tokens_per_s_per_user"] - x0) / max(x1 - x0, 1e-9) * (width - 1))
        row = height - 1 - int(p["tokens_per_s_per_gpu"] / max(y1, 1e-9) * (height - 1))
        grid[row][col] = {"colocated": "c", "afd-decode": "a"}.get(p["mode"], "d")
    lines = [f"{y1:8.0f} ┤" + "".join(grid[0])]
    lines += ["         │" + "".join(r) for r in grid[1:]]
    lines.append("       0 └" + "─" * width)
    legend = "c colocated, d disaggregated decode" + (
        ", a AFD decode" if any(p["mode"] == "afd-decode" for p in points) else "")
    lines.append(f"          {x0:<10.1f}tokens/s/user{x1:>8.1f}")
    lines.append(f"          ({legend})")
    return Text("Pareto front: tokens/s/GPU vs tokens/s/user\n" + "\n".join(lines))


def render_serve(result: dict) -> Group:
    best = result["plans"]
    head = Text(f"{result['model']} on {result['gpus']} x {result['gpu']}, ISL {result['isl']} "
                f"OSL {result['osl']}, TTFT <= {result['ttft_ms']} ms, "
                f"TPOT <= {result['tpot_ms']} ms; {result['layouts']} layouts in "
                f"{result['search_s']:.2f} s")
    afd = "best_afd" in result
    side = [p for p in (result.get("best_colocated"), result.get("best_disagg"),
                        result.get("best_afd")) if p]
    title = "Best colocated vs disaggregated" + (" vs AFD" if afd else "")
    parts = [head, plans_table(side, title), Text(f"Why: {result['why']}")]
    if afd:
        parts.append(Text(f"AFD: {result['afd_verdict']}"))
        for st in result.get("afd_search") or []:
            parts.append(Text(f"AFD search (prefill on {st['prefill_on']}): "
                              f"{st['degree_combinations']} degree combinations, "
                              f"{st['pruned']} pruned by bound, {st['layouts_priced']} "
                              f"layouts priced; gap {st['gap']:.1%}"))
    if best:
        parts.append(plans_table(best, "Top plans"))
    for key, title in (("micro_batches", "AFD unit by micro-batch count"),
                       ("ratio", "AFD unit by attention:FFN GPUs")):
        rows = (result.get("afd_sensitivity") or {}).get(key)
        if rows:
            parts.append(sensitivity_table(rows, title))
    parts.append(pareto_plot(result["pareto"]))
    return Group(*parts)


def sensitivity_table(rows: list[dict], title: str) -> Table:
    """Decode tokens/s/GPU of an AFD unit, one row per variant, at its best batch."""
    t = Table(title=title, title_justify="left")
    for name in ("attn:FFN\nGPUs", "m", "batch", "TPOT\nms", "tok/s\n/GPU", "bound"):
        t.add_column(name, justify="left" if name == "bound" else "right", no_wrap=True)
    for r in rows:
        ok = r["batch"] is not None
        t.add_row(f"{r['attention_gpus']}:{r['ffn_gpus']}", str(r["micro_batches"]),
                  str(r["batch"]) if ok else "-",
                  f"{r['tpot_s'] * 1e3:.1f}" if ok else "-",
                  f"{r['output_tokens_per_s_per_gpu']:.0f}" if ok else "-", r["bound"])
    return t


def render_serve_estimate(est: dict) -> Group:
    t = Table(title=f"{est['mode']} deployment, {est['gpus']} GPUs", title_justify="left")
    t.add_column("quantity")
    t.add_column("value", justify="right")
    for key, label in (("ttft_s", "TTFT mean"), ("ttft_p90_s", "TTFT p90")):
        t.add_row(label, "unbounded" if est[key] is None else f"{est[key] * 1e3:.1f} ms")
    t.add_row("TPOT", f"{est['tpot_s'] * 1e3:.2f} ms")
    if est.get("overloaded"):
        t.add_row("overloaded", f"offered {est['offered_rate_per_s']:.3g} req/s, serves "
                  f"{est['request_rate_per_s']:.3g}")
    for key in ("output_tokens_per_s_per_gpu", "output_tokens_per_s_per_user",
                "request_rate_per_s", "kv_transfer_s"):
        t.add_row(key.replace("_", " "), f"{est[key]:.3g}")
    t.add_row("bound by", est["bound"])
    t.add_row("fits", "yes" if est["fits"] else "NO")
    pools = Table(title="Pools (memory per GPU, GB)", title_justify="left")
    for col in ("role", "layout", "weights", "KV", "act.", "capacity", "step ms"):
        pools.add_column(col, justify="left" if col in ("role", "layout") else "right")
    for p in est["pools"]:
        m = p["memory"]
        pools.add_row(p["role"], _layout(p), f"{m['weights_gb']:.1f}", f"{m['kv_gb']:.1f}",
                      f"{m['activations_gb']:.1f}", f"{m['capacity_gb']:.1f}",
                      f"{p['step']['total_s'] * 1e3:.1f}")
    return Group(t, pools)
