"""The model catalog: named built-in models (no files needed).

Architectures from the papers cited next to each; :data:`PUBLISHED_PARAMS` holds the totals
they report (tests check the builder within 2%). Large models get a ``layers_per_block`` so the
coarsened graph stays under ~50 layers; ``get_model(name, layers_per_block=1)`` gives all layers.
"""

from __future__ import annotations

import difflib
from dataclasses import replace
from typing import Unpack

from hulk_env.errors import HulkInputError
from hulk_env.workload.model import Workload, WorkloadOverrides, training_overrides
from hulk_env.workload.transformer import TransformerConfig, build_from_config

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


def _llama(
    name: str,
    layers: int,
    hidden: int,
    heads: int,
    ffn: int,
    k: int = 1,
    *,
    kv_heads: int | None = None,
    vocab: int = 32000,
    seq_len: int = 2048,
) -> TransformerConfig:
    """LLaMA (Touvron et al. 2023, Table 2): SwiGLU, RMSNorm, rotary, no biases, untied head.

    Its successors (Llama 2 and 3, Mistral, Qwen2) keep the block and add grouped-query
    attention (``kv_heads``), larger vocabularies and longer pretraining sequences.
    """
    return TransformerConfig(
        name=name,
        num_layers=layers,
        hidden=hidden,
        heads=heads,
        num_kv_heads=kv_heads,
        vocab=vocab,
        seq_len=seq_len,
        ffn=ffn,
        gated_ffn=True,
        tied_embeddings=False,
        biases=False,
        norm="rmsnorm",
        layers_per_block=k,
    )


def _falcon(name: str, layers: int, hidden: int, heads: int, k: int) -> TransformerConfig:
    """Falcon (Almazrouei et al. 2023): 8 key/value heads of 64, 4h GELU FFN, no linear biases,
    LayerNorm, rotary, vocab 65024, seq 2048; the checkpoints keep the LM head apart from the
    embedding (the published totals count both)."""
    return TransformerConfig(
        name=name,
        num_layers=layers,
        hidden=hidden,
        heads=heads,
        num_kv_heads=8,
        vocab=65024,
        seq_len=2048,
        tied_embeddings=False,
        biases=False,
        layers_per_block=k,
    )


def _moe(
    name: str,
    layers: int,
    hidden: int,
    heads: int,
    ffn: int,
    k: int,
    *,
    experts: int,
    top_k: int,
    kv_heads: int | None = None,
    vocab: int = 32000,
    seq_len: int = 4096,
    expert_ffn: int | None = None,
    shared: int = 0,
    shared_ffn: int | None = None,
    first_dense: int = 0,
) -> TransformerConfig:
    """A LLaMA-style decoder (:func:`_llama`) whose FFNs are mixtures of SwiGLU experts."""
    return replace(
        _llama(name, layers, hidden, heads, ffn, k, kv_heads=kv_heads, vocab=vocab, seq_len=seq_len),
        num_experts=experts,
        top_k=top_k,
        expert_ffn=expert_ffn,
        shared_experts=shared,
        shared_expert_ffn=shared_ffn,
        first_dense_layers=first_dense,
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
    # Llama 2 (Touvron et al. 2023, "Llama 2", Table 1): 70B with 8 KV heads, 4k context.
    _llama("llama-2-70b", 80, 8192, 64, 28672, k=2, kv_heads=8, seq_len=4096),
    # Llama 3 (Dubey et al. 2024, "The Llama 3 Herd of Models", Table 3): 128K vocabulary, 8 KV
    # heads, 8k pretraining sequences.
    _llama("llama-3-8b", 32, 4096, 32, 14336, kv_heads=8, vocab=128256, seq_len=8192),
    _llama("llama-3-70b", 80, 8192, 64, 28672, k=2, kv_heads=8, vocab=128256, seq_len=8192),
    # Mistral 7B (Jiang et al. 2023, Table 1): 8 KV heads, sliding window 4096 (at seq_len 4096
    # every token attends to the whole sequence, so full attention is exact).
    _llama("mistral-7b", 32, 4096, 32, 14336, kv_heads=8, seq_len=4096),
    # Qwen2 (Yang et al. 2024, "Qwen2 Technical Report", Table 1): 72B with 8 KV heads, 4k
    # pretraining sequences; vocab 152064 as its checkpoint pads it (Q/K/V biases, 0.001%, left out).
    _llama("qwen2-72b", 80, 8192, 64, 29568, k=2, kv_heads=8, vocab=152064, seq_len=4096),
    # Mixtral (Jiang et al. 2024, "Mixtral of Experts", arXiv 2401.04088, Table 1): Mistral 7B's
    # block with 8 SwiGLU experts of 14336, top-2; 8x22B (Mistral AI, mistralai/Mixtral-8x22B-v0.1
    # config): 56 x 6144, 48 heads, 8 KV heads, experts of 16384, vocab 32768.
    _moe("mixtral-8x7b", 32, 4096, 32, 14336, k=1, experts=8, top_k=2, kv_heads=8),
    _moe("mixtral-8x22b", 56, 6144, 48, 16384, k=2, experts=8, top_k=2, kv_heads=8, vocab=32768),
    # DeepSeekMoE 16B (Dai et al. 2024, arXiv 2401.06066, Sec. 5 and deepseek-ai/deepseek-moe-16b-base
    # config): 28 x 2048, 16 heads, first block dense (FFN 10944), then 64 routed experts of 1408
    # (top-6) and 2 shared ones, vocab 102400.
    _moe("deepseek-moe-16b", 28, 2048, 16, 10944, k=1, experts=64, top_k=6, vocab=102400,
         expert_ffn=1408, shared=2, first_dense=1),  # fmt: skip
    # Qwen1.5-MoE-A2.7B (Qwen team 2024, Qwen/Qwen1.5-MoE-A2.7B config): 24 x 2048, 16 heads, 60
    # experts of 1408 (top-4) and one shared expert of 5632, vocab 151936 (Q/K/V biases and the
    # shared expert's 2048-parameter gate, 0.01%, left out).
    _moe("qwen1.5-moe-a2.7b", 24, 2048, 16, 5632, k=1, experts=60, top_k=4, vocab=151936,
         expert_ffn=1408, shared=1, shared_ffn=5632),  # fmt: skip
    _falcon("falcon-40b", 60, 8192, 128, k=2),
    _falcon("falcon-180b", 80, 14848, 232, k=2),
    # MPT-30B (MosaicML 2023): 48 x 7168, 64 heads, 4h FFN, ALiBi, no biases (norms without
    # bias: h params each, counted here as LayerNorm's 2h, 0.002%), tied; first stage seq 2048.
    TransformerConfig(
        name="mpt-30b",
        num_layers=48,
        hidden=7168,
        heads=64,
        vocab=50432,
        seq_len=2048,
        biases=False,
    ),
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
    # Llama 2 and 3 are announced as 70B and 8B; their Hugging Face checkpoints hold
    # 68,976,648,192 / 8,030,261,248 / 70,553,706,496 (model.safetensors.index.json / 2 bytes).
    "llama-2-70b": 68_976_648_192.0,
    "llama-3-8b": 8_030_261_248.0,
    "llama-3-70b": 70_553_706_496.0,
    # Mistral AI announce 7.3B; the mistralai/Mistral-7B-v0.1 checkpoint holds 7,241,732,096.
    "mistral-7b": 7_241_732_096.0,
    # Qwen2 technical report, Table 1: 72.71B.
    "qwen2-72b": 72.71e9,
    # tiiuae/falcon-40b on the Hugging Face Hub: 41.8B; Falcon-180B: 180B (Almazrouei et al.).
    "falcon-40b": 41.8e9,
    "falcon-180b": 180.0e9,
    # MosaicML, "MPT-30B" (2023): 30B.
    "mpt-30b": 30.0e9,
    # Mixtral: the mistralai/Mixtral-8x7B-v0.1 checkpoint holds 46,702,792,704 (46.7B, 12.9B
    # active: Mistral AI, "Mixtral of experts", 2023); Mixtral-8x22B: 141B, 39B active (Mistral
    # AI, "Cheaper, Better, Faster, Stronger", 2024).
    "mixtral-8x7b": 46_702_792_704.0,
    "mixtral-8x22b": 141.0e9,
    # DeepSeekMoE 16B: 16.4B total, 2.8B activated (Dai et al. 2024, Table 4; model card).
    "deepseek-moe-16b": 16.4e9,
    # Qwen1.5-MoE-A2.7B model card: 14.3B in total, 2.7B activated.
    "qwen1.5-moe-a2.7b": 14.3e9,
}

# Published active (activated) parameters of the mixture-of-experts models, same sources.
PUBLISHED_ACTIVE_PARAMS: dict[str, float] = {
    "mixtral-8x7b": 12.9e9,
    "mixtral-8x22b": 39.0e9,
    "deepseek-moe-16b": 2.8e9,
    "qwen1.5-moe-a2.7b": 2.7e9,
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


def get_model(name: str, **overrides: Unpack[WorkloadOverrides]) -> Workload:
    """Build a built-in model, with training settings overridden where given.

    ``layers_per_block=1`` gives the uncoarsened graph (one layer per transformer block).
    """
    return build_from_config(get_model_config(name), training_overrides(**overrides))
