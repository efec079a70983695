"""Unit constants and conversions.

Inside hulk everything is SI, float64: seconds, bytes, FLOPs, FLOP/s, bytes per second.
Files and people speak milliseconds, gigabytes, gigabits per second and TFLOP/s; convert once,
at the loaders, with the functions below.
"""

from __future__ import annotations

MS = 1e-3  # seconds per millisecond
US = 1e-6  # seconds per microsecond
KB = 1e3  # bytes per kilobyte (decimal, as GPU vendors and cloud providers quote)
MB = 1e6
GB = 1e9
TB = 1e12
GIB = 2.0**30  # bytes per gibibyte, for memory that is quoted in binary units
BITS_PER_BYTE = 8.0
GBPS = 1e9 / BITS_PER_BYTE  # bytes per second in one gigabit per second
TFLOPS = 1e12  # FLOP/s in one TFLOP/s


def ms_to_s(ms: float) -> float:
    """Milliseconds to seconds."""
    return ms * MS


def s_to_ms(s: float) -> float:
    """Seconds to milliseconds."""
    return s / MS


def gb_to_bytes(gb: float) -> float:
    """Decimal gigabytes to bytes."""
    return gb * GB


def bytes_to_gb(n_bytes: float) -> float:
    """Bytes to decimal gigabytes."""
    return n_bytes / GB


def gbps_to_bytes_per_s(gbps: float) -> float:
    """Gigabits per second to bytes per second."""
    return gbps * GBPS


def bytes_per_s_to_gbps(bps: float) -> float:
    """Bytes per second to gigabits per second."""
    return bps / GBPS


def tflops_to_flops(tflops: float) -> float:
    """TFLOP/s to FLOP/s."""
    return tflops * TFLOPS


def flops_to_tflops(flops: float) -> float:
    """FLOP/s to TFLOP/s."""
    return flops / TFLOPS
