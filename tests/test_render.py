"""Pictures: placement map, Gantt chart, leaderboard, learning curves (render.py and `hulk plot`)."""

from __future__ import annotations

import math
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from agents.cli import EXIT_BAD_INPUT, app
from hulk_env import render
from hulk_env.baselines import get_method
from hulk_env.cluster import Cluster, Machine
from hulk_env.errors import HulkInputError
from hulk_env.evaluation import run_methods
from hulk_env.generators import fixed_instance
from hulk_env.instance import Instance
from hulk_env.simulate import simulate
from hulk_env.units import GB, GBPS, MS, TFLOPS
from hulk_env.workload import Workload

runner = CliRunner()
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(path: Path) -> tuple[int, int]:
    """``(width, height)`` from a PNG's IHDR chunk; fails on anything that is not a PNG."""
    data = Path(path).read_bytes()
    assert data[:8] == PNG_SIGNATURE, f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def assert_sensible_png(path: Path, min_w: int = 500, min_h: int = 250) -> None:
    """A PNG of a readable size whose pixels are not all one colour."""
    width, height = png_size(path)
    assert min_w <= width <= 4000 and min_h <= height <= 4000, (width, height)
    import matplotlib.image

    pixels = matplotlib.image.imread(str(path))
    assert pixels.reshape(-1, pixels.shape[-1]).std(axis=0).max() > 0.05  # something is drawn


def chain_instance(data_parallel: int = 1) -> Instance:
    """3 machines (2 regions, no coordinates), a 4-layer chain with known activation bytes."""
    machines = tuple(
        Machine(f"m{i}", region, "custom", 1, 100 * TFLOPS, 80 * GB)
        for i, region in enumerate(("a", "a", "b"))
    )
    lat = np.full((3, 3), 10 * MS)
    np.fill_diagonal(lat, 0.0)
    cluster = Cluster(machines, lat, np.full((3, 3), 1 * GBPS), name="toy3")
    workload = Workload(
        name="chain4",
        layer_names=("l0", "l1", "l2", "l3"),
        flops=np.full(4, 1 * TFLOPS),
        params=np.full(4, 1e8),
        activation_bytes=np.array([1e6, 2e6, 3e6, 4e6]),
        stash_bytes=np.full(4, 1e6),
        edges=[(0, 1), (1, 2), (2, 3)],
        num_micro_batches=4,
        data_parallel=data_parallel,
        schedule="1f1b",
    )
    return Instance(cluster, workload, "toy3xchain4")


@pytest.fixture(scope="module")
def geo_case() -> tuple[Instance, np.ndarray]:
    """A geographic cluster (12 machines, 3 cities) x GPT-3 1.3B, D=2, placed by the stage DP."""
    inst = fixed_instance("cloud-3region", "gpt3-1.3b", data_parallel=2)
    return inst, get_method("latency-chain-dp")(inst, 0, None).placement


# ---- numbers behind the pictures --------------------------------------------------------


def test_machine_stages_follow_first_layers():
    inst = chain_instance()
    stages = render.machine_stages(inst, np.array([[2, 2, 0, 0]]))
    assert stages.tolist() == [1, -1, 0]


def test_machine_stages_take_the_smallest_over_replicas():
    inst = chain_instance(data_parallel=2)
    stages = render.machine_stages(inst, np.array([[0, 0, 1, 1], [1, 1, 2, 2]]))
    assert stages.tolist() == [0, 0, 1]


def test_link_traffic_counts_activations_and_gradients_per_micro_batch():
    inst = chain_instance()
    traffic = render.link_traffic_bytes(inst, np.array([[0, 0, 1, 2]]))
    expected = np.zeros((3, 3))
    expected[0, 1] = expected[1, 0] = 4 * 2e6  # edge 1->2, 4 micro-batches, both directions
    expected[1, 2] = expected[2, 1] = 4 * 3e6  # edge 2->3
    np.testing.assert_allclose(traffic, expected)


def test_link_traffic_adds_ring_allreduce():
    inst = chain_instance(data_parallel=2)
    traffic = render.link_traffic_bytes(inst, np.array([[0, 0, 0, 0], [2, 2, 2, 2]]))
    grad = float(np.sum(inst.workload.params) * inst.workload.grad_bytes_per_param)
    # One ring of k=2 machines holding every layer: 2 (k-1)/k * G = G each way, no pipeline.
    np.testing.assert_allclose(traffic[0, 2], grad)
    np.testing.assert_allclose(traffic[2, 0], grad)
    assert traffic.sum() == pytest.approx(2 * grad)


def test_wan_share():
    inst = chain_instance()
    assert render.wan_share(inst, np.array([[0, 0, 1, 1]])) == 0.0  # a -> a
    assert render.wan_share(inst, np.array([[0, 0, 2, 2]])) == 1.0  # a -> b
    assert render.wan_share(inst, np.array([[0, 0, 0, 0]])) == 0.0  # nothing moves


# ---- figures ------------------------------------------------------------------------------


def test_placement_figure_geographic(tmp_path, geo_case):
    inst, placement = geo_case
    path = render.save_figure(render.placement_figure(inst, placement), tmp_path / "map.png")
    assert_sensible_png(path, min_w=1200, min_h=500)


def test_placement_figure_without_coordinates(tmp_path):
    inst = chain_instance()
    path = render.save_figure(render.placement_figure(inst, np.array([[0, 1, 2, 2]])), tmp_path / "p.png")
    assert_sensible_png(path)


def test_gantt_figure(tmp_path, geo_case):
    inst, placement = geo_case
    result = simulate(inst.cluster, inst.workload, placement)
    path = render.save_figure(render.gantt_figure(result, inst, max_rows=12), tmp_path / "g.png")
    assert_sensible_png(path, min_w=1000, min_h=300)


def test_gantt_with_allreduce_rows(tmp_path):
    inst = chain_instance(data_parallel=2)
    result = simulate(inst.cluster, inst.workload, np.array([[0, 0, 1, 1], [2, 2, 1, 1]]))
    assert any(t.kind == "allreduce" for t in result.tasks)
    path = render.save_figure(render.gantt_figure(result, inst), tmp_path / "g.png")
    assert_sensible_png(path)


def test_gantt_needs_recorded_tasks():
    inst = chain_instance()
    result = simulate(inst.cluster, inst.workload, np.array([[0, 0, 1, 1]]), record=False)
    with pytest.raises(HulkInputError, match="record=True"):
        render.gantt_figure(result, inst)


def test_merged_bars_join_back_to_back_layers():
    inst = chain_instance()
    result = simulate(inst.cluster, inst.workload, np.array([[0, 0, 0, 0]]))
    bars = render._merged_bars(result.tasks)
    # One machine, 4 micro-batches: one forward and one backward bar per micro-batch.
    assert sorted((b.kind, b.micro_batch) for b in bars) == sorted(
        [("forward", j) for j in range(4)] + [("backward", j) for j in range(4)]
    )


def test_leaderboard_from_rows_and_summary(tmp_path):
    inst = chain_instance()
    rows = run_methods([inst], ["naive", "compute-greedy", "random"], progress=False)
    summary = {e["method"]: e for e in render.speedup_summary(rows)}
    assert summary["naive"]["geomean"] == pytest.approx(1.0)
    for e in summary.values():
        assert e["low"] <= e["geomean"] <= e["high"]
    path = render.save_figure(render.leaderboard_figure(rows, reference=1.25), tmp_path / "lb.png")
    assert_sensible_png(path)


def test_speedup_summary_geometric_mean_and_error():
    rows = [{"instance": str(i), "method": "m", "speedup_vs_naive": v} for i, v in enumerate((1.0, 4.0, float("nan")))]
    (entry,) = render.speedup_summary(rows)
    assert entry["geomean"] == pytest.approx(2.0) and entry["n"] == 2
    se = np.std(np.log([1.0, 4.0]), ddof=1) / math.sqrt(2)
    assert entry["high"] == pytest.approx(2.0 * math.exp(se))


def test_read_results_csv_errors(tmp_path):
    missing = tmp_path / "missing.csv"
    missing.write_text("instance,method\nx,naive\n")
    with pytest.raises(HulkInputError, match="speedup_vs_naive"):
        render.read_results_csv(missing)
    bad = tmp_path / "bad.csv"
    bad.write_text("instance,method,speedup_vs_naive\nx,naive,fast\n")
    with pytest.raises(HulkInputError) as err:
        render.read_results_csv(bad)
    assert err.value.row == 2 and "fast" in str(err.value)
    empty = tmp_path / "empty.csv"
    empty.write_text("instance,method,speedup_vs_naive\n")
    with pytest.raises(HulkInputError, match="no result rows"):
        render.read_results_csv(empty)


def write_event_file(directory: Path, tag: str, points: list[tuple[int, float]]) -> Path:
    """A TensorBoard event file with one scalar series (tensorboard's writer, no torch)."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    writer = EventFileWriter(str(directory))
    for step, value in points:
        summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)])
        writer.add_event(event_pb2.Event(step=step, wall_time=0.0, summary=summary))
    writer.close()
    return directory


def test_read_curves_from_tensorboard_and_csv(tmp_path):
    run = tmp_path / "run"
    write_event_file(run / "tb" / "ppo_1", "placement/speedup_vs_naive", [(100, 1.0), (200, 1.5)])
    write_event_file(run / "tb" / "ppo_2", "placement/speedup_vs_naive", [(300, 2.0)])  # a resumed run
    (run / "eval").mkdir()
    (run / "eval" / "evaluations.csv").write_text("timesteps,mean_reward,mean_speedup\n100,0.1,1.1\n200,0.2,1.2\n")
    curves = {c.tag: c for c in render.read_curves(run)}
    tb = curves["placement/speedup_vs_naive"]
    assert tb.steps.tolist() == [100, 200, 300] and tb.values.tolist() == [1.0, 1.5, 2.0]
    assert curves["eval/mean_speedup"].values.tolist() == [1.1, 1.2]
    path = render.save_figure(render.curves_figure({"a": list(curves.values())}), tmp_path / "c.png")
    assert_sensible_png(path)


def test_read_curves_errors(tmp_path):
    with pytest.raises(HulkInputError, match="no such"):
        render.read_curves(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(HulkInputError, match="no learning curves"):
        render.read_curves(tmp_path / "empty")
    csv = tmp_path / "log.csv"
    csv.write_text("step,loss\n1,0.5\n2,0.4\n")
    (curve,) = render.read_curves(csv)
    with pytest.raises(HulkInputError, match="available: loss"):
        render.curves_figure({"x": [curve]}, tags=["reward"])


def test_smooth():
    values = np.array([1.0, 1.0, 1.0])
    np.testing.assert_allclose(render.smooth(values, 0.9), values)  # bias-corrected
    np.testing.assert_allclose(render.smooth(np.array([0.0, 2.0]), 0.0), [0.0, 2.0])
    assert render.smooth(np.array([0.0, 10.0]), 0.5)[1] == pytest.approx(10.0 * 0.5 / 0.75)


def test_import_render_pulls_neither_torch_nor_matplotlib():
    code = "import sys, hulk_env, hulk_env.render; print('torch' in sys.modules, 'matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


# ---- `hulk plot` --------------------------------------------------------------------------


def run(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


@pytest.mark.parametrize("kind", ["placement", "gantt"])
def test_plot_placement_and_gantt_commands(tmp_path, kind):
    out = tmp_path / f"{kind}.png"
    result = run("plot", kind, "--cluster", "cloud-3region", "--model", "gpt3-350m", "--method", "compute-greedy",
                 "-d", "2", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert_sensible_png(out)


def test_plot_leaderboard_and_curves_commands(tmp_path):
    inst = chain_instance()
    from hulk_env.evaluation import write_results

    paths = write_results(run_methods([inst], ["naive", "compute-greedy"], progress=False), tmp_path / "ev")
    result = run("plot", "leaderboard", str(paths["csv"]), "--out", str(tmp_path / "lb.png"))
    assert result.exit_code == 0, result.output
    assert_sensible_png(tmp_path / "lb.png")
    runs = [write_event_file(tmp_path / name / "tb", "rollout/ep_rew_mean", [(0, 0.0), (10, 1.0), (20, 1.5)])
            for name in ("gnn", "mlp")]
    result = run("plot", "curves", *[str(p.parent) for p in runs], "--out", str(tmp_path / "c.png"))
    assert result.exit_code == 0, result.output
    assert_sensible_png(tmp_path / "c.png")


@pytest.mark.parametrize(
    "args",
    [
        ("plot", "leaderboard", "does-not-exist.csv"),
        ("plot", "curves", "no-such-run"),
        ("plot", "placement", "--model", "no-such-model"),
        ("plot", "gantt", "--method", "no-such-method"),
    ],
)
def test_plot_bad_input_is_one_line(tmp_path, args):
    result = run(*args, "--out", str(tmp_path / "x.png"))
    assert result.exit_code == EXIT_BAD_INPUT
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert not (tmp_path / "x.png").exists()
