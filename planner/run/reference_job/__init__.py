"""Reference job: a tiny GPT (optionally MoE) trained for a few steps under a plan (plain torch).

Run under torchrun (``python -m torch.distributed.run --nproc-per-node N -m
planner.run.reference_job PLAN --out RUN.json``, or ``planner launch PLAN``). Every rank checks the
world against the plan (:func:`planner.run.runtime.init`, before any collective), builds the plan's
process groups and trains only the layers of its pipeline stage. The modules:

* :mod:`.shape`: the model and batch (:class:`JobShape`), ``--size plan``'s fields and the
  models the job refuses, the fixed :data:`IMPLEMENTATION` (fp32, SGD, one gradient bucket);
* :mod:`.model`: the seeded GPT (blocks, experts, stages) and :func:`reference_losses` (one
  process, whole batch: the losses the parallel run must reproduce);
* :mod:`.tp`: **TP** (dense models), Megatron-LM's split, attention by heads and the MLP by
  columns, with the ``f`` / ``g`` all-reduce operators (Shoeybi et al. 2019, sec. 3), and the
  embedding, output layer and cross entropy split by vocabulary as Megatron-Core splits them;
  weights are cut from the same seeded full layers;
* :mod:`.ep`: **EP**, MoE layers hold only their EP rank's slots of the plan's expert
  placement; the dispatch all-gathers the micro-batch's per-expert counts, computes the
  planner's real-time quotas (the runtime kernel :func:`planner.run.kernels.expert_quotas`),
  and all-to-alls tokens to replicas and back (gloo supports uneven all-to-all). Each logical
  expert's gradient is summed over all its replicas;
* :mod:`.dp`: **DP**, ranks split the global batch; gradients are summed over the DP group in
  one contiguous bucket (each loss is already divided by the global token count);
* :mod:`.pipeline`: **PP**, stages exchange activations and gradients with point-to-point
  sends in the 1F1B order (Narayanan et al., SC'21, sec. 2.2);
* :mod:`.timers`: per-rank timings by kind (disjoint kinds, nested sections exclusive); the
  training loop owns one :class:`Timers` and hands it to everything it times;
* :mod:`.train`: one rank's job, and rank 0's run record
  (:func:`planner.run.launch.write_run_record`: the plan, losses, rank 0's and the slowest
  rank's step times, per-rank timings, every rank's expert events);
* :mod:`.cli`: the command line (``--size tiny`` by default, or ``--size plan``).

The model keeps the plan's layer count, MoE layers, expert count, top-k and layer-to-stage
split; every parameter is initialised from a seed derived from its layer (and expert) index,
so any split builds the same model.

Not implemented yet: context parallelism, tensor parallelism of MoE layers (expert TP), and
interleaved stages (``vpp > 1``). Such a plan is refused with a clear message. ZB-H1 and
SlimPipe plans run in plain 1F1B order (the same arithmetic, another order).
"""
from planner.run.reference_job.cli import main
from planner.run.reference_job.model import Block, reference_losses
from planner.run.reference_job.pipeline import one_f_one_b
from planner.run.reference_job.shape import IMPLEMENTATION, JobShape, plan_shape_fields
from planner.run.reference_job.timers import STEP_KINDS, TIMED_KINDS, Timers
from planner.run.reference_job.train import train

__all__ = ["Block", "IMPLEMENTATION", "JobShape", "STEP_KINDS", "TIMED_KINDS", "Timers", "main",
           "one_f_one_b", "plan_shape_fields", "reference_losses", "train"]
