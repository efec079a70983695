"""Test helper: TensorBoard event files written with tensorboard's own writer (no torch)."""

from __future__ import annotations

from pathlib import Path


def write_event_file(directory: Path, tag: str, points: list[tuple[int, float]]) -> Path:
    """A TensorBoard event file in ``directory`` with one scalar series; returns ``directory``."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    writer = EventFileWriter(str(directory))
    for step, value in points:
        summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)])
        writer.add_event(event_pb2.Event(step=step, wall_time=0.0, summary=summary))
    writer.close()
    return directory
