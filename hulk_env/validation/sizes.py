"""Size and magnitude checks on built objects (no pydantic: the models' modules import it).

:func:`check_machine_count` runs before any ``M x M`` matrix exists; :func:`check_workload_limits`
on every workload, whatever built it (a file, the catalog, command-line settings), so a product
such as FLOPs x micro-batches can never overflow in the cost model; :func:`check_instance_size`
on every instance (what a method places).
"""

from __future__ import annotations

from typing import Any

from hulk_env.errors import HulkInputError
from hulk_env.validation import limits


def _check_counts(counts: tuple[tuple[str, int, int, str, str], ...], source: str) -> None:
    for what, have, most, limit, fix in counts:
        if have > most:
            hint = f"; {fix}" if fix else ""
            raise HulkInputError(
                f"{have:,} {what}, more than {most:,}{hint} ({limits.cite(limit)})", source=source
            )


def check_workload_limits(workload: Any, source: str) -> None:
    """Numbers of a built workload (any source: a file, the catalog, command-line settings).

    Duck-typed on :class:`hulk_env.workload.Workload` (``layer_names``, ``flops``, ``params``,
    ``activation_bytes``, ``stash_bytes``, ``edges``, ``data_parallel``, ``num_micro_batches``,
    ``micro_batch_size``). The layer count is checked where a workload is placed
    (:func:`check_instance_size`): a big transformer may exist before it is coarsened.

    Raises:
        HulkInputError: too many edges, replicas or micro-batches, or a layer whose numbers
            exceed the magnitude limits (so that no product the cost model forms overflows).
    """
    _check_counts(
        (
            ("layer-graph edges", len(workload.edges), limits.MAX_LAYER_EDGES, "MAX_LAYER_EDGES", ""),
            ("replicas (data_parallel)", int(workload.data_parallel), limits.MAX_DATA_PARALLEL, "MAX_DATA_PARALLEL", ""),
            ("micro-batches (num_micro_batches)", int(workload.num_micro_batches), limits.MAX_MICRO_BATCHES, "MAX_MICRO_BATCHES", ""),
            ("sequences per micro-batch (micro_batch_size)", int(workload.micro_batch_size), limits.MAX_MICRO_BATCH_SIZE, "MAX_MICRO_BATCH_SIZE", ""),
        ),
        source,
    )  # fmt: skip
    for label, most, limit in (
        ("flops", limits.MAX_LAYER_FLOPS, "MAX_LAYER_FLOPS"),
        ("params", limits.MAX_LAYER_PARAMS, "MAX_LAYER_PARAMS"),
        ("activation_bytes", limits.MAX_LAYER_BYTES, "MAX_LAYER_BYTES"),
        ("stash_bytes", limits.MAX_LAYER_BYTES, "MAX_LAYER_BYTES"),
    ):
        values = getattr(workload, label)
        over = [i for i, v in enumerate(values) if not v <= most]  # NaN counts as over
        if over:
            i = over[0]
            raise HulkInputError(
                f"layer '{workload.layer_names[i]}' has {label} {values[i]:.3g}, more than "
                f"{most:g} ({limits.cite(limit)})",
                source=source,
                field=label,
            )


def check_instance_size(num_machines: int, num_layers: int, data_parallel: int, source: str) -> None:
    """The sizes a placement problem may have: machines, layers, replica x layer slots."""
    _check_counts(
        (
            ("machines", num_machines, limits.MAX_MACHINES, "MAX_MACHINES", ""),
            ("layers", num_layers, limits.MAX_LAYERS, "MAX_LAYERS", "coarsen with layers_per_block"),
            ("replica x layer slots", data_parallel * num_layers, limits.MAX_SLOTS, "MAX_SLOTS",
             "use fewer replicas or coarser layers"),
        ),
        source,
    )  # fmt: skip


def check_machine_count(count: int, source: str) -> None:
    """Refuse more than ``MAX_MACHINES`` machines, before any ``M x M`` matrix exists."""
    _check_counts((("machines", count, limits.MAX_MACHINES, "MAX_MACHINES", ""),), source)
