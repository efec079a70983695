"""Published measurements of (geo-)distributed training, recomputed with hulk's cost model.

Each :class:`Case` names a paper, the table a figure comes from, the inputs (a cluster and a
workload file in ``inputs/``, the paper's plan settings) and how hulk's breakdown turns into the
published quantity. Nothing here is fitted: the cost model runs with its defaults (catalog
peaks, ``DEFAULT_MFU``, the geographic link model where the paper gives no network figure).

- **Megatron-LM** (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on
  GPU Clusters Using Megatron-LM", arXiv 2104.04473, Table 1): achieved teraFLOP/s per GPU of
  GPT models on DGX A100 nodes, tensor parallel inside a node, pipeline and data parallel
  across. hulk's value is the paper's own FLOP count (its eq. 3,
  ``96 B s l h^2 (1 + s / 6h + V / 16 l h)``) over hulk's iteration time and the GPUs.
- **INTELLECT-1** (Jaghouar et al. 2024, "INTELLECT-1 Technical Report", arXiv 2412.01152,
  the table of training efficiency by geographical configuration): DiLoCo with 100 inner steps
  and int8 pseudo-gradients over 8 x H100 nodes in the USA, the USA and Europe, and three
  continents. *Compute utilisation* is the share of time a node is not communicating with
  other nodes: ``1 - (T_out / H) / T_step`` with hulk's outer exchange ``T_out`` and time per
  inner step ``T_step``. The outer all-reduce time and the inner step time are checked too.

``python -m experiments.reproductions [--json]`` prints the table; ``tests/test_reproductions.py``
recomputes it and checks each row's error against the one recorded in ``README.md`` here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from hulk_env import cost
from hulk_env.cluster import Cluster, load_cluster
from hulk_env.workload import Workload, load_workload

INPUTS = Path(__file__).resolve().parent / "inputs"
TOLERANCE = 0.15  # a reproduction counts when hulk is within 15% of the published figure
GPUS_PER_NODE = 8

MEGATRON = "Narayanan et al. 2021, arXiv 2104.04473"
INTELLECT = "Jaghouar et al. 2024, arXiv 2412.01152"


class Row(NamedTuple):
    """One published figure and hulk's value for it (``error = hulk / published - 1``)."""

    key: str
    paper: str
    table: str
    quantity: str
    unit: str
    published: float
    hulk: float
    headline: bool  # the paper's reported quantity (else a component checked alongside)

    @property
    def error(self) -> float:
        return self.hulk / self.published - 1.0

    @property
    def within(self) -> bool:
        return abs(self.error) <= TOLERANCE

    def to_dict(self) -> dict:
        return self._asdict() | {"error": self.error, "within_tolerance": self.within}


@dataclass(frozen=True)
class Setup:
    """A cluster, a workload with the paper's settings, and the placement ``[D, L]``."""

    cluster: Cluster
    workload: Workload
    placement: np.ndarray


def _cluster(name: str) -> Cluster:
    return load_cluster(INPUTS / f"{name}.yaml")[0]


# ---------------------------------------------------------------------------------------------
# Megatron-LM, Table 1
# ---------------------------------------------------------------------------------------------
class MegatronRow(NamedTuple):
    """A row of Narayanan et al. 2021, Table 1 (the columns hulk needs)."""

    params_b: float
    heads: int
    hidden: int
    layers: int
    tensor: int
    pipeline: int
    gpus: int
    batch: int
    tflops_per_gpu: float  # "Achieved teraFLOP/s per GPU"


# Rows with a pipeline of at most 8 stages (the larger ones use 1,920-3,072 GPUs: the same
# formulas, but a placement of 240-384 machines; left out to keep the test fast).
MEGATRON_TABLE_1 = (
    MegatronRow(1.7, 24, 2304, 24, 1, 1, 32, 512, 137.0),
    MegatronRow(3.6, 32, 3072, 30, 2, 1, 64, 512, 138.0),
    MegatronRow(7.5, 32, 4096, 36, 4, 1, 128, 512, 142.0),
    MegatronRow(18.4, 48, 6144, 40, 8, 1, 256, 1024, 135.0),
    MegatronRow(39.1, 64, 8192, 48, 8, 2, 512, 1536, 138.0),
    MegatronRow(76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140.0),
    MegatronRow(145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148.0),
)
MEGATRON_SEQ_LEN = 2048
MEGATRON_VOCAB = 51200


def megatron_flops(row: MegatronRow) -> float:
    """FLOPs of one iteration as the paper counts them (its eq. 3, with recomputation):
    ``96 B s l h^2 (1 + s / (6 h) + V / (16 l h))``."""
    b, s, ell, h, v = row.batch, MEGATRON_SEQ_LEN, row.layers, row.hidden, MEGATRON_VOCAB
    return 96.0 * b * s * ell * h**2 * (1.0 + s / (6.0 * h) + v / (16.0 * ell * h))


def stage_placement(num_layers: int, replicas: int, stages: int) -> np.ndarray:
    """``[D, L]``: replica ``r``'s ``stages`` pipeline stages on machines ``r * stages + j``,
    the transformer blocks split evenly, the embedding with the first stage and the LM head
    with the last (Megatron's layout)."""
    blocks = num_layers - 2
    stage_of_block = np.arange(blocks) * stages // blocks
    per_layer = np.concatenate([[0], stage_of_block, [stages - 1]])
    return np.arange(replicas)[:, None] * stages + per_layer[None, :]


def megatron_setup(row: MegatronRow) -> Setup:
    """The row's plan on Selene: ``t`` tensor-parallel GPUs, ``8 / t`` data-parallel groups per
    node, ``p`` nodes per pipeline, ``D = gpus / (8 p)`` replicas; one sequence per GPU group and
    micro-batch (Table 1 does not give the micro-batch size), 1F1B."""
    nodes_per_replica = row.pipeline
    replicas = row.gpus // (GPUS_PER_NODE * nodes_per_replica)
    groups = GPUS_PER_NODE // row.tensor
    per_replica = row.batch // replicas
    workload = load_workload(
        INPUTS / f"megatron-gpt-{row.params_b:g}b.yaml",
        micro_batch_size=groups,
        num_micro_batches=per_replica // groups,
        data_parallel=replicas,
        tensor_parallel=row.tensor,
    )
    placement = stage_placement(workload.num_layers, replicas, nodes_per_replica)
    return Setup(_cluster("selene"), workload, placement)


def megatron_rows() -> list[Row]:
    out = []
    for row in MEGATRON_TABLE_1:
        s = megatron_setup(row)
        seconds = float(cost.evaluate(s.cluster, s.workload, s.placement).iteration_time_s)
        achieved = megatron_flops(row) / seconds / row.gpus / 1e12
        out.append(Row(
            f"megatron-{row.params_b:g}b", MEGATRON, "Table 1",
            f"GPT {row.params_b:g}B, t={row.tensor} p={row.pipeline}, {row.gpus} A100: achieved TFLOP/s per GPU",
            "TFLOP/s", row.tflops_per_gpu, achieved, True,
        ))
    return out


# ---------------------------------------------------------------------------------------------
# INTELLECT-1: compute utilisation by geographical configuration
# ---------------------------------------------------------------------------------------------
class IntellectRow(NamedTuple):
    """A row of the INTELLECT-1 report's training-efficiency table."""

    scenario: str
    cluster: str
    all_reduce_s: float  # "Median All-Reduce time"
    compute_utilisation: float  # "Compute Util", a fraction


INNER_STEPS = 100
INNER_STEPS_S = 38.0 * 60.0  # "the computation time for h = 100 inner steps ... 38 minutes"
INTELLECT_TABLE = (
    IntellectRow("USA", "intellect1-usa", 103.0, 0.957),
    IntellectRow("USA + Europe", "intellect1-usa-europe", 382.0, 0.856),
    IntellectRow("Global", "intellect1-global", 469.0, 0.830),
)


def intellect_setup(row: IntellectRow, inner_steps: int = INNER_STEPS) -> Setup:
    """One DiLoCo worker per 8 x H100 node (the whole model on each node), FSDP inside the node
    (``tensor_parallel=1``: 8 data-parallel GPUs, ``zero=3``), ``inner_steps`` inner steps and
    8-bit pseudo-gradients, the workload file's 128 sequences per node and step."""
    cluster = _cluster(row.cluster)
    d = cluster.num_machines
    workload = load_workload(
        INPUTS / "intellect1-10b.yaml",
        data_parallel=d, tensor_parallel=1, zero=3, sync="diloco", inner_steps=inner_steps, outer_bits=8,
    )
    placement = np.repeat(np.arange(d)[:, None], workload.num_layers, axis=1)
    return Setup(cluster, workload, placement)


class DilocoTimes(NamedTuple):
    """hulk's times of one configuration: an inner step and the outer exchange."""

    inner_step_s: float  # per inner step, the amortised outer exchange included
    outer_s: float  # one outer all-reduce of the pseudo-gradients

    @property
    def compute_utilisation(self) -> float:
        return 1.0 - self.outer_s / INNER_STEPS / self.inner_step_s

    @property
    def compute_s(self) -> float:
        """An inner step without the outer exchange (what the report calls computation)."""
        return self.inner_step_s - self.outer_s / INNER_STEPS


def diloco_times(row: IntellectRow) -> DilocoTimes:
    """``T_step`` at ``H = 100`` and ``T_out`` from the same model at ``H = 1`` (the per-step
    sync is ``inner + T_out / H``: two values of ``H`` separate the two)."""
    times = []
    for h in (INNER_STEPS, 1):
        s = intellect_setup(row, h)
        breakdown = cost.evaluate(s.cluster, s.workload, s.placement)
        times.append((float(breakdown.iteration_time_s), float(breakdown.dp_sync_s)))
    (step_s, sync_h), (_, sync_1) = times
    outer_s = (sync_1 - sync_h) * INNER_STEPS / (INNER_STEPS - 1)
    return DilocoTimes(step_s, outer_s)


def intellect_rows() -> list[Row]:
    out = []
    for row in INTELLECT_TABLE:
        t = diloco_times(row)
        base = f"INTELLECT-1 10B, {row.scenario}"
        table = "training efficiency by configuration"
        out += [
            Row(f"intellect1-{row.cluster.removeprefix('intellect1-')}-utilisation", INTELLECT, table,
                f"{base}: compute utilisation", "%", 100 * row.compute_utilisation, 100 * t.compute_utilisation, True),
            Row(f"intellect1-{row.cluster.removeprefix('intellect1-')}-all-reduce", INTELLECT, table,
                f"{base}: median outer all-reduce", "s", row.all_reduce_s, t.outer_s, False),
            Row(f"intellect1-{row.cluster.removeprefix('intellect1-')}-inner-steps", INTELLECT, table,
                f"{base}: 100 inner steps, computation", "s", INNER_STEPS_S, INNER_STEPS * t.compute_s, False),
        ]
    return out


CASES: dict[str, Callable[[], list[Row]]] = {"megatron": megatron_rows, "intellect1": intellect_rows}


def reproduce(names: list[str] | None = None) -> list[Row]:
    """Every row of the named cases (all by default), in order."""
    return [r for name in (names or list(CASES)) for r in CASES[name]()]


def markdown_table(rows: list[Row]) -> str:
    """The README table: paper, table, quantity, published, hulk, error."""
    lines = [
        "| source | table | quantity | published | hulk | error | within 15% |",
        "|---|---|---|---:|---:|---:|---|",
    ]
    for r in rows:
        mark = ("yes" if r.within else "**no**") + ("" if r.headline else " (component)")
        lines.append(
            f"| {r.paper} | {r.table} | {r.quantity} | {r.published:.4g} {r.unit} | {r.hulk:.4g} {r.unit} "
            f"| {r.error:+.1%} | {mark} |"
        )
    return "\n".join(lines)
