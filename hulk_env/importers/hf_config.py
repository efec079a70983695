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


class _Reader:
    """Typed access to one config mapping; every failure names the file and the key."""

    def __init__(self, data: dict, source: str, model_type: str) -> None:
        self.data, self.source, self.model_type = data, source, model_type

    def _raw(self, keys: tuple[str, ...], default: Any) -> tuple[str, Any]:
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
        return self.integer(*keys, default=None) if any(self.data.get(k) is not None for k in keys) else None


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


def _llama_like(r: _Reader) -> _Family:
    arch = dict(
        **_standard(r),
        gated_ffn=True,
        tied_embeddings=r.flag("tie_word_embeddings", default=False),
        biases=r.flag("attention_bias", default=False) if r.model_type == "llama" else False,
        norm="rmsnorm",
    )
    _head_dim(arch, r.optional_integer("head_dim"))
    _kv(arch, r.integer("num_key_value_heads", default=arch["heads"]))
    return arch, r.integer("max_position_embeddings", default=2048), False


def _falcon(r: _Reader) -> _Family:
    heads = r.integer("num_attention_heads", "n_head")
    new_arch = r.flag("new_decoder_architecture", default=r.model_type == "RefinedWeb")
    if new_arch:
        kv_heads = r.integer("num_kv_heads", "n_head_kv")
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
}


def read_config(path: str | Path) -> dict:
    """The mapping in a ``config.json``, read through the validation layer
    (:func:`hulk_env.validation.reading.read_data`: a regular file of at most
    ``MAX_HF_CONFIG_BYTES``, UTF-8, nesting depth, repeated keys; then
    :func:`hulk_env.validation.hf_config.check_hf_config`: types and bounds).

    Raises:
        HulkInputError: unreadable, oversized or binary file, invalid JSON, or not a JSON object.
    """
    from hulk_env.validation import limits
    from hulk_env.validation.hf_config import check_hf_config
    from hulk_env.validation.reading import read_data

    data = read_data(path, syntax="json", what="config.json", max_bytes=limits.MAX_HF_CONFIG_BYTES)
    if not isinstance(data, dict):
        raise HulkInputError("a config.json must hold one JSON object", source=str(path))
    check_hf_config(data, str(path))  # types and bounds of the keys the families read
    return data


def _default_name(config: dict, fallback: str) -> str:
    raw = config.get("_name_or_path")
    name = Path(raw).name if isinstance(raw, str) and raw.strip() else fallback
    return name.lower()


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
    arch, context, learned = FAMILIES[model_type](_Reader(config, source, model_type))
    if seq_len is None:
        seq_len = min(context, DEFAULT_MAX_SEQ_LEN)
        why = f"the context length {context}" + (
            f" capped at {DEFAULT_MAX_SEQ_LEN}" if context > DEFAULT_MAX_SEQ_LEN else ""
        )
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
    arch["seq_len"] = seq_len
    fallback = Path(source).parent.name if Path(source).stem == "config" else Path(source).stem
    return {
        "name": name or _default_name(config, fallback or "model"),
        "description": (
            f"imported from {Path(source).name} (Hugging Face model_type '{model_type}'); "
            f"seq_len {seq_len}: {why}"
        ),
        "transformer": arch,
    }


def import_hf_config(path: str | Path, *, name: str | None = None, seq_len: int | None = None) -> dict:
    """Read ``path`` and convert it; see :func:`workload_from_hf_config`."""
    return workload_from_hf_config(read_config(path), source=str(path), name=name, seq_len=seq_len)
