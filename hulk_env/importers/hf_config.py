"""A Hugging Face ``config.json`` to a workload file (the ``transformer:`` form), offline.

Supported ``model_type`` values and the keys read (alternative spellings after ``|``, as the
Hugging Face config classes map them; ``= x`` is the default when the key is absent, the
same default the Hugging Face class applies):

* ``llama``, ``mistral``, ``qwen2``: ``hidden_size``, ``num_hidden_layers``,
  ``num_attention_heads``, ``num_key_value_heads = num_attention_heads``,
  ``intermediate_size``, ``vocab_size``, ``head_dim = hidden_size / heads``,
  ``tie_word_embeddings = false``, ``attention_bias = false`` (Llama only),
  ``max_position_embeddings``. SwiGLU FFN, RMSNorm, rotary positions. Qwen2's Q/K/V biases
  (``h + 2 kv head_dim`` per layer, 0.001% of Qwen2-72B) are left out.
* ``falcon`` (also the legacy ``RefinedWeb``/``RefinedWebModel``): ``hidden_size|n_embed``,
  ``num_hidden_layers|n_layer``, ``num_attention_heads|n_head``; key/value heads are
  ``num_kv_heads|n_head_kv`` with ``new_decoder_architecture`` (Falcon-40B/180B), else 1 when
  ``multi_query = true`` (Falcon-7B), else the query heads; ``ffn_hidden_size = 4 h``,
  ``bias = false``, ``vocab_size``, ``max_position_embeddings = 2048``. The released Falcon
  checkpoints hold ``lm_head.weight`` apart from the embedding (Falcon-40B's published 41.8B
  counts both), so a missing ``tie_word_embeddings`` means untied.
* ``gpt_neox``: ``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``,
  ``intermediate_size``, ``vocab_size``, ``tie_word_embeddings = false``,
  ``attention_bias = true``, ``max_position_embeddings``. Rotary, LayerNorm.
* ``gpt2``: ``n_embd``, ``n_layer``, ``n_head``, ``n_inner = 4 h``, ``vocab_size``,
  ``n_positions`` (learned positions), tied embeddings.
* ``opt``: ``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``, ``ffn_dim``,
  ``vocab_size``, ``max_position_embeddings`` (+ 2 learned positions: OPT offsets them by 2),
  ``enable_bias = true``, ``tie_word_embeddings = true``; ``word_embed_proj_dim`` must equal
  ``hidden_size`` (OPT-350m's projected embedding is not modelled).
* ``bloom``: ``hidden_size|n_embed``, ``n_layer|num_hidden_layers``,
  ``n_head|num_attention_heads``, ``vocab_size``, ``seq_length = 2048``; ALiBi, tied. Its
  embedding LayerNorm (``2 h``) is left out, as in the catalog.
* ``t5``: ``d_model``, ``d_kv``, ``d_ff``, ``num_heads``, ``num_layers``,
  ``num_decoder_layers = num_layers``, ``vocab_size``, ``feed_forward_proj = relu``
  (``gated-*`` = three-matrix FFN, T5 v1.1), ``tie_word_embeddings = true``, ``n_positions =
  512``. No biases, RMS norms; relative position biases (``32 x heads`` per stack) left out.

* ``mixtral``: as ``mistral`` plus ``num_local_experts`` experts of ``intermediate_size``,
  ``num_experts_per_tok`` of them per token (Jiang et al. 2024).
* ``qwen2_moe``: as ``qwen2`` plus ``num_experts`` of ``moe_intermediate_size``,
  ``num_experts_per_tok``, one shared expert of ``shared_expert_intermediate_size`` (its
  ``h``-parameter gate left out); ``decoder_sparse_step`` must be 1 and ``mlp_only_layers``
  empty (every block sparse).
* ``deepseek`` (DeepSeekMoE, ``deepseek-ai/deepseek-moe-16b``): as ``llama`` plus
  ``n_routed_experts`` of ``moe_intermediate_size``, ``num_experts_per_tok``,
  ``n_shared_experts`` of the same width, the first ``first_k_dense_replace`` blocks dense
  (``intermediate_size``), ``moe_layer_freq`` must be 1; without ``n_routed_experts`` a dense
  DeepSeek (DeepSeek LLM configs also say ``model_type: llama``). DeepSeek-V2's latent
  attention (``q_lora_rank``/``kv_lora_rank``) is not read, so refused.
* ``gemma``, ``gemma2``: the Llama block with ``head_dim`` (Gemma-7B: 16 x 256 on a 3072
  width), GeGLU, tied embeddings (``tie_word_embeddings = true``); Gemma 2's extra norms (``2 h``
  per block) are left out, its soft-capping changes no count.
* ``phi3``: the Llama block (its fused ``qkv_proj``/``gate_up_proj`` hold the same weights).
* ``gptj``: ``n_embd``, ``n_layer``, ``n_head``, ``n_inner = 4 h``, ``vocab_size``,
  ``rotary_dim`` (rotary), untied, biases, LayerNorm (its single norm per block counted as two,
  0.01%).

Keys the reader does not understand are refused, one line naming the key, never ignored: a
config is read only when every key is either read by its family or in :data:`HARMLESS_KEYS`
(token ids, dropout, initialisation, norm epsilon, activation and rotary settings, versions:
nothing that changes parameters or FLOPs). So a Mixtral config relabelled ``mistral`` is
refused naming ``num_local_experts``. A ``sliding_window`` (``use_sliding_window`` true or
absent) is understood up to its width: the default sequence length stops at the window (full
attention is then exact) and a longer ``seq_len`` is refused naming it.

Names: ``--name``, else the config's ``_name_or_path`` (its last part), else the file's name
(without ``.json`` and a trailing ``.config``/``-config``) unless it is ``config``, else the
directory holding ``config.json``, else the family of ``architectures`` with the size.

Training settings are not in a ``config.json``. The sequence length defaults to the model's
context length capped at :data:`DEFAULT_MAX_SEQ_LEN` (the description in the output says
which); pass ``seq_len`` to choose.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from hulk_env.errors import HulkInputError

DEFAULT_MAX_SEQ_LEN = 4096  # a longer context is an extension stage, not the usual pretraining length
_REQUIRED = object()

# Keys that change no parameter count and no FLOP count in any family read here.
HARMLESS_KEYS = frozenset({
    "_name_or_path", "architectures", "auto_map", "model_type", "transformers_version", "torch_dtype",
    "use_cache", "bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id", "sep_token_id",
    "decoder_start_token_id", "tokenizer_class", "initializer_range", "initializer_factor", "init_std",
    "rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "hidden_act", "hidden_activation",
    "activation_function", "dense_act_fn", "attention_dropout", "attn_pdrop", "embd_pdrop",
    "resid_pdrop", "hidden_dropout", "dropout", "dropout_rate", "activation_dropout", "layerdrop",
    "summary_first_dropout", "rope_theta", "rope_scaling", "rotary_emb_base", "rotary_pct",
    "rotary_dim", "rotary", "original_max_position_embeddings", "pretraining_tp", "output_past",
    "output_router_logits", "router_aux_loss_coef", "router_jitter_noise", "aux_loss_alpha",
    "seq_aux", "norm_topk_prob", "scoring_func", "topk_method", "is_encoder_decoder",
    "task_specific_params", "prefix", "summary_type", "summary_use_proj", "summary_activation",
    "summary_proj_to_labels", "n_ctx", "scale_attn_weights", "gradient_checkpointing",
    "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", "relative_attention_num_buckets",
    "relative_attention_max_distance", "is_gated_act", "do_layer_norm_before",
    "_remove_final_layer_norm", "apply_residual_connection_post_layernorm", "slow_but_exact",
    "masked_softmax_fusion", "bias_dropout_fusion", "skip_bias_add", "skip_bias_add_qkv",
    "attention_softmax_in_fp32", "offset_alibi", "use_parallel_residual", "parallel_attn", "alibi",
    "attn_logit_softcapping", "final_logit_softcapping", "query_pre_attn_scalar",
    "cache_implementation", "use_sliding_window", "max_window_layers", "sliding_window_size",
})  # fmt: skip


class _Reader:
    """Typed access to one config mapping; every failure names the file and the key."""

    def __init__(self, data: dict, source: str, model_type: str) -> None:
        self.data, self.source, self.model_type = data, source, model_type
        self.read: set[str] = set()  # every key a family consulted

    def _raw(self, keys: tuple[str, ...], default: Any) -> tuple[str, Any]:
        self.read.update(keys)
        for key in keys:
            if self.data.get(key) is not None:
                return key, self.data[key]
        if default is _REQUIRED:
            spelled = " or ".join(f"'{k}'" for k in keys)
            raise HulkInputError(
                f"missing required key {spelled} for model_type '{self.model_type}'",
                source=self.source,
                field=keys[0],
            )
        return keys[0], default

    def integer(self, *keys: str, default: Any = _REQUIRED, minimum: int = 1) -> int:
        key, value = self._raw(keys, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise HulkInputError(
                f"must be an integer >= {minimum}, got {value!r}", source=self.source, field=key
            )
        return value

    def flag(self, *keys: str, default: Any = _REQUIRED) -> bool:
        key, value = self._raw(keys, default)
        if not isinstance(value, bool):
            raise HulkInputError(f"must be true or false, got {value!r}", source=self.source, field=key)
        return value

    def text(self, *keys: str, default: Any = _REQUIRED) -> str:
        key, value = self._raw(keys, default)
        if not isinstance(value, str):
            raise HulkInputError(f"must be a string, got {value!r}", source=self.source, field=key)
        return value

    def optional_integer(self, *keys: str) -> int | None:
        self.read.update(keys)
        return self.integer(*keys, default=None) if any(self.data.get(k) is not None for k in keys) else None

    def refuse(self, key: str, why: str) -> HulkInputError:
        return HulkInputError(why, source=self.source, field=key)

    def check_understood(self) -> None:
        """Refuse the keys (all named, in file order) neither read nor harmless."""
        unknown = [
            key for key, value in self.data.items()
            if key not in self.read and key not in HARMLESS_KEYS and value is not None
        ]  # fmt: skip
        if unknown:
            names = ", ".join(f"'{key}'" for key in unknown)
            raise self.refuse(
                unknown[0],
                f"key{'s' if len(unknown) > 1 else ''} {names} not understood by the "
                f"'{self.model_type}' reader and may change the parameters or FLOPs, so the config "
                "is not imported as something else (a model_type that reads them, or remove a key "
                "that changes neither)",
            )


# Each family returns (TransformerConfig keys, context length, learned positions?).
_Family = tuple[dict[str, Any], int, bool]


def _kv(arch: dict[str, Any], kv_heads: int) -> dict[str, Any]:
    """Add ``num_kv_heads`` only for grouped- or multi-query attention."""
    if kv_heads != arch["heads"]:
        arch["num_kv_heads"] = kv_heads
    return arch


def _head_dim(arch: dict[str, Any], head_dim: int | None) -> dict[str, Any]:
    if head_dim is not None and head_dim * arch["heads"] != arch["hidden"]:
        arch["head_dim"] = head_dim
    return arch


def _standard(r: _Reader) -> dict[str, Any]:
    """The sizes under the Hugging Face standard names (Llama, Mistral, Qwen2, GPT-NeoX)."""
    return dict(
        num_layers=r.integer("num_hidden_layers"),
        hidden=r.integer("hidden_size"),
        heads=r.integer("num_attention_heads"),
        vocab=r.integer("vocab_size"),
        ffn=r.integer("intermediate_size"),
    )


TIED_BY_DEFAULT = ("gemma", "gemma2")  # GemmaConfig's tie_word_embeddings defaults to true
BIASED_ATTENTION = ("llama", "deepseek", "gemma", "gemma2", "phi3", "mixtral", "mistral")


def _llama_like(r: _Reader) -> _Family:
    arch = dict(
        **_standard(r),
        gated_ffn=True,
        tied_embeddings=r.flag("tie_word_embeddings", default=r.model_type in TIED_BY_DEFAULT),
        biases=r.flag("attention_bias", default=False) if r.model_type in BIASED_ATTENTION else False,
        norm="rmsnorm",
    )
    _head_dim(arch, r.optional_integer("head_dim"))
    _kv(arch, r.integer("num_key_value_heads", default=arch["heads"]))
    return arch, r.integer("max_position_embeddings", default=2048), False


def _mixtral(r: _Reader) -> _Family:
    arch, context, learned = _llama_like(r)
    arch.update(num_experts=r.integer("num_local_experts"), top_k=r.integer("num_experts_per_tok", default=2))
    return arch, context, learned


def _qwen2_moe(r: _Reader) -> _Family:
    arch, context, learned = _llama_like(r)
    step = r.integer("decoder_sparse_step", default=1)
    if step != 1:
        raise r.refuse("decoder_sparse_step", f"decoder_sparse_step {step}: only every block sparse (1) is modelled")
    if r.data.get("mlp_only_layers"):
        raise r.refuse("mlp_only_layers", "mlp_only_layers (dense blocks among sparse ones) is not modelled")
    r.read.add("mlp_only_layers")
    arch.update(
        num_experts=r.integer("num_experts"),
        top_k=r.integer("num_experts_per_tok", default=4),
        expert_ffn=r.integer("moe_intermediate_size"),
    )
    shared = r.integer("shared_expert_intermediate_size", default=0, minimum=0)
    if shared:
        arch.update(shared_experts=1, shared_expert_ffn=shared)
    return arch, context, learned


def _deepseek(r: _Reader) -> _Family:
    arch, context, learned = _llama_like(r)
    experts = r.integer("n_routed_experts", default=0, minimum=0)
    if not experts:
        return arch, context, learned
    freq = r.integer("moe_layer_freq", default=1)
    if freq != 1:
        raise r.refuse("moe_layer_freq", f"moe_layer_freq {freq}: only every block sparse (1) is modelled")
    arch.update(
        num_experts=experts,
        top_k=r.integer("num_experts_per_tok"),
        expert_ffn=r.integer("moe_intermediate_size"),
        shared_experts=r.integer("n_shared_experts", default=0, minimum=0),
        first_dense_layers=r.integer("first_k_dense_replace", default=0, minimum=0),
    )
    return arch, context, learned


def _gptj(r: _Reader) -> _Family:
    hidden = r.integer("n_embd")
    positions = r.integer("n_positions", default=2048)
    arch = dict(
        num_layers=r.integer("n_layer"),
        hidden=hidden,
        heads=r.integer("n_head"),
        vocab=r.integer("vocab_size"),
        ffn=r.integer("n_inner", default=4 * hidden),
        tied_embeddings=r.flag("tie_word_embeddings", default=False),
        norm="layernorm",
    )
    return arch, positions, False


def _falcon(r: _Reader) -> _Family:
    heads = r.integer("num_attention_heads", "n_head")
    new_arch = r.flag("new_decoder_architecture", default=r.model_type == "RefinedWeb")
    if new_arch:
        kv_heads = r.integer("num_kv_heads", "n_head_kv")
        r.read.add("multi_query")  # ignored by the new architecture, as by Hugging Face
    else:
        kv_heads = 1 if r.flag("multi_query", default=True) else heads
    hidden = r.integer("hidden_size", "n_embed")
    arch = dict(
        num_layers=r.integer("num_hidden_layers", "n_layer"),
        hidden=hidden,
        heads=heads,
        vocab=r.integer("vocab_size"),
        ffn=r.integer("ffn_hidden_size", default=4 * hidden),
        tied_embeddings=r.flag("tie_word_embeddings", default=False),
        biases=r.flag("bias", default=False),
        norm="layernorm",
    )
    return _kv(arch, kv_heads), r.integer("max_position_embeddings", default=2048), False


def _gpt_neox(r: _Reader) -> _Family:
    arch = dict(
        **_standard(r),
        tied_embeddings=r.flag("tie_word_embeddings", default=False),
        biases=r.flag("attention_bias", default=True),
        norm="layernorm",
    )
    return arch, r.integer("max_position_embeddings", default=2048), False


def _gpt2(r: _Reader) -> _Family:
    hidden = r.integer("n_embd", "hidden_size")
    positions = r.integer("n_positions", "max_position_embeddings")
    arch = dict(
        num_layers=r.integer("n_layer", "num_hidden_layers"),
        hidden=hidden,
        heads=r.integer("n_head", "num_attention_heads"),
        vocab=r.integer("vocab_size"),
        ffn=r.integer("n_inner", default=4 * hidden),
        max_positions=positions,
        tied_embeddings=r.flag("tie_word_embeddings", default=True),
        norm="layernorm",
    )
    return arch, positions, True


OPT_POSITION_OFFSET = 2  # OPTLearnedPositionalEmbedding holds max_position_embeddings + 2 rows


def _opt(r: _Reader) -> _Family:
    hidden = r.integer("hidden_size")
    proj = r.integer("word_embed_proj_dim", default=hidden)
    if proj != hidden:
        raise HulkInputError(
            f"word_embed_proj_dim {proj} differs from hidden_size {hidden} (a projected "
            "embedding, as in OPT-350m), which the transformer builder does not model",
            source=r.source,
            field="word_embed_proj_dim",
        )
    context = r.integer("max_position_embeddings")
    arch = dict(
        num_layers=r.integer("num_hidden_layers"),
        hidden=hidden,
        heads=r.integer("num_attention_heads"),
        vocab=r.integer("vocab_size"),
        ffn=r.integer("ffn_dim"),
        max_positions=context + OPT_POSITION_OFFSET,
        tied_embeddings=r.flag("tie_word_embeddings", default=True),
        biases=r.flag("enable_bias", default=True),
        norm="layernorm",
    )
    return arch, context, True


def _bloom(r: _Reader) -> _Family:
    arch = dict(
        num_layers=r.integer("n_layer", "num_hidden_layers"),
        hidden=r.integer("hidden_size", "n_embed"),
        heads=r.integer("n_head", "num_attention_heads"),
        vocab=r.integer("vocab_size"),
        tied_embeddings=r.flag("tie_word_embeddings", default=True),
        norm="layernorm",
    )
    return arch, r.integer("seq_length", default=2048), False


def _t5(r: _Reader) -> _Family:
    layers = r.integer("num_layers")
    proj = r.text("feed_forward_proj", default="relu")
    arch = dict(
        architecture="encoder-decoder",
        num_layers=layers,
        num_decoder_layers=r.integer("num_decoder_layers", default=layers),
        hidden=r.integer("d_model"),
        heads=r.integer("num_heads"),
        vocab=r.integer("vocab_size"),
        ffn=r.integer("d_ff"),
        gated_ffn=proj.startswith("gated-"),
        tied_embeddings=r.flag("tie_word_embeddings", default=True),
        biases=False,
        norm="rmsnorm",
    )
    _head_dim(arch, r.integer("d_kv"))
    return arch, r.integer("n_positions", default=512), False


FAMILIES: dict[str, Callable[[_Reader], _Family]] = {
    "llama": _llama_like,
    "mistral": _llama_like,
    "qwen2": _llama_like,
    "falcon": _falcon,
    "RefinedWeb": _falcon,
    "RefinedWebModel": _falcon,
    "gpt_neox": _gpt_neox,
    "gpt2": _gpt2,
    "opt": _opt,
    "bloom": _bloom,
    "t5": _t5,
    "mixtral": _mixtral,
    "qwen2_moe": _qwen2_moe,
    "deepseek": _deepseek,
    "gemma": _llama_like,
    "gemma2": _llama_like,
    "phi3": _llama_like,
    "gptj": _gptj,
}
# Families whose configs may carry a sliding window (sliding_window, use_sliding_window).
SLIDING = ("mistral", "mixtral", "qwen2", "qwen2_moe", "gemma2", "phi3")


def read_config(path: str | Path) -> dict:
    """The mapping in a ``config.json``, read through the validation layer
    (:func:`hulk_env.validation.reading.read_data`: a regular file of at most
    ``MAX_HF_CONFIG_BYTES``, UTF-8, nesting depth, repeated keys).

    Raises:
        HulkInputError: unreadable, oversized or binary file, invalid JSON, or not a JSON object.
    """
    from hulk_env.validation import limits
    from hulk_env.validation.reading import read_data

    data = read_data(path, syntax="json", what="config.json", max_bytes=limits.MAX_HF_CONFIG_BYTES)
    if not isinstance(data, dict):
        raise HulkInputError("a config.json must hold one JSON object", source=str(path))
    return data


def _default_name(config: dict, source: str, arch: dict) -> str:
    """The model's name when none is given (module docstring: config, file, directory,
    ``architectures``)."""
    raw = config.get("_name_or_path")
    if isinstance(raw, str) and raw.strip() and Path(raw.strip()).name:
        return Path(raw.strip()).name.lower()
    stem = Path(source).name
    for suffix in (".json", ".config", "-config", "_config"):
        stem = stem.removesuffix(suffix)
    if stem and stem.lower() != "config":
        return stem.lower()
    if Path(source).parent.name:
        return Path(source).parent.name.lower()
    family = config.get("architectures")
    if isinstance(family, list) and family and isinstance(family[0], str):
        from hulk_env.workload.transformer import TransformerConfig, build_transformer

        base = family[0].removesuffix("ForCausalLM").removesuffix("LMHeadModel").lower() or "model"
        params = build_transformer(TransformerConfig(name=base, seq_len=1, **arch)).total_params
        return f"{base}-{params / 1e9:.1f}b"
    return "model"


def _sliding_window(r: _Reader) -> int | None:
    """The attention window a config sets (None: full attention)."""
    if r.model_type not in SLIDING:
        return None
    r.read.add("sliding_window")
    if r.data.get("use_sliding_window") is False or r.data.get("sliding_window") is None:
        return None
    return r.integer("sliding_window")


def workload_from_hf_config(
    config: dict,
    *,
    source: str = "config.json",
    name: str | None = None,
    seq_len: int | None = None,
) -> dict:
    """The workload file mapping (``name``, ``description``, ``transformer``) for ``config``.

    Args:
        config: a parsed Hugging Face ``config.json``.
        source: where it came from, for messages.
        name: the model's name (default: the config's ``_name_or_path``, else ``source``'s
            parent directory or stem).
        seq_len: tokens per sequence (default: the context length, at most
            :data:`DEFAULT_MAX_SEQ_LEN`).

    Raises:
        HulkInputError: no or unknown ``model_type``, a missing or mistyped key (named), or a
            ``seq_len`` the model cannot take.
    """
    model_type = config.get("model_type")
    if model_type is None:
        raise HulkInputError(
            "missing required key 'model_type' (the architecture family)", source=source, field="model_type"
        )
    if model_type not in FAMILIES:
        raise HulkInputError(
            f"unknown model_type {model_type!r}; supported: {', '.join(FAMILIES)}",
            source=source,
            field="model_type",
        )
    reader = _Reader(config, source, model_type)
    arch, context, learned = FAMILIES[model_type](reader)
    window = _sliding_window(reader)
    reader.check_understood()
    if seq_len is None:
        seq_len = min(context, DEFAULT_MAX_SEQ_LEN)
        why = f"the context length {context}" + (
            f" capped at {DEFAULT_MAX_SEQ_LEN}" if context > DEFAULT_MAX_SEQ_LEN else ""
        )
        if window is not None and window < seq_len:
            seq_len, why = window, f"the sliding window {window} (full attention is exact up to it)"
    else:
        if isinstance(seq_len, bool) or int(seq_len) != seq_len or seq_len < 1:
            raise HulkInputError(f"must be an integer >= 1, got {seq_len!r}", source=source, field="seq_len")
        if learned and seq_len > context:
            raise HulkInputError(
                f"seq_len {seq_len} exceeds the model's {context} learned positions",
                source=source,
                field="seq_len",
            )
        seq_len, why = int(seq_len), "as given"
        if window is not None and seq_len > window:
            raise HulkInputError(
                f"seq_len {seq_len} exceeds the sliding window {window}: attention over a window "
                "changes the FLOPs, which the transformer builder does not model (choose seq_len "
                f"<= {window})",
                source=source,
                field="sliding_window",
            )
    arch["seq_len"] = seq_len
    return {
        "name": name or _default_name(config, source, {k: v for k, v in arch.items() if k != "seq_len"}),
        "description": (
            f"imported from {Path(source).name} (Hugging Face model_type '{model_type}'); "
            f"seq_len {seq_len}: {why}"
        ),
        "transformer": arch,
    }


def import_hf_config(path: str | Path, *, name: str | None = None, seq_len: int | None = None) -> dict:
    """Read ``path`` and convert it; see :func:`workload_from_hf_config`."""
    return workload_from_hf_config(read_config(path), source=str(path), name=name, seq_len=seq_len)
