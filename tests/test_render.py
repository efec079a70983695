"""Pictures: placement map, Gantt chart, leaderboard, learning curves (hulk_env.render and `hulk plot`)."""

from __future__ import annotations

import math
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from hulk_cli.app import app
from hulk_cli.output import EXIT_BAD_INPUT
from hulk_env import cost, render
from hulk_env.baselines import get_method
from hulk_env.cluster import Cluster, Machine
from hulk_env.errors import HulkInputError
from hulk_env.evaluation import read_results_csv, run_methods
from hulk_env.generators import fixed_instance
from hulk_env.instance import Instance
from hulk_env.simulate import simulate
from hulk_env.units import GB, GBPS, MS, TFLOPS
from hulk_env.workload import Workload
from tests.tb_events import write_event_file

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


def test_placement_text_partial_and_complete():
    inst = chain_instance()
    partial = render.placement_text(inst, np.array([[2, 2, -1, -1]]))
    lines = partial.splitlines()
    assert len(lines) == 1 + 3  # header + every machine, idle ones too
    assert lines[3].split()[:2] == ["b", "m2"] and lines[3].endswith("r0:0-1")
    state_gb = (inst.workload.state_bytes_per_param * 1e8 + 1e6) * 2 / GB  # 2 layers, 1 stashed micro-batch
    assert f"{state_gb:,.1f}/80.0" in lines[3] and "iteration" not in partial
    complete = render.placement_text(inst, np.array([[0, 0, 1, 2]]))
    t = cost.evaluate(inst.cluster, inst.workload, np.array([[0, 0, 1, 2]])).iteration_time_s
    assert complete.splitlines()[-1].startswith(f"iteration {t:.4g} s = compute")


# ---- figures ------------------------------------------------------------------------------


def test_placement_figure_geographic(tmp_path, geo_case):
    inst, placement = geo_case
    path = render.save_figure(render.placement_figure(inst, placement), tmp_path / "map.png")
    assert_sensible_png(path, min_w=1200, min_h=500)


def test_placement_figure_without_coordinates(tmp_path):
    inst = chain_instance()
    path = render.save_figure(render.placement_figure(inst, np.array([[0, 1, 2, 2]])), tmp_path / "p.png")
    assert_sensible_png(path)


def test_placement_figure_of_a_partial_placement(geo_case):
    inst, placement = geo_case
    partial = placement.copy()
    partial[1:] = -1  # replica 0 placed, replica 1 not yet
    fig = render.placement_figure(inst, partial)
    assert f"{partial.size // 2}/{partial.size} slots placed" in fig.texts[0].get_text()
    pixels = render.figure_to_rgb(fig)
    assert pixels.dtype == np.uint8 and pixels.shape[2] == 3 and pixels.std() > 0
    nothing = render.figure_to_rgb(render.placement_figure(inst, np.full_like(placement, -1)))
    assert nothing.shape == pixels.shape


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
    bars = render.merged_bars(result.tasks)
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


def test_leaderboard_figure_ranks_solved_first_and_shows_the_unsolved():
    rows = [
        {"instance": "a", "method": "fast-but-fails", "speedup_vs_naive": 5.0},
        {"instance": "b", "method": "fast-but-fails", "speedup_vs_naive": float("nan")},
        {"instance": "a", "method": "steady", "speedup_vs_naive": 1.5},
        {"instance": "b", "method": "steady", "speedup_vs_naive": 1.2},
        {"instance": "a", "method": "never", "speedup_vs_naive": float("nan")},
        {"instance": "b", "method": "never", "speedup_vs_naive": float("nan")},
    ]
    summary = render.speedup_summary(rows)
    assert [(e["method"], e["n"], e["instances"]) for e in summary] == [
        ("steady", 2, 2), ("fast-but-fails", 1, 2), ("never", 0, 2),
    ]  # fmt: skip
    fig = render.leaderboard_figure(rows)
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert labels == ["steady", "fast-but-fails\n1/2 solved", "never\n0/2 solved"]
    render.pyplot().close(fig)
    with pytest.raises(HulkInputError, match="no finite speed-ups"):
        render.leaderboard_figure([r for r in rows if r["method"] == "never"])


def test_read_results_csv_errors(tmp_path):
    missing = tmp_path / "missing.csv"
    missing.write_text("instance,method\nx,naive\n")
    with pytest.raises(HulkInputError, match="speedup_vs_naive"):
        read_results_csv(missing)
    bad = tmp_path / "bad.csv"
    bad.write_text("instance,method,speedup_vs_naive\nx,naive,fast\n")
    with pytest.raises(HulkInputError) as err:
        read_results_csv(bad)
    assert err.value.row == 2 and "fast" in str(err.value)
    empty = tmp_path / "empty.csv"
    empty.write_text("instance,method,speedup_vs_naive\n")
    with pytest.raises(HulkInputError, match="no result rows"):
        read_results_csv(empty)


def test_read_csv_curves(tmp_path):
    csv = tmp_path / "log.csv"
    csv.write_text("step,loss,method\n1,0.5,a\n2,,b\n")
    (curve,) = render.read_csv_curves(csv, prefix="train/")  # the text column is left out
    assert curve.tag == "train/loss" and curve.steps.tolist() == [1.0, 2.0]
    assert curve.values[0] == 0.5 and math.isnan(curve.values[1])
    bad = tmp_path / "bad.csv"
    bad.write_text("step,loss\none,0.5\n")
    with pytest.raises(HulkInputError, match="step column 'step' holds non-numbers"):
        render.read_csv_curves(bad)
    with pytest.raises(HulkInputError, match="available: loss"):
        render.curves_figure({"x": [render.Curve("loss", np.arange(2.0), np.ones(2))]}, tags=["reward"])


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
