"""Text and matplotlib views: placements, simulated schedules, leaderboards, learning curves.

Pure functions of an instance and a placement (or a :class:`hulk_env.simulate.SimResult`, or
result rows, or :class:`Curve` lists) that return text or a matplotlib figure;
:func:`save_figure` writes a figure as PNG and :func:`figure_to_rgb` gives its pixels.
matplotlib is imported lazily, always with the non-interactive Agg backend, so
``import hulk_env.render`` stays light.

* :mod:`.text` -- :func:`placement_rows` and :func:`placement_text` (also the env's ``"ansi"``);
* :mod:`.placement` -- :func:`placement_figure`: a world map (machines at their cities, coloured
  by pipeline stage, links as wide as the bytes they carry) next to a pipeline view that shows
  every link in use, intra-city ones included (also the env's ``"rgb_array"``);
* :mod:`.gantt` -- :func:`gantt_figure`: the simulated schedule, machines and links as rows;
* :mod:`.leaderboard` -- :func:`leaderboard_figure`: geometric-mean speed-up over naive per
  method, with per-instance dots; :func:`speedup_bars_figure` per instance and method;
* :mod:`.curves` -- :func:`curves_figure`: learning curves from :class:`Curve` lists
  (:func:`read_csv_curves` reads CSV logs; TensorBoard logs: :mod:`agents.training.tb_curves`);
* :mod:`.common` -- pyplot, files and pixels, line widths and labels.

Bytes per link and the WAN share come from :mod:`hulk_env.traffic` (re-exported here).
"""

from hulk_env.render.common import figure_to_rgb, pyplot, save_figure
from hulk_env.render.curves import (
    DEFAULT_CURVE_TAGS,
    STEP_COLUMNS,
    Curve,
    curves_figure,
    read_csv_curves,
    smooth,
)
from hulk_env.render.gantt import KIND_COLOURS, Bar, gantt_figure, merged_bars
from hulk_env.render.leaderboard import leaderboard_figure, speedup_bars_figure, speedup_summary
from hulk_env.render.placement import machine_stages, placement_figure
from hulk_env.render.text import held_layers, layer_ranges, placement_rows, placement_text
from hulk_env.traffic import link_traffic_bytes, wan_share

__all__ = [
    "DEFAULT_CURVE_TAGS",
    "KIND_COLOURS",
    "STEP_COLUMNS",
    "Bar",
    "Curve",
    "curves_figure",
    "figure_to_rgb",
    "gantt_figure",
    "held_layers",
    "layer_ranges",
    "leaderboard_figure",
    "link_traffic_bytes",
    "machine_stages",
    "merged_bars",
    "placement_figure",
    "placement_rows",
    "placement_text",
    "pyplot",
    "read_csv_curves",
    "save_figure",
    "smooth",
    "speedup_bars_figure",
    "speedup_summary",
    "wan_share",
]
