"""``hulk show cluster|model``: describe a cluster or a model (built-in name or file)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Column, Table

from hulk_cli.output import clean_errors, console, print_json

app = typer.Typer(no_args_is_help=True, help="Describe a cluster or a model.")


@app.command("cluster")
@clean_errors
def cluster(
    source: Annotated[str, typer.Argument(help="A built-in name, a paper data directory, or a YAML/JSON file.")] = "default",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
    min_rtt_fraction: Annotated[float, typer.Option(
        "--min-rtt-fraction", min=0.0, max=1.0,
        help="Paper data: drop a measured RTT below this fraction of the light-in-fibre round trip "
        "(1.0 = strict physics; 0.1 keeps all but the grossly impossible Tokyo-Berlin 4 ms).",
    )] = 1.0,
    links: Annotated[bool, typer.Option("--links", help="List every link: latency, RTT, bandwidth, measured or imputed and from what.")] = False,
) -> None:
    """Summarise a cluster: machines per region, GPUs, memory, links, and cleaning fixes."""
    from hulk_env.cluster import load_cluster
    from hulk_env.cluster.links import link_rows

    cluster, report = load_cluster(source, min_rtt_fraction=min_rtt_fraction)
    summary = cluster.summary()
    if report is not None:
        summary["cleaning"] = report.to_dict()
    if links:
        summary["links"] = link_rows(cluster)
    if as_json:
        print_json(summary)
        return
    render_cluster_summary(summary)
    if links:
        render_links(summary["links"])


def render_links(rows: list[dict]) -> None:
    """One table row per machine pair (latency one-way, as everywhere); the source says where
    the latency and, apart, the bandwidth came from."""
    from hulk_env.cluster.links import describe

    table = Table()
    for header in ("a", "b", "regions", "latency ms (one-way)", "RTT ms", "Gbps", "source"):
        table.add_column(header, overflow="fold")  # names are never cut short
    for row in rows:
        regions = row["region_a"] if row["region_a"] == row["region_b"] else f"{row['region_a']} - {row['region_b']}"
        table.add_row(
            row["a"], row["b"], regions, f"{row['latency_ms']:.2f}", f"{row['rtt_ms']:.2f}",
            f"{row['bandwidth_gbps']:.3g}", describe(row),
        )
    console.print(table)


def render_cluster_summary(summary: dict) -> None:
    """Rich tables for a cluster summary."""
    console.print(
        f"[bold]{summary['name']}[/]: {summary['machines']} machines, {summary['gpus']} GPUs in "
        f"{summary['regions']} regions, {summary['total_memory_bytes'] / 1e9:,.0f} GB, "
        f"{summary['total_flops'] / 1e15:,.2f} PFLOP/s effective; "
        f"{summary['imputed_pairs']} link pairs imputed"
    )
    table = Table(Column("region", overflow="fold"), "machines", "GPUs", "TFLOP/s", "memory GB")
    for row in summary["by_region"]:
        table.add_row(
            row["region"], str(row["machines"]), str(row["gpus"]),
            f"{row['tflops']:,.0f}", f"{row['memory_gb']:,.0f}",
        )
    console.print(table)
    lat, bw = summary["latency_ms"], summary["bandwidth_gbps"]
    console.print(
        f"one-way latency ms: min {lat['min']:.2f} / median {lat['median']:.2f} / max {lat['max']:.2f}; "
        f"bandwidth Gbps: min {bw['min']:.3g} / median {bw['median']:.3g} / max {bw['max']:.3g}"
    )
    console.print(
        f"convention: {summary['latency_convention']}; in files `latency_ms` is one-way and "
        "`rtt_ms` the round trip (--links lists every pair)"
    )
    if "cleaning" in summary:
        fixes = ", ".join(f"{k.replace('_', ' ')}: {v}" for k, v in summary["cleaning"].items())
        console.print(f"cleaning report: {fixes}")


@app.command("model")
@clean_errors
def model(
    source: Annotated[str, typer.Argument(help="A built-in model name or a YAML/JSON file.")] = "default",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
    layers: Annotated[bool, typer.Option("--layers", help="List every layer.")] = False,
    expert_group: Annotated[int, typer.Option(
        "--expert-group", min=0,
        help="Mixture of experts: machines in each MoE layer's expert-parallel group for the "
        "all-to-all bytes (0: the data-parallel degree, or the expert count when that is 1).",
    )] = 0,
) -> None:
    """Summarise a model's layer graph and training settings (MoE: active parameters and the
    all-to-all bytes of every MoE layer)."""
    from hulk_env.workload import load_workload

    workload = load_workload(source)
    summary = workload.summary()
    group = _expert_group(summary, expert_group)
    if as_json:
        if layers:
            summary["layer_list"] = layer_rows(workload)
        if workload.moe is not None:
            summary["expert_group"] = group
            summary["a2a_per_layer"] = _a2a_rows(workload, group)
        print_json(summary)
        return
    console.print(
        f"[bold]{summary['name']}[/]: {summary['layers']} layers ({'chain' if summary['is_chain'] else 'DAG'}, "
        f"{summary['edges']} edges), {summary['params'] / 1e9:,.3f} B params, "
        f"{summary['forward_flops_per_micro_batch'] / 1e12:,.1f} TFLOP forward per micro-batch, "
        f"model state {summary['model_state_bytes'] / 1e9:,.1f} GB"
    )
    console.print(
        f"training: micro-batch size {summary['micro_batch_size']}, {summary['num_micro_batches']} "
        f"micro-batches, data-parallel {summary['data_parallel']}, schedule {summary['schedule']}, "
        f"recompute {summary['recompute']}"
    )
    if workload.moe is not None:
        render_moe(workload, summary, group)
    if layers:
        table = Table("#", "layer", "GFLOP", "M params", "act MB", "stash MB")
        for i, row in enumerate(layer_rows(workload)):
            table.add_row(
                str(i), row["name"], f"{row['flops'] / 1e9:,.1f}", f"{row['params'] / 1e6:,.1f}",
                f"{row['activation_bytes'] / 1e6:,.1f}", f"{row['stash_bytes'] / 1e6:,.1f}",
            )
        console.print(table)


def _expert_group(summary: dict, given: int) -> int:
    if given:
        return given
    return summary["data_parallel"] if summary["data_parallel"] > 1 else max(summary.get("num_experts", 1), 1)


def _a2a_rows(workload, group: int) -> list[dict]:
    from hulk_env.moe import a2a_per_layer

    return [row._asdict() for row in a2a_per_layer(workload, group)]


def render_moe(workload, summary: dict, group: int) -> None:
    """Total and active parameters, and each MoE layer's all-to-all bytes per micro-batch."""
    console.print(
        f"mixture of experts: {summary['moe_layers']} MoE blocks, {summary['num_experts']} experts, "
        f"top-{summary['top_k']}; {summary['params'] / 1e9:,.3f} B params in total, "
        f"{summary['active_params'] / 1e9:,.3f} B active per token "
        f"({summary['expert_params'] / 1e9:,.3f} B in routed experts)"
    )
    console.print(
        f"all-to-all per MoE layer, per replica and micro-batch, expert-parallel group of {group} "
        f"machine(s) (--expert-group): dispatch V = capacity x top-k x tokens x hidden x bytes; "
        f"(G-1)/G of V leaves the machine, dispatch and combine, in each pass"
    )
    table = Table("layer", "dispatched MB (V)", "forward MB off-machine", "backward MB off-machine")
    for row in _a2a_rows(workload, group):
        table.add_row(
            row["layer"], f"{row['dispatched_bytes'] / 1e6:,.1f}", f"{row['forward_bytes'] / 1e6:,.1f}",
            f"{row['backward_bytes'] / 1e6:,.1f}",
        )
    console.print(table)


def layer_rows(workload) -> list[dict]:
    """One dict per layer, for tables and JSON."""
    return [
        {
            "name": name,
            "flops": float(workload.flops[i]),
            "params": float(workload.params[i]),
            "activation_bytes": float(workload.activation_bytes[i]),
            "stash_bytes": float(workload.stash_bytes[i]),
        }
        for i, name in enumerate(workload.layer_names)
    ]
