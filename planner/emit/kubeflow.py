"""A Kubeflow PyTorchJob (training-operator ``kubeflow.org/v1``).

Fields (Kubeflow Training Operator, ``pkg/apis/kubeflow.org/v1`` and
https://www.kubeflow.org/docs/components/trainer/legacy-v1/user-guides/pytorch/):
``spec.nprocPerNode`` (a string), ``spec.pytorchReplicaSpecs.Master`` / ``.Worker`` with
``replicas``, ``restartPolicy`` and a pod ``template``; the container must be named
``pytorch``. For every pod the operator sets ``PET_NNODES`` (the replica count),
``PET_NPROC_PER_NODE`` (``nprocPerNode``), ``PET_NODE_RANK`` (0 for the Master, worker index
+ 1 for a Worker), ``PET_MASTER_ADDR`` (the Master's service) and ``PET_MASTER_PORT``
(``pkg/controller.v1/pytorch/envvar.go``, ``master.go``). The container runs
``torchrun`` directly (no shell) with those values through Kubernetes ``$(VAR)`` expansion;
every user-supplied string is escaped for that expansion (``$`` -> ``$$``, Kubernetes API
``Container.args``: "Double $$ are reduced to a single $").

Pinning: the Master (node rank 0) is pinned to the plan's node-rank-0 host with
``nodeSelector: {kubernetes.io/hostname: ...}``. Workers share one pod template, so they can
only be confined to the set of the remaining hosts (``nodeAffinity`` ``In``); a Worker's node
rank is its pod index + 1, not a function of the host it lands on.

The document is built as Python data and written with ``yaml.safe_dump`` (no text
templating); comments are fixed text with user values escaped to one line.

NCCL settings (plans with a fabric section, :mod:`planner.emit._nccl`): a replica whose hosts
all share the same settings gets them as container ``env`` (and, where its ranks use different
rails, torchrun runs the LOCAL_RANK rail wrapper: ``--no-python bash -c <wrapper>``). Workers
on hosts with different settings cannot be told apart by pod index, so their wrapper looks up
the host the pod runs on (``PLANNER_K8S_NODE`` from the downward API field ``spec.nodeName``,
which must equal the plan's host name, as the ``kubernetes.io/hostname`` label usually does)
and exports that host's settings and rail before Python starts.
"""
from __future__ import annotations

import re

import yaml

from planner.emit._facts import Facts, comment_safe, header_lines
from planner.emit._nccl import FabricNode, host_wrapper, rank_wrapper, wrapper_argv
from planner.emit._options import EmitOptions, dns1123_name
from planner.emit.types import Emission, UnsupportedByFormat

HOSTNAME_LABEL = "kubernetes.io/hostname"
NODE_NAME_VAR = "PLANNER_K8S_NODE"  # the pod's node (downward API spec.nodeName)
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")


def k8s_escape(value: str) -> str:
    """``value`` protected from Kubernetes ``$(VAR)`` expansion in command, args and env
    values: every ``$`` doubled (Kubernetes turns ``$$`` back into ``$``)."""
    return value.replace("$", "$$")


def k8s_unescape(value: str) -> str:
    """The string a container sees for an escaped ``value`` (no ``$(VAR)`` references)."""
    return value.replace("$$", "$")


def torchrun_args(f: Facts, o: EmitOptions, gpus: int,
                  wrapper: tuple[str, ...] = ()) -> list[str]:
    """The container's ``args`` after ``torchrun``: node rank and master from the operator;
    ``wrapper``: the (escaped) rank-wrapper arguments that go before the script."""
    return [f"--nnodes={len(f.nodes)}", f"--nproc-per-node={gpus}",
            "--node-rank=$(PET_NODE_RANK)", "--rdzv-backend=static",
            "--master-addr=$(PET_MASTER_ADDR)", "--master-port=$(PET_MASTER_PORT)",
            *wrapper, k8s_escape(o.script), *[k8s_escape(a) for a in o.script_args]]


def replica_nccl(nodes: list[FabricNode]) -> tuple[list[dict], tuple[str, ...]]:
    """(container env entries, escaped torchrun wrapper arguments) that give the pods of one
    replica type, running on ``nodes``, their NCCL settings."""
    if not nodes:
        return [], ()
    first = nodes[0]
    if all(n.env == first.env and n.rank_env == first.rank_env for n in nodes):
        env = [{"name": name, "value": k8s_escape(value)} for name, value in first.env]
        wrapper = wrapper_argv(rank_wrapper(first)) if first.rank_env is not None else []
    else:
        env = [{"name": NODE_NAME_VAR,
                "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]
        wrapper = wrapper_argv(host_wrapper(tuple(nodes), NODE_NAME_VAR))
    return env, tuple(k8s_escape(w) for w in wrapper)


def _container(f: Facts, o: EmitOptions, gpus: int, nodes: list[FabricNode]) -> dict:
    env, wrapper = replica_nccl(nodes)
    return {"name": "pytorch", "image": o.image, "command": ["torchrun"],
            "args": torchrun_args(f, o, gpus, wrapper),
            "env": [{"name": "PLANNER_PLAN", "value": k8s_escape(o.plan_path)}, *env],
            "resources": {"limits": {"nvidia.com/gpu": gpus}}}


def _replica(f: Facts, o: EmitOptions, replicas: int, gpus: int, placement: dict,
             nodes: list[FabricNode]) -> dict:
    return {"replicas": replicas, "restartPolicy": "OnFailure",
            "template": {"spec": {**placement, "containers": [_container(f, o, gpus, nodes)]}}}


def _worker_affinity(hosts: list[str]) -> dict:
    term = {"matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "In", "values": hosts}]}
    return {"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}}


def kubeflow_notes(f: Facts, o: EmitOptions) -> list[str]:
    notes = [f"Master (node rank 0) is pinned to host {comment_safe(f.master.host)}.",
             "Workers share one pod template: they are confined to the other plan hosts, but "
             "a Worker's node rank is its pod index + 1 (PET_NODE_RANK), not the host it "
             "lands on, so node ranks 1.. follow pod index, not the plan's host order. Where "
             "intra-node placement matters, check the pods' nodes against the plan (or use the "
             "torchrun/slurm formats, which fix each host's rank).",
             "The container must see the plan at PLANNER_PLAN (e.g. mount it from a "
             "ConfigMap).", *f.fabric_notes]
    workers = list(f.fabric[1:]) if f.fabric else []
    if workers and any((n.env, n.rank_env) != (workers[0].env, workers[0].rank_env)
                       for n in workers):
        notes.append(f"Worker hosts differ in NCCL settings: each Worker's wrapper picks them "
                     f"by its node name ({NODE_NAME_VAR} = spec.nodeName), which must be the "
                     f"plan's host name.")
    bad = [n.host for n in f.nodes if not _LABEL_VALUE.fullmatch(n.host)]
    if bad:
        notes.append(f"Not valid Kubernetes label values (scheduling will be refused): "
                     f"{', '.join(comment_safe(h) for h in bad)}; use the nodes' "
                     f"{HOSTNAME_LABEL} labels as host names in the cluster file.")
    if dns1123_name(o.job_name) != o.job_name:
        notes.append(f"Job name {comment_safe(o.job_name)} written as "
                     f"{dns1123_name(o.job_name)} (DNS-1123).")
    return notes


def pytorchjob(f: Facts, o: EmitOptions, notes: list[str]) -> dict:
    """The PyTorchJob document as plain data."""
    if f.uniform_gpus is None:
        raise UnsupportedByFormat(
            "kubeflow: the nodes differ in GPU count, but a PyTorchJob has one "
            "nprocPerNode (and Workers one pod template); use the torchrun or "
            "slurm format")
    gpus = f.uniform_gpus
    fabric = list(f.fabric or ())
    specs = {"Master": _replica(f, o, 1, gpus, {"nodeSelector": {HOSTNAME_LABEL: f.master.host}},
                                fabric[:1])}
    if len(f.nodes) > 1:
        specs["Worker"] = _replica(f, o, len(f.nodes) - 1, gpus,
                                   _worker_affinity([n.host for n in f.nodes[1:]]), fabric[1:])
    metadata = {"name": dns1123_name(o.job_name),
                "annotations": {"planner/inputs-hash": f.inputs_hash,
                                "planner/job-name": o.job_name,
                                "planner/notes": "\n".join(notes)}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": metadata,
            "spec": {"nprocPerNode": str(gpus), "pytorchReplicaSpecs": specs}}


def render_kubeflow(f: Facts, o: EmitOptions) -> Emission:
    """``pytorchjob.yaml``."""
    notes = kubeflow_notes(f, o)
    body = yaml.safe_dump(pytorchjob(f, o, notes), sort_keys=False, default_flow_style=False,
                          allow_unicode=False)
    head = "\n".join(f"# {line}".rstrip() for line in (*header_lines(f, "kubeflow"), *notes))
    return Emission((("pytorchjob.yaml", head + "\n" + body),), tuple(notes))
