"""Every maximum planner accepts in its inputs, each with the reason for it.

A value beyond one of these is refused where it enters, before anything is built from it: a
file's field (:func:`check`) or a command-line option (``planner.cli.common.within``) gives one
line naming the file or option, the field, the limit and its reason, and exit code 2. Inside
the limits every command finishes, or shows a progress bar while it works (``docs/limits.md``
has the table and the timings behind the limits set by run time).

The cluster limits live in :mod:`topologies.limits`, since every cluster, whatever its source,
is validated by :mod:`topologies.spec`; they are re-exported here.
"""
from __future__ import annotations

from pathlib import Path

from planner.errors import SpecError
from topologies.limits import (CLUSTER_GPUS, CLUSTER_NODES, GPUS_PER_NODE, NICS_PER_NODE,
                               PROCESSES_PER_HOST, Limit)

__all__ = ["Limit", "ALL_LIMITS", "check", "check_file_size", "CLUSTER_GPUS", "CLUSTER_NODES",
           "GPUS_PER_NODE", "PROCESSES_PER_HOST", "NICS_PER_NODE", "MODEL_LAYERS", "HIDDEN_SIZE",
           "LAYER_WIDTH", "ATTENTION_HEADS", "EXPERTS", "VOCABULARY", "SEQUENCE_TOKENS",
           "GLOBAL_BATCH", "EP_GPUS", "EXPERT_SLOTS", "SLOTS_PER_GPU", "ROBUST_SCENARIOS",
           "TRACE_STEPS", "LOAD_VALUES", "TOKENS_PER_STEP", "LOCALITY_SLACK", "INPUT_FILE_BYTES",
           "TOPOLOGY_FILE_BYTES", "NESTING_DEPTH", "WHOLE_NUMBER", "ALIASED_VALUES",
           "CSV_FIELD_CHARS", "NPY_HEADER_BYTES"]

MIB = 2**20

# --- models --------------------------------------------------------------------------------
# "The presets": planner/data/models and tests/fixtures/hf_configs (22 published models).
MODEL_LAYERS = Limit("layers of a model", 1_024, "layers",
                     "eight times the deepest model in the presets, Llama 3.1 405B's 126; "
                     "planner builds a table row per layer")
HIDDEN_SIZE = Limit("a model's hidden size", 131_072, "channels",
                    "eight times the widest model in the presets, Llama 3.1 405B's 16,384")
LAYER_WIDTH = Limit("widths inside a layer", 1_048_576, "channels",
                    "about twenty times the widest FFN in the presets, Llama 3.1 405B's 53,248; "
                    "FFN, expert, head and latent widths alike")
ATTENTION_HEADS = Limit("attention heads of a layer", 4_096, "heads",
                        "32 times the most heads in the presets, 128")
EXPERTS = Limit("experts of an MoE layer", 4_096, "experts",
                "eight times the most routed experts of the models in the test configs, "
                "Qwen3.5-397B-A17B's 512")
VOCABULARY = Limit("the vocabulary", 4_194_304, "tokens",
                   "sixteen times the largest vocabulary of the models in the test configs, "
                   "Qwen3.5's 248,320")
SEQUENCE_TOKENS = Limit("tokens in a sequence", 16_777_216, "tokens",
                        "longer than the longest context of a published model, Llama 4 Scout's "
                        "10M tokens")

# --- training ------------------------------------------------------------------------------
GLOBAL_BATCH = Limit("sequences per step", 1_048_576, "sequences",
                     "one per GPU of the largest cluster; published runs use some thousands, "
                     "DeepSeek-V3 15,360")

# --- expert placement ----------------------------------------------------------------------
# Measured with planner.experts.plan_experts on 2 shared cores (docs/limits.md).
EXPERT_SLOTS = Limit("expert slots of an expert-parallel group, GPUs x slots per GPU", 16_384,
                     "slots", "planning takes 1 to 8 s per layer at this size, and the time "
                     "grows faster than the slots: 65,536 take 54 s per layer; deployments use "
                     "a few thousand")
EP_GPUS = Limit("GPUs of an expert-parallel group", EXPERT_SLOTS.maximum, "GPUs",
                f"each GPU holds a slot, and a group at most {EXPERT_SLOTS.maximum:,}")
SLOTS_PER_GPU = Limit("expert slots per GPU", 2 * EXPERTS.maximum, "slots",
                      f"every expert of the widest MoE layer, {EXPERTS.maximum:,}, twice over")
ROBUST_SCENARIOS = Limit("scenarios of a robust expert plan, --scenarios or a trace's steps "
                         "with --robust", 1_024, "scenarios",
                         "planning time grows with them: 1,024 scenarios of 16,384 slots take "
                         "about 20 s per layer")
TRACE_STEPS = Limit("steps of an expert-load trace", 65_536, "steps",
                    "a trace is held in memory and every step is evaluated; 65,536 steps are "
                    "most of a day of one-per-second samples")
LOAD_VALUES = Limit("values of an expert-load array, steps x layers x experts", 16_777_216,
                    "values", "128 MiB in memory as float64")
TOKENS_PER_STEP = Limit("tokens per step of a synthetic trace", 1_073_741_824, "tokens",
                        "about seventeen times a DeepSeek-V3 training step of 15,360 sequences "
                        "of 4,096 tokens")
LOCALITY_SLACK = Limit("--locality-slack", 100, "",
                       "accepting busiest/mean 101 times the best, balance no longer counts")

# --- files and documents -------------------------------------------------------------------
INPUT_FILE_BYTES = Limit("a JSON, YAML or CSV input file", 64 * MIB, "bytes",
                         "parsed, text takes ten to thirty times its size in memory, and a run "
                         "should stay under 2 GiB; real inputs are far smaller, SGLang's "
                         "logical_count for 61 layers x 256 experts is about 100 KiB; long load "
                         "traces fit as NPY", shown="64 MiB")
TOPOLOGY_FILE_BYTES = Limit("a topology file for 'planner topo import'", 16 * MIB, "bytes",
                            "one node's nvidia-smi or NCCL XML is some KiB, and Slurm hostlists "
                            "name a million nodes in a few lines", shown="16 MiB")
NESTING_DEPTH = Limit("nesting of a JSON or YAML document", 100, "levels",
                      "no planner input nests deeper than about 8, a plan's "
                      "pools.0.groups.cp.0.0 is 6; parsers recurse per level")
WHOLE_NUMBER = Limit("a whole number in a document", 2**63 - 1, "",
                     "what a C long and numpy's int64 hold; no count planner reads is larger",
                     shown="2**63 - 1")
ALIASED_VALUES = Limit("values a YAML document reaches through aliases", 1_000_000, "values",
                       "a file of nested aliases, a 'billion laughs', is small but expands "
                       "beyond anything that can be walked")
# Limits of the libraries that parse planner's inputs, kept as they are.
CSV_FIELD_CHARS = Limit("a CSV field", 131_072, "characters",
                        "Python's csv module default, csv.field_size_limit(); a number is "
                        "some tens of characters")
NPY_HEADER_BYTES = Limit("an NPY file's header", 10_000, "bytes",
                         "numpy's default max_header_size: a header is a short dict literal")

ALL_LIMITS: tuple[Limit, ...] = (
    CLUSTER_GPUS, CLUSTER_NODES, GPUS_PER_NODE, PROCESSES_PER_HOST, NICS_PER_NODE, MODEL_LAYERS,
    HIDDEN_SIZE, LAYER_WIDTH, ATTENTION_HEADS, EXPERTS, VOCABULARY, SEQUENCE_TOKENS, GLOBAL_BATCH,
    EXPERT_SLOTS, EP_GPUS, SLOTS_PER_GPU, ROBUST_SCENARIOS, TRACE_STEPS, LOAD_VALUES,
    TOKENS_PER_STEP, LOCALITY_SLACK, INPUT_FILE_BYTES, TOPOLOGY_FILE_BYTES, NESTING_DEPTH,
    WHOLE_NUMBER, ALIASED_VALUES, CSV_FIELD_CHARS, NPY_HEADER_BYTES)


def check(value: object, limit: Limit, source: str, field: str) -> None:
    """Refuse ``value`` beyond ``limit``: a SpecError naming ``source``, ``field``, the limit
    and its reason. Values that are not numbers are left to the validators of types."""
    if limit.exceeded_by(value):
        raise SpecError(source, field, limit.expected(), value)


def check_file_size(path: Path | str, limit: Limit = INPUT_FILE_BYTES) -> None:
    """Refuse a file larger than ``limit`` before it is read (a path that cannot be stat'ed is
    left to the reader's own error)."""
    try:
        size = Path(path).stat().st_size
    except (OSError, ValueError):
        return
    if size > limit.maximum:
        raise SpecError(str(path), "", f"{limit.expected()}; this file has {size / MIB:,.1f} MiB")
