"""Unit constants and conversions.

Inside hulk everything is SI, float64: seconds, bytes, FLOPs, FLOP/s, bytes per second.
Files and people speak milliseconds, gigabytes, gigabits per second and TFLOP/s; convert once,
at the loaders, with the constants and functions below.
"""

from __future__ import annotations

MS = 1e-3  # seconds per millisecond
MB = 1e6  # bytes per megabyte (decimal, as GPU vendors and cloud providers quote)
GB = 1e9
BITS_PER_BYTE = 8.0
GBPS = 1e9 / BITS_PER_BYTE  # bytes per second in one gigabit per second
TFLOPS = 1e12  # FLOP/s in one TFLOP/s


def ms_to_s(ms: float) -> float:
    """Milliseconds to seconds."""
    return ms * MS


def s_to_ms(s: float) -> float:
    """Seconds to milliseconds."""
    return s / MS


def gbps_to_bytes_per_s(gbps: float) -> float:
    """Gigabits per second to bytes per second."""
    return gbps * GBPS


def bytes_per_s_to_gbps(bps: float) -> float:
    """Bytes per second to gigabits per second."""
    return bps / GBPS
