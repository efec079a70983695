"""Learning curves of training runs: TensorBoard event files and run directories (agents/training/tb_curves.py)."""

from __future__ import annotations

import pytest

from agents.training.tb_curves import read_curves, read_event_curves
from hulk_env import render
from hulk_env.errors import HulkInputError
from tests.tb_events import write_event_file


def test_read_curves_from_tensorboard_and_csv(tmp_path):
    run = tmp_path / "run"
    write_event_file(run / "tb" / "ppo_1", "placement/speedup_vs_naive", [(100, 1.0), (200, 1.5)])
    write_event_file(run / "tb" / "ppo_2", "placement/speedup_vs_naive", [(300, 2.0)])  # a resumed run
    (run / "eval").mkdir()
    (run / "eval" / "evaluations.csv").write_text("timesteps,mean_reward,mean_speedup\n100,0.1,1.1\n200,0.2,1.2\n")
    curves = {c.tag: c for c in read_curves(run)}
    tb = curves["placement/speedup_vs_naive"]
    assert tb.steps.tolist() == [100, 200, 300] and tb.values.tolist() == [1.0, 1.5, 2.0]
    assert curves["eval/mean_speedup"].values.tolist() == [1.1, 1.2]
    assert set(curves) == {"placement/speedup_vs_naive", "eval/mean_reward", "eval/mean_speedup"}
    fig = render.curves_figure({"a": list(curves.values())})
    # One panel per default tag the run has (eval/mean_reward is not one).
    assert [ax.get_title() for ax in fig.axes if ax.has_data()] == ["placement/speedup_vs_naive", "eval/mean_speedup"]
    render.save_figure(fig, tmp_path / "c.png")


def test_read_curves_errors(tmp_path):
    with pytest.raises(HulkInputError, match="no such"):
        read_curves(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(HulkInputError, match="no learning curves"):
        read_curves(tmp_path / "empty")
    csv = tmp_path / "log.csv"
    csv.write_text("step,loss\n1,0.5\n2,0.4\n")
    (curve,) = read_curves(csv)
    assert curve.tag == "loss" and curve.values.tolist() == [0.5, 0.4]
    junk = tmp_path / "events.out.tfevents.1"
    junk.write_bytes(b"not an event file at all")
    assert read_event_curves([junk]) == []  # tensorboard skips what it cannot parse
    with pytest.raises(HulkInputError, match="no learning curves"):
        read_curves(junk)
