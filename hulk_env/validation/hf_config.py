"""Shape and bounds of a Hugging Face ``config.json`` at read time.

The family parsers (:mod:`hulk_env.importers.hf_config`) type each key they use; this check runs
first, in the validation layer, so that no value a parser never expected reaches it: a
``model_type`` that is not a short string (``{"model_type": {...}}`` was a ``TypeError``), an
architecture number that is not a whole number within the transformer limits (a 400-digit
integer, a float, a string), a flag that is not true/false. Messages bound every value shown
(:func:`hulk_env.validation.reading.safe_repr`). ``null`` is left to the parsers (they read it
as "not given").
"""

from __future__ import annotations

from typing import Any

from hulk_env.errors import HulkInputError
from hulk_env.validation import limits
from hulk_env.validation.reading import safe_repr

# Architecture numbers the families read (hulk_env/importers/hf_config.py), by their bound.
LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "num_decoder_layers")
DIM_KEYS = (
    "hidden_size", "n_embd", "n_embed", "d_model", "num_attention_heads", "n_head", "num_heads",
    "num_key_value_heads", "num_kv_heads", "n_head_kv", "intermediate_size", "n_inner", "ffn_dim", "d_ff",
    "ffn_hidden_size", "d_kv", "head_dim", "vocab_size", "max_position_embeddings", "n_positions",
    "seq_length", "word_embed_proj_dim",
)
FLAG_KEYS = ("tie_word_embeddings", "attention_bias", "bias", "enable_bias", "multi_query", "new_decoder_architecture")
TEXT_KEYS = ("model_type", "feed_forward_proj")


def check_hf_config(data: dict, source: str) -> None:
    """Refuse a config whose architecture keys have the wrong type or size (module docstring).

    Raises:
        HulkInputError: naming the key and the bound.
    """
    for key in TEXT_KEYS:
        value = data.get(key)
        if value is not None and not (isinstance(value, str) and len(value) <= limits.MAX_NAME_CHARS):
            raise HulkInputError(
                f"must be a name (text of at most {limits.MAX_NAME_CHARS} characters), got {safe_repr(value)}",
                source=source,
                field=key,
            )
    for keys, most, name in ((LAYER_KEYS, limits.MAX_TRANSFORMER_BLOCKS, "MAX_TRANSFORMER_BLOCKS"),
                             (DIM_KEYS, limits.MAX_TRANSFORMER_DIM, "MAX_TRANSFORMER_DIM")):
        for key in keys:
            value = data.get(key)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise HulkInputError(f"must be an integer, got {safe_repr(value)}", source=source, field=key)
            if not 0 <= value <= most:
                raise HulkInputError(
                    f"must be an integer between 0 and {most:,} ({limits.cite(name)}), got {safe_repr(value)}",
                    source=source,
                    field=key,
                )
    for key in FLAG_KEYS:
        value: Any = data.get(key)
        if value is not None and not isinstance(value, bool):
            raise HulkInputError(f"must be true or false, got {safe_repr(value)}", source=source, field=key)
