"""A rank's parameters by their place in the whole model, and their distance from the
single-process reference's: the check that a parallel run computed the same update, not only
similar losses.

Losses are a weak check: with the job's learning rate a 20% gradient error moves the next
losses by less than 1e-5 relative. Parameters after the first step are compared instead
(:func:`param_errors`): every rank's tensors (TP shards at their rows and columns of the full
parameter, :func:`planner.run.reference_job.tp.tp_index`; expert slots as their logical
experts) against the reference model after the same step, as ``||rank - reference|| /
||reference||`` per parameter, and the whole step's update against the reference's update
(:class:`ParamCheck`). Measured agreement of 4-process gloo runs: per parameter at most
1.1e-6 (zero-initialised LayerNorm biases, whose value is one update), the update within
2e-6; a 10% gradient error makes both 0.1.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from planner.run.reference_job.model import Stage, batch, loss_of
from planner.run.reference_job.shape import JobShape

__all__ = ["ParamCheck", "global_params", "param_errors", "reference_params"]


# A stage's parameters split by vocabulary under TP (tp.shard_vocab): rows of the full ones
VOCAB_SPLIT = ("embed.weight", "head.1.weight", "head.1.bias")


def global_params(model: Stage, layers: tuple[int, ...]) -> dict[str, tuple]:
    """Name in the whole model -> ``(rows, cols, values)`` of this stage's parameters:
    ``blocks.<global layer>...``, experts by logical id (a second replica on the same rank gets
    ``#1``), TP shards with the rows and columns they hold (None: all), the vocabulary-split
    embedding and output layer with their rows."""
    out: dict[str, tuple] = {}
    for name, param in model.named_parameters():
        parts = name.split(".")
        rows = cols = None
        if parts[0] == "blocks":
            block = model.blocks[int(parts[1])]
            parts[1] = str(layers[int(parts[1])])
            if parts[2:4] == ["moe", "experts"]:
                parts[4] = str(block.moe.slots[int(parts[4])])
            elif block.tp_index is not None and len(parts) == 4:
                rows, cols = block.tp_index.get(f"{parts[2]}.{parts[3]}", (None, None))
        elif model.vocab_part is not None and name in VOCAB_SPLIT:
            rows = model.vocab_part.rows()
        key = ".".join(parts)
        copy = 0
        while f"{key}#{copy}" in out or (copy == 0 and key in out):
            copy += 1
        out[key if copy == 0 else f"{key}#{copy}"] = (rows, cols, param.detach().clone())
    return out


def reference_params(shape: JobShape, steps: int = 1) -> dict[str, torch.Tensor]:
    """The single-process model's parameters after ``steps`` steps (as
    :func:`~planner.run.reference_job.model.reference_losses` trains it)."""
    model = Stage(shape, tuple(range(shape.num_layers)), True, True)
    opt = torch.optim.SGD(model.parameters(), lr=shape.lr)
    for step in range(steps):
        x, y = batch(shape, step)
        loss = loss_of(model(x), y, y.numel())
        opt.zero_grad()
        loss.backward()
        opt.step()
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def _slice(t: torch.Tensor, rows, cols) -> torch.Tensor:
    t = t if rows is None else t[rows]
    return t if cols is None else t[:, cols]


@dataclass(frozen=True)
class ParamCheck:
    """``errors``: per parameter, the largest ``||rank - reference|| / ||reference||`` over the
    ranks holding it (``inf``: no rank holds it); ``update_error``: the whole step's update,
    ``||rank update - reference update|| / ||reference update||`` over every parameter copy
    of every rank (a 10% gradient error makes it 0.1)."""

    errors: dict[str, float]
    update_error: float

    @property
    def worst(self) -> tuple[str, float]:
        return max(self.errors.items(), key=lambda item: item[1])


def param_errors(dumps: list[dict[str, tuple]], after: dict[str, torch.Tensor],
                 before: dict[str, torch.Tensor]) -> ParamCheck:
    """Compare every rank's parameters (``dumps``: :func:`global_params` of every rank) with
    the reference model's ``after`` the step (:func:`reference_params`), ``before`` it being
    the initial parameters (``reference_params(shape, 0)``)."""
    worst = {name: float("inf") for name in after}
    seen: set[str] = set()
    diff_sq = update_sq = 0.0
    for dump in dumps:
        for key, (rows, cols, value) in dump.items():
            name = key.split("#")[0]
            ref = _slice(after[name], rows, cols)
            init = _slice(before[name], rows, cols)
            err = float((value - ref).norm() / ref.norm().clamp_min(1e-30))
            worst[name] = err if name not in seen else max(worst[name], err)
            seen.add(name)
            diff_sq += float((value - ref).double().norm()) ** 2
            update_sq += float((ref - init).double().norm()) ** 2
    return ParamCheck(worst, (diff_sq / update_sq) ** 0.5 if update_sq > 0 else float("inf"))
