"""What every figure shares: pyplot on the Agg backend, files and pixels, line widths, labels."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hulk_env.units import GB

WAN_COLOUR = "tab:red"
LAN_COLOUR = "tab:blue"
STAGE_CMAP = "viridis"


def pyplot():
    """``matplotlib.pyplot`` with the non-interactive Agg backend (imported on first use)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: str | Path, dpi: int | None = None) -> Path:
    """Save ``fig`` as PNG (parent folders created) and close it, atomically: the PNG is drawn
    in memory first, so a failed draw or a killed run leaves no partial file behind."""
    import io

    from hulk_env.files import atomic_write_bytes

    plt = pyplot()
    out = Path(path)
    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format="png", dpi=dpi)
    finally:
        plt.close(fig)
    out.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write_bytes(out, buffer.getvalue())


def figure_to_rgb(fig) -> np.ndarray:
    """``[H, W, 3]`` uint8 pixels of ``fig`` (closed afterwards): the env's ``rgb_array``."""
    plt = pyplot()
    fig.canvas.draw()
    rgb = np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()
    plt.close(fig)
    return rgb


def integer_locator(nbins: int = 8):
    """Axis ticks on integers only (stages, machine ranks)."""
    from matplotlib.ticker import MaxNLocator

    return MaxNLocator(integer=True, nbins=nbins)


def link_width(bytes_: float, max_bytes: float, widest: float = 7.0) -> float:
    """Line width for a link: area-like (square-root) scale, so small flows stay visible."""
    return 0.6 + widest * float(np.sqrt(bytes_ / max_bytes)) if max_bytes > 0 else 0.6


def bytes_label(bytes_: float) -> str:
    """``"12 GB"``, ``"3.4 GB"`` or ``"560 MB"``: bytes for a line label."""
    gb = bytes_ / GB
    return f"{gb:.0f} GB" if gb >= 100 else f"{gb:.1f} GB" if gb >= 1 else f"{bytes_ / 1e6:.0f} MB"


def log_speedup_axis(ax, reference: float | None = None) -> None:
    """A log y axis for speed-ups: a line at 1 (= naive), ticks at 1-2-5, optional reference."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    ax.axhline(1.0, color="black", lw=0.8, zorder=1)
    if reference is not None:
        ax.axhline(reference, color="tab:red", lw=1.0, ls="--", zorder=1, label=f"\u00d7{reference:g}")
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    ax.grid(axis="y", which="both", alpha=0.25, zorder=0)
