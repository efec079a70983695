"""GPU catalog: name or CUDA compute capability -> peak FLOP/s and memory.

Figures are the vendor's datasheet / architecture-whitepaper peaks at boost clock, dense (no
2:4 sparsity). ``fp16_tensor_flops`` is the FP16 tensor-core rate *with FP32 accumulation*,
which is what mixed-precision training runs at; NVIDIA quotes GeForce cards (RTX 2080 Ti,
RTX 3090) at twice that rate with FP16 accumulation, and we take the lower, FP32-accumulate
figure from the whitepaper's appendix.

Pascal (compute capability 6.1: GP102/GP104 chips in GTX 10x0 and Tesla P40) has no tensor
cores and runs FP16 arithmetic at 1/64 of the FP32 rate, so mixed precision buys nothing
there: such GPUs train in FP32. :attr:`GpuSpec.train_peak_flops` takes the faster of the two
rates, which is FP32 on 6.1 and the tensor rate everywhere else.

Effective FLOP/s = peak x :data:`DEFAULT_MFU` (model-FLOPs utilisation), see its comment.

``intra_node_bps`` is one GPU's bandwidth to the other GPUs of its server, one direction (what
a ring all-reduce step moves per GPU), from the same datasheets: NVLink totals are quoted
bidirectional, so half of them (V100 SXM2 NVLink 2: 300 GB/s -> 150; A100 SXM4 NVLink 3:
600 GB/s -> 300; H100 SXM5 NVLink 4: 900 GB/s -> 450), and PCIe x16 per direction (Gen 3:
15.75 GB/s, Gen 4: 31.5, Gen 5: 63; PCI-SIG base specifications) for cards without NVLink
between every pair. Tensor-parallel all-reduces (:mod:`hulk_env.parallelism`) run over it; a
cluster file's ``intra_node_gb_per_s`` overrides it per machine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hulk_env.errors import HulkInputError
from hulk_env.units import GB, TFLOPS

# Model-FLOPs utilisation: the share of peak FLOP/s that large-model training actually
# achieves. Published values: GPT-3 21%, Gopher 33%, Megatron-Turing NLG 30%, PaLM 46%
# (Chowdhery et al. 2022, "PaLM", Table 3); Megatron-LM reaches 44-52% on A100s
# (Narayanan et al. 2021, arXiv 2104.04473). 0.4 sits in that range for a well-tuned job;
# a placement that moves work between machines cannot change it, so one constant suffices.
DEFAULT_MFU = 0.4

# A server holds at most 16 GPUs (NVIDIA DGX-2 / HGX-2 and 16-slot inference boxes); used to
# bound the GPU count inferred from a machine's total memory.
MAX_GPUS_PER_MACHINE = 16
# The usual server: NVIDIA DGX/HGX boards and the big cloud GPU instances hold 8 GPUs.
STANDARD_GPUS_PER_MACHINE = 8


@dataclass(frozen=True)
class GpuSpec:
    """One GPU model.

    Attributes:
        name: canonical name, e.g. ``"A100-80GB"``.
        capability: CUDA compute capability as ``"major.minor"``, e.g. ``"8.0"``.
        fp16_tensor_flops: peak dense FP16 FLOP/s (tensor cores, FP32 accumulate; plain FP16
            ALUs on GPUs without tensor cores).
        fp32_flops: peak FP32 FLOP/s (CUDA cores).
        memory_bytes: memory of one GPU, bytes.
        intra_node_bps: bandwidth to the other GPUs of its server, bytes/s per direction
            (NVLink or PCIe; module docstring).
    """

    name: str
    capability: str
    fp16_tensor_flops: float
    fp32_flops: float
    memory_bytes: float
    intra_node_bps: float = 15.75e9

    @property
    def train_peak_flops(self) -> float:
        """Peak FLOP/s training runs at: the faster of FP16 tensor and FP32 (FP32 on Pascal)."""
        return max(self.fp16_tensor_flops, self.fp32_flops)

    def effective_flops(self, mfu: float = DEFAULT_MFU) -> float:
        """Sustained training FLOP/s of one GPU: ``train_peak_flops x mfu``."""
        return self.train_peak_flops * mfu

    @property
    def memory_gb(self) -> float:
        return self.memory_bytes / GB


# One direction per GPU, bytes/s (module docstring).
PCIE3_BPS, PCIE4_BPS, PCIE5_BPS = 15.75e9, 31.5e9, 63e9
NVLINK2_BPS, NVLINK3_BPS, NVLINK4_BPS = 150e9, 300e9, 450e9


def _gpu(
    name: str, cc: str, fp16_tflops: float, fp32_tflops: float, mem_gb: float, link_bps: float = PCIE3_BPS
) -> GpuSpec:
    return GpuSpec(name, cc, fp16_tflops * TFLOPS, fp32_tflops * TFLOPS, mem_gb * GB, link_bps)


# Within one capability, the first entry is the reference GPU returned by gpu_by_capability(cc).
_CATALOG: tuple[GpuSpec, ...] = (
    # Pascal, 6.1: GeForce GTX 1080 / 1080 Ti whitepapers (GP104, GP102), Tesla P40 datasheet.
    # FP16 = FP32 / 64 on these chips.
    _gpu("P40", "6.1", 11.76 / 64, 11.76, 24),
    _gpu("GTX-1080Ti", "6.1", 11.34 / 64, 11.34, 11),
    _gpu("GTX-1080", "6.1", 8.87 / 64, 8.87, 8),
    # Volta, 7.0: Tesla V100 SXM2 datasheet (125 TFLOPS tensor, 15.7 FP32).
    _gpu("V100-16GB", "7.0", 125.0, 15.7, 16, NVLINK2_BPS),
    _gpu("V100-32GB", "7.0", 125.0, 15.7, 32, NVLINK2_BPS),
    # Turing, 7.5: Tesla T4 datasheet (65 mixed precision, 8.1 FP32); Turing whitepaper
    # appendix: RTX 2080 Ti reference 53.8 FP16-tensor/FP32-acc, 13.4 FP32; TITAN RTX 130.5, 16.3.
    _gpu("T4", "7.5", 65.0, 8.1, 16),
    _gpu("RTX-2080Ti", "7.5", 53.8, 13.4, 11),
    _gpu("TITAN-RTX", "7.5", 130.5, 16.3, 24),
    # Ampere GA100, 8.0: A100 Tensor Core GPU datasheet (SXM, 312 FP16 tensor, 19.5 FP32).
    _gpu("A100-40GB", "8.0", 312.0, 19.5, 40, NVLINK3_BPS),
    _gpu("A100-80GB", "8.0", 312.0, 19.5, 80, NVLINK3_BPS),
    # Ampere GA102, 8.6: A10 datasheet (125, 31.2); GA102 whitepaper appendix RTX 3090 (71
    # FP16-tensor/FP32-acc, 35.6 FP32); A40 datasheet (149.7, 37.4).
    _gpu("A10", "8.6", 125.0, 31.2, 24, PCIE4_BPS),
    _gpu("RTX-3090", "8.6", 71.0, 35.6, 24, PCIE4_BPS),
    _gpu("A40", "8.6", 149.7, 37.4, 48, PCIE4_BPS),
    # Ada, 8.9: L4 datasheet (121 dense, 30.3 FP32); L40S datasheet (362, 91.6).
    _gpu("L4", "8.9", 121.0, 30.3, 24, PCIE4_BPS),
    _gpu("L40S", "8.9", 362.0, 91.6, 48, PCIE4_BPS),
    # Pascal/Turing cards above: PCIe 3.0 x16. V100 SXM2: NVLink 2; A100 SXM4: NVLink 3 (A100
    # datasheet, 600 GB/s); GA102/Ada cards: PCIe 4.0 x16 (A40's NVLink bridge joins pairs only).
    # Hopper, 9.0: H100 SXM5 datasheet (NVLink 4, 900 GB/s) (989 dense FP16 tensor = 1,979 with sparsity / 2; 67 FP32).
    _gpu("H100", "9.0", 989.4, 66.9, 80, NVLINK4_BPS),
)

GPUS: dict[str, GpuSpec] = {g.name: g for g in _CATALOG}

# Extra spellings people use; keys are normalised by _key().
_ALIASES = {
    "v100": "V100-16GB",
    "a100": "A100-40GB",
    "h100sxm": "H100",
    "h100sxm5": "H100",
    "h10080gb": "H100",
    "teslap40": "P40",
    "teslat4": "T4",
    "teslav100": "V100-16GB",
    "1080ti": "GTX-1080Ti",
    "1080": "GTX-1080",
    "2080ti": "RTX-2080Ti",
    "3090": "RTX-3090",
    "titanrtx": "TITAN-RTX",
}


def _key(name: str) -> str:
    """Case-, space- and punctuation-insensitive key: ``"RTX 3090"`` -> ``"rtx3090"``."""
    key = re.sub(r"[^a-z0-9]", "", name.lower())
    return key.removeprefix("nvidia").removeprefix("geforce")


_BY_KEY = {_key(g.name): g for g in _CATALOG} | {k: GPUS[v] for k, v in _ALIASES.items()}


def normalize_capability(cc: float | str) -> str:
    """``8``, ``8.0``, ``"8"``, ``" 8.0 "`` -> ``"8.0"``; ``6.1`` -> ``"6.1"``.

    Raises:
        HulkInputError: not a number.
    """
    try:
        value = float(str(cc).strip())
    except ValueError:
        raise HulkInputError(
            f"compute capability must be a number like 8.0, got {cc!r}", field="capability"
        ) from None
    return f"{value:.1f}"


def capabilities() -> list[str]:
    """Known compute capabilities, ascending."""
    return sorted({g.capability for g in _CATALOG}, key=float)


def gpus_with_capability(cc: float | str) -> tuple[GpuSpec, ...]:
    """All catalog GPUs of one compute capability, reference GPU first.

    Raises:
        HulkInputError: unknown capability (the message lists the known ones).
    """
    key = normalize_capability(cc)
    found = tuple(g for g in _CATALOG if g.capability == key)
    if not found:
        raise HulkInputError(
            f"unknown CUDA compute capability {key}; known: {', '.join(capabilities())}",
            field="capability",
        )
    return found


def gpu_by_name(name: str) -> GpuSpec:
    """Look a GPU up by name, ignoring case, spaces and dashes (``"a100 80gb"`` works).

    Raises:
        HulkInputError: unknown name (the message lists the known ones).
    """
    spec = _BY_KEY.get(_key(str(name)))
    if spec is None:
        raise HulkInputError(f"unknown GPU '{name}'; known: {', '.join(GPUS)}", field="gpu")
    return spec


def gpu_by_capability(cc: float | str, memory_gb_per_gpu: float | None = None) -> GpuSpec:
    """The GPU of a compute capability: the reference one, or the one with that memory per GPU.

    Raises:
        HulkInputError: unknown capability, or no GPU of it has ``memory_gb_per_gpu``.
    """
    found = gpus_with_capability(cc)
    if memory_gb_per_gpu is None:
        return found[0]
    for g in found:
        if abs(g.memory_gb - float(memory_gb_per_gpu)) < 0.5:
            return g
    sizes = ", ".join(f"{g.name} ({g.memory_gb:g} GB)" for g in found)
    raise HulkInputError(
        f"no GPU of capability {found[0].capability} has {memory_gb_per_gpu:g} GB; known: {sizes}",
        field="memory",
    )


def gpus_from_total_memory(cc: float | str, total_memory_gb: float) -> tuple[GpuSpec, int]:
    """Infer GPU model and count of a machine known only by capability and total GPU memory.

    Rule: over every GPU of the capability and every count ``n`` in
    ``1..MAX_GPUS_PER_MACHINE``, pick the one whose ``n x memory per GPU`` is closest to the
    machine's memory (relative error); ties go to the count nearest
    :data:`STANDARD_GPUS_PER_MACHINE` (so 320 GB of 8.0 is 8 x A100-40GB, not 4 x A100-80GB,
    and 640 GB is 8 x A100-80GB, not 16 x A100-40GB), then to catalog order. Examples:
    7.0/384 GB -> 12 x V100-32GB, 8.6/152 GB -> 6 x A10 (144 GB, 5% off), 6.1/64 GB -> 8 x GTX-1080.

    Raises:
        HulkInputError: unknown capability or non-positive memory.
    """
    if not total_memory_gb > 0:
        raise HulkInputError(f"memory must be positive, got {total_memory_gb!r} GB", field="memory")
    best: tuple[float, int, int] | None = None  # (relative error, |n - 8|, catalog position)
    choice: tuple[GpuSpec, int] | None = None
    for pos, g in enumerate(gpus_with_capability(cc)):
        n = min(max(round(total_memory_gb / g.memory_gb), 1), MAX_GPUS_PER_MACHINE)
        err = round(abs(n * g.memory_gb - total_memory_gb) / total_memory_gb, 9)
        score = (err, abs(n - STANDARD_GPUS_PER_MACHINE), pos)
        if best is None or score < best:
            best, choice = score, (g, n)
    assert choice is not None
    return choice
