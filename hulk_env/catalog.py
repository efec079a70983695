"""Named built-in clusters and models (no files needed)."""
# ---- clusters ---- (owned by cluster engineer)
# Built-in clusters are generated from the city table (hulk_env.geo) with a fixed seed by
# hulk_env.cluster.geo_cluster: same name, same cluster, no file needed. Links carry a 10%
# log-normal jitter on the distance model so that equally distant pairs are not all equal.
from collections.abc import Callable  # noqa: E402

from hulk_env.cluster import Cluster, geo_cluster  # noqa: E402
from hulk_env.errors import HulkInputError as _ClusterInputError  # noqa: E402

# The paper's machines per city (node_feature.csv) and its GPU mix as load_hulk_dir infers it
# from capability + memory on the 47 rows: (GPU, GPUs per machine, machines). Tested against
# the real files in tests/test_cluster_loaders.py.
PAPER_MACHINES_PER_CITY = {
    "Beijing": 5, "Neimeng": 5, "Nanjing": 5, "Quanzhou": 5, "California": 5, "Tokyo": 5,
    "Berlin": 3, "London": 1, "New Delhi": 3, "Paris": 4, "Rome": 5, "Brasilia": 1,
}  # fmt: skip
PAPER_GPU_MIX = (
    ("GTX-1080", 8, 4),
    ("GTX-1080", 16, 4),
    ("V100-32GB", 12, 10),
    ("T4", 9, 2),
    ("A100-40GB", 8, 4),
    ("A100-80GB", 8, 2),
    ("A10", 3, 1),
    ("A10", 4, 11),
    ("A10", 6, 8),
    ("A10", 13, 1),
)
# Cloud GPU instances (8 x A100-40/80GB, 8 x H100, 8 x V100-32GB, 4 x A10), weighted by how
# common they are.
CLOUD_GPU_MIX = (
    ("A100-40GB", 8, 3),
    ("A100-80GB", 8, 2),
    ("H100", 8, 1),
    ("V100-32GB", 8, 2),
    ("A10", 4, 2),
)
CLUSTER_SEED = 0
LINK_NOISE = 0.1
# The main job's cluster: the paper's setting (12 cities, 47 machines), so results compare
# with its claim; the agent's size-agnostic policy handles it (DESIGN.md measured 47 machines).
DEFAULT_CLUSTER = "paper-12city-47"

_CLUSTERS: dict[str, Callable[[], Cluster]] = {
    "paper-12city-47": lambda: geo_cluster(
        list(PAPER_MACHINES_PER_CITY),
        list(PAPER_MACHINES_PER_CITY.values()),
        PAPER_GPU_MIX,
        seed=CLUSTER_SEED,
        name="paper-12city-47",
        link_noise=LINK_NOISE,
    ),
    "cloud-3region": lambda: geo_cluster(
        ["Ashburn", "Dublin", "Frankfurt"],
        4,
        CLOUD_GPU_MIX,
        seed=CLUSTER_SEED,
        name="cloud-3region",
        link_noise=LINK_NOISE,
    ),
    "cloud-8region": lambda: geo_cluster(
        ["Ashburn", "Sao Paulo", "Frankfurt", "Cape Town", "Mumbai", "Singapore", "Tokyo",
         "Sydney"],
        4,
        CLOUD_GPU_MIX,
        seed=CLUSTER_SEED,
        name="cloud-8region",
        link_noise=LINK_NOISE,
    ),
}  # fmt: skip


def cluster_names() -> list[str]:
    """Names :func:`get_cluster` accepts: ``"default"`` and the built-in clusters."""
    return ["default", *_CLUSTERS]


def _cluster_key(name: str) -> str:
    key = str(name).strip().lower()
    return DEFAULT_CLUSTER if key == "default" else key


def has_cluster(name: str) -> bool:
    """True if ``name`` is a built-in cluster (or ``"default"``)."""
    return _cluster_key(name) in _CLUSTERS


def get_cluster(name: str) -> Cluster:
    """Build a built-in cluster (deterministic: fixed seed).

    Raises:
        HulkInputError: unknown name; the message lists the valid ones.
    """
    key = _cluster_key(name)
    if key not in _CLUSTERS:
        raise _ClusterInputError(
            f"unknown cluster '{name}'; built-in clusters: {', '.join(cluster_names())} "
            "(or give a paper-format directory or a .yaml/.yml/.json cluster file)",
            field="cluster",
        )
    return _CLUSTERS[key]()

# ---- models ---- (owned by workload engineer)
# Architectures from the papers cited next to each; PUBLISHED_PARAMS holds the totals they
# report (tests check the builder within 2%). Large models get a `layers_per_block` so the
# coarsened graph stays under ~50 layers; `get_model(name, layers_per_block=1)` gives all layers.
# Imports sit here, not at the top, so the two sections of this file can be edited apart.
import difflib  # noqa: E402

from hulk_env.errors import HulkInputError  # noqa: E402
from hulk_env.workload import (  # noqa: E402
    TransformerConfig,
    Workload,
    build_from_config,
    training_overrides,
)

DEFAULT_MODEL = "gpt3-1.3b"  # the main job's model: a 1B-class decoder


def _gpt3(name: str, layers: int, hidden: int, heads: int, mbs: int, k: int = 1) -> TransformerConfig:
    """GPT-3 (Brown et al. 2020, Table 2.1): seq 2048, GPT-2 BPE vocab, tied, learned positions."""
    return TransformerConfig(
        name=name,
        num_layers=layers,
        hidden=hidden,
        heads=heads,
        vocab=50257,
        seq_len=2048,
        max_positions=2048,
        micro_batch_size=mbs,
        layers_per_block=k,
    )


def _llama(name: str, layers: int, hidden: int, heads: int, ffn: int, k: int = 1) -> TransformerConfig:
    """LLaMA (Touvron et al. 2023, Table 2): SwiGLU, RMSNorm, rotary, no biases, untied head."""
    return TransformerConfig(
        name=name,
        num_layers=layers,
        hidden=hidden,
        heads=heads,
        vocab=32000,
        seq_len=2048,
        ffn=ffn,
        gated_ffn=True,
        tied_embeddings=False,
        biases=False,
        norm="rmsnorm",
        layers_per_block=k,
    )


_MODELS: tuple[TransformerConfig, ...] = (
    # Table 2.1 lists 24 heads of 128 for the 1.3B model and d_model 5140 for the 13B one, which
    # do not multiply out; we use 16 x 128 = 2048 and 40 x 128 = 5120 (as Megatron-LM does).
    _gpt3("gpt3-125m", 12, 768, 12, mbs=2),
    _gpt3("gpt3-350m", 24, 1024, 16, mbs=1),
    _gpt3("gpt3-1.3b", 24, 2048, 16, mbs=1),
    _gpt3("gpt3-2.7b", 32, 2560, 32, mbs=1),
    _gpt3("gpt3-6.7b", 32, 4096, 32, mbs=1),
    _gpt3("gpt3-13b", 40, 5120, 40, mbs=1),
    _gpt3("gpt3-175b", 96, 12288, 96, mbs=1, k=2),
    # OPT (Zhang et al. 2022, Table 1): GPT-3 shape, vocab 50272, 2048 + 2 learned positions.
    TransformerConfig(
        name="opt-175b",
        num_layers=96,
        hidden=12288,
        heads=96,
        vocab=50272,
        seq_len=2048,
        max_positions=2050,
        layers_per_block=2,
    ),
    # BLOOM (BigScience 2022, arXiv 2211.05100, Table 3): ALiBi (no position parameters),
    # tied; its embedding LayerNorm (2h = 28,672 params) is left out.
    TransformerConfig(
        name="bloom-176b",
        num_layers=70,
        hidden=14336,
        heads=112,
        vocab=250880,
        seq_len=2048,
        layers_per_block=2,
    ),
    _llama("llama-7b", 32, 4096, 32, 11008),
    _llama("llama-13b", 40, 5120, 40, 13824),
    _llama("llama-65b", 80, 8192, 64, 22016, k=2),
    # T5 1.0 11B (Raffel et al. 2020, Sec. 3.7): 24 + 24 blocks, d_model 1024, d_ff 65536 (ReLU),
    # 128 heads of d_kv 128, no biases, weight-only (RMS) norms, tied embeddings; relative position
    # biases (32 x 128 per stack) are negligible. Span-corruption lengths: 512 in, 114 out.
    TransformerConfig(
        name="t5-11b",
        num_layers=24,
        architecture="encoder-decoder",
        num_decoder_layers=24,
        hidden=1024,
        heads=128,
        head_dim=128,
        ffn=65536,
        vocab=32128,
        seq_len=512,
        decoder_seq_len=114,
        biases=False,
        norm="rmsnorm",
        micro_batch_size=2,
    ),
    # BERT-large (Devlin et al. 2019): 24 x 1024, 16 heads, WordPiece 30522, 512 positions,
    # MLM head + pooler (token-type embeddings, 2h params, left out).
    TransformerConfig(
        name="bert-large",
        num_layers=24,
        architecture="encoder",
        hidden=1024,
        heads=16,
        vocab=30522,
        seq_len=512,
        max_positions=512,
        micro_batch_size=4,
    ),
)
MODELS: dict[str, TransformerConfig] = {cfg.name: cfg for cfg in _MODELS}

# Published parameter totals.
PUBLISHED_PARAMS: dict[str, float] = {
    # Brown et al. 2020, "Language Models are Few-Shot Learners", Table 2.1.
    "gpt3-125m": 125e6,
    "gpt3-350m": 350e6,
    "gpt3-1.3b": 1.3e9,
    "gpt3-2.7b": 2.7e9,
    "gpt3-6.7b": 6.7e9,
    "gpt3-13b": 13.0e9,
    "gpt3-175b": 175.0e9,
    # Zhang et al. 2022, "OPT: Open Pre-trained Transformer Language Models", Table 1.
    "opt-175b": 175.0e9,
    # BigScience, bigscience/bloom model card: 176,247,271,424 parameters.
    "bloom-176b": 176_247_271_424.0,
    # Touvron et al. 2023, "LLaMA", Table 2 (6.7B, 13.0B, 65.2B); the HF checkpoints hold
    # 6,738,415,616 / 13,015,864,320 / 65,285,660,672.
    "llama-7b": 6.7e9,
    "llama-13b": 13.0e9,
    "llama-65b": 65.2e9,
    # Raffel et al. 2020 quote "11 billion"; the HF t5-11b checkpoint holds 11.3e9.
    "t5-11b": 11.3e9,
    # Devlin et al. 2019 quote 340M; HF bert-large-uncased with pooler holds 335,141,888.
    "bert-large": 335.1e6,
}


def model_names() -> tuple[str, ...]:
    """Names of the built-in models (``"default"`` is also accepted: ``DEFAULT_MODEL``)."""
    return tuple(MODELS)


def get_model_config(name: str) -> TransformerConfig:
    """The architecture and default training settings of a built-in model.

    Raises:
        HulkInputError: unknown name; the message lists the valid ones.
    """
    key = DEFAULT_MODEL if name.strip().lower() == "default" else name.strip().lower()
    if key not in MODELS:
        close = difflib.get_close_matches(key, MODELS, n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise HulkInputError(
            f"unknown model '{name}'; {hint}built-in models: default, {', '.join(MODELS)} "
            "(or give a .yaml/.yml/.json workload file)",
            field="model",
        )
    return MODELS[key]


def get_model(
    name: str,
    *,
    micro_batch_size: int | None = None,
    num_micro_batches: int | None = None,
    data_parallel: int | None = None,
    schedule: str | None = None,
    state_bytes_per_param: float | None = None,
    grad_bytes_per_param: float | None = None,
    layers_per_block: int | None = None,
) -> Workload:
    """Build a built-in model, with training settings overridden where given.

    ``layers_per_block=1`` gives the uncoarsened graph (one layer per transformer block).
    """
    overrides = training_overrides(
        micro_batch_size=micro_batch_size,
        num_micro_batches=num_micro_batches,
        data_parallel=data_parallel,
        schedule=schedule,
        state_bytes_per_param=state_bytes_per_param,
        grad_bytes_per_param=grad_bytes_per_param,
        layers_per_block=layers_per_block,
    )
    return build_from_config(get_model_config(name), overrides)
