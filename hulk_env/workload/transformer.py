"""The transformer builder: :class:`TransformerConfig` -> a :class:`~hulk_env.workload.model.Workload`.

Symbols: ``b`` micro-batch size (sequences), ``s`` sequence length (``s_e`` encoder, ``s_d``
decoder), ``h`` hidden size, ``a`` heads, ``d = a * head_dim`` attention inner size (``= h``
unless ``head_dim`` is set, as in T5), ``k`` key/value heads (``num_kv_heads``: ``a`` for
multi-head attention, fewer for grouped-query attention, 1 for multi-query attention) and
``d_kv = k * head_dim``, ``f`` FFN size, ``V`` vocabulary, ``P`` learned positions, ``p``
bytes per activation value (2 = fp16/bf16). Counts are parameters, FLOPs are forward FLOPs per
micro-batch (a multiply-add = 2 FLOPs), bytes are bytes.

Parameters (``[bias]`` terms only when ``biases``; a norm has ``2h`` params as LayerNorm and
``h`` as RMSNorm):

* attention (self or cross): Q and output projections ``2 h d``, K and V ``2 h d_kv``
  ``[+ d + 2 d_kv + h]`` (``4 h d [+ 3d + h]`` when ``k = a``)
* FFN: ``2 h f  [+ f + h]``; gated (SwiGLU, 3 matrices): ``3 h f  [+ 2f + h]``
* block: attention + FFN + 2 norms; a decoder block of an encoder-decoder adds cross-attention
  and a third norm; the last encoder block of an encoder-decoder holds the encoder's final norm
* embedding: ``V h + P h``
* head (decoder): final norm + LM projection ``V h``, or ``0`` when ``tied_embeddings`` (tied
  weights are counted once, on the embedding)
* head (encoder-only, BERT): MLM transform ``h^2 [+ h]`` + norm + projection (``V h`` unless
  tied) ``[+ V]`` output bias + pooler ``h^2 [+ h]``

Forward FLOPs (only matrix multiplies count; norms, softmax, activations and bias adds are
O(b s h) and ignored, as :class:`torch.utils.flop_counter.FlopCounterMode` ignores them):

* linear layers: ``2 x tokens x weight params`` (``tokens = b s``); attention projects queries
  and output on its ``s_q`` query tokens and keys/values on its ``s_k`` key tokens:
  ``2 b (2 s_q d + 2 s_k d_kv) h`` (cross-attention: ``s_q = s_d``, ``s_k = s_e``)
* attention scores ``Q K^T`` and ``softmax x V``: ``4 b s_q s_k d`` over all ``a`` query heads,
  whatever ``k`` (no saving for the causal mask, as in Megatron-LM's accounting)
* embedding: 0 (a table lookup)
* head: ``2 b s h V`` (encoder-only adds ``2 b s h^2`` for the MLM transform and ``2 b h^2``
  for the pooler)

Activation bytes sent to successors: ``b s h p`` (the embedding of an encoder-decoder sends
``b max(s_e, s_d) h p``; the head sends nothing: its output is the loss).

Stashed activations, no recomputation, after Korthikanti et al. 2022, "Reducing Activation
Recomputation in Large Transformer Models" (arXiv 2205.05198), Sec. 4.1: a GPT layer keeps
``s b h (34 + 5 a s / h)`` bytes with p = 2 and 1-byte dropout masks. We use its term-by-term
derivation so that ``d != h``, ``f != 4h``, gated FFNs and cross-attention are covered; for
``p = 2, d = h, f = 4h`` it reduces exactly to the paper's formula:

* attention: ``(p + 1) b s_q h`` (input, output dropout mask) + ``p b (2 s_q d + 2 s_k d_kv)``
  (Q, output-projection input, K, V) + ``(2p + 1) a b s_q s_k`` (softmax, its dropout mask and
  output); cross-attention also keeps the encoder output ``p b s_e h``
* FFN: ``(p + 1) b s h + 2 p b s f`` (gated: ``3 p b s f``)
* norm: ``p b s h`` each
* embedding: ``b s h`` (dropout mask); head: ``2 p b s h`` (norm and projection inputs) +
  ``4 b s V`` (fp32 logits for the cross-entropy, Korthikanti et al. Sec. 4.3)

Activation recomputation (``recompute``; Korthikanti et al. 2022, Sec. 4 and 5), per
transformer block (the embedding and the head are never recomputed):

* ``"none"``: the stash above; nothing is recomputed.
* ``"selective"``: the attention core (``Q K^T``, softmax, its dropout, ``x V``) is not kept but
  recomputed in the backward pass: the stash loses ``(2p + 1) a b s_q s_k`` per attention (a GPT
  layer keeps ``34 s b h``, the paper's Eq. 6 without tensor parallelism) and the backward reruns
  ``4 b s_q s_k d`` FLOPs per attention.
* ``"full"``: only the block's input is kept, ``p b s h`` (a decoder block of an
  encoder-decoder also keeps the encoder output it attends to, ``p b s_e h``), and the backward
  reruns the block's whole forward.

A layer's backward costs ``2 x flops + recompute_flops`` (:class:`Workload.recompute_flops`).

Mixture-of-experts FFN (``num_experts = E > 0``; Switch Transformer, Fedus et al. 2021, arXiv
2101.03961; GShard, Lepikhin et al. 2020; Mixtral, Jiang et al. 2024, arXiv 2401.04088;
DeepSeekMoE, Dai et al. 2024, arXiv 2401.06066, with shared experts): every block after the
first ``first_dense_layers`` replaces its FFN by a router ``h E`` (no bias), ``E`` routed
experts of width ``f_e`` (``expert_ffn``, default ``f``) and ``n_sh`` shared experts of width
``f_sh`` (default ``f_e``), each an FFN as above. With ``c`` the capacity factor and ``k =
top_k``, per micro-batch:

* params: ``h E + E x FFN(f_e) + n_sh x FFN(f_sh)``; the routed experts' share is the layer's
  ``expert_params``, of which a token uses ``k / E`` (active parameters)
* FLOPs (only the experts a token is routed to, padded to the capacity as GShard computes on
  ``[E, C, h]`` buffers): ``2 b s h E + c k x FLOPs(f_e) + n_sh x FLOPs(f_sh)``
* stash: the FFN input ``(p + 1) b s h``, the router probabilities ``p b s E``, per routed copy
  its input and inner activations ``c k (p b s h + mats p b s f_e)``, the shared experts' inner
  activations ``n_sh mats p b s f_sh``
* all-to-all: ``a2a_bytes = c k b s h p`` dispatched per replica (:mod:`hulk_env.moe` turns it
  into link traffic over the expert-parallel group)

Full recomputation reruns the block's forward, not its all-to-all (not counted).

"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import numpy as np

from hulk_env.errors import HulkInputError
from hulk_env.validation import limits
from hulk_env.workload.model import Workload, check_recompute

ARCHITECTURES = ("decoder", "encoder", "encoder-decoder")
NORMS = ("layernorm", "rmsnorm")
MASK_BYTES = 1.0  # a dropout mask keeps one byte per element (Korthikanti et al. 2022)
LOGIT_BYTES = 4.0  # logits are kept in fp32 for the cross-entropy


@dataclass(frozen=True)
class TransformerConfig:
    """A transformer's architecture and training settings; the formulas are in the module docstring.

    Attributes:
        name: a label (``"gpt3-1.3b"``).
        num_layers: transformer blocks (decoder-only, encoder-only), or encoder blocks.
        hidden: model width ``h``.
        heads: attention heads ``a``.
        vocab: vocabulary size ``V``.
        seq_len: tokens per sequence (the encoder's for an encoder-decoder).
        architecture: ``"decoder"`` (GPT), ``"encoder"`` (BERT) or ``"encoder-decoder"`` (T5).
        num_decoder_layers: decoder blocks of an encoder-decoder; 0 otherwise.
        decoder_seq_len: target tokens of an encoder-decoder (default ``seq_len``).
        ffn: FFN inner size ``f`` (default ``4 * hidden``).
        head_dim: per-head size (default ``hidden // heads``); attention inner size is
            ``heads * head_dim``.
        num_kv_heads: key/value heads ``k`` (default ``heads``; fewer for grouped-query
            attention, 1 for multi-query attention); must divide ``heads``.
        gated_ffn: SwiGLU/GEGLU FFN with three matrices (LLaMA).
        tied_embeddings: the LM head reuses the embedding matrix.
        max_positions: learned position embeddings (0 for rotary, ALiBi or relative bias).
        biases: linear layers have biases.
        norm: ``"layernorm"`` (2h params) or ``"rmsnorm"`` (h params).
        bytes_per_activation: bytes per activation value ``p`` (2 = fp16/bf16).
        micro_batch_size, num_micro_batches, data_parallel, schedule, state_bytes_per_param,
        grad_bytes_per_param: training settings, as in :class:`Workload`.
        layers_per_block: coarsen the built graph into blocks of this many layers.
        recompute: activation recomputation, ``"none"``, ``"selective"`` or ``"full"`` (the
            module docstring gives its stash and extra FLOPs).
        num_experts: routed experts ``E`` per MoE block (0: a dense model).
        top_k: experts each token is routed to.
        expert_ffn: a routed expert's FFN width ``f_e`` (default ``ffn``).
        shared_experts: experts every token uses (DeepSeekMoE, Qwen-MoE), ``n_sh``.
        shared_expert_ffn: a shared expert's width ``f_sh`` (default ``expert_ffn``).
        capacity_factor: expert capacity over the even share of tokens, ``c`` (1 = dropless at
            balanced routing; pads the expert buffers and the all-to-all).
        first_dense_layers: leading blocks that keep a dense FFN of width ``ffn`` (DeepSeekMoE's
            first block).
    """

    name: str
    num_layers: int
    hidden: int
    heads: int
    vocab: int
    seq_len: int
    architecture: str = "decoder"
    num_decoder_layers: int = 0
    decoder_seq_len: int | None = None
    ffn: int | None = None
    head_dim: int | None = None
    num_kv_heads: int | None = None
    gated_ffn: bool = False
    tied_embeddings: bool = True
    max_positions: int = 0
    biases: bool = True
    norm: str = "layernorm"
    bytes_per_activation: float = 2.0
    micro_batch_size: int = 1
    num_micro_batches: int = 8
    data_parallel: int = 1
    schedule: str = "1f1b"
    state_bytes_per_param: float = 16.0
    grad_bytes_per_param: float = 2.0
    layers_per_block: int = 1
    recompute: str = "none"
    num_experts: int = 0
    top_k: int = 2
    expert_ffn: int | None = None
    shared_experts: int = 0
    shared_expert_ffn: int | None = None
    capacity_factor: float = 1.0
    first_dense_layers: int = 0

    def __post_init__(self) -> None:
        src = f"model config '{self.name}'"
        _check_moe(self, src)
        for label in ("num_layers", "hidden", "heads", "vocab", "seq_len", "layers_per_block"):
            _check_int(getattr(self, label), 1, src, label)
        for label in ("num_decoder_layers", "max_positions"):
            _check_int(getattr(self, label), 0, src, label)
        for label in ("decoder_seq_len", "ffn", "head_dim", "num_kv_heads"):
            if getattr(self, label) is not None:
                _check_int(getattr(self, label), 1, src, label)
        if self.architecture not in ARCHITECTURES:
            raise HulkInputError(
                f"unknown architecture {self.architecture!r}; choose one of {', '.join(ARCHITECTURES)}",
                source=src,
                field="architecture",
            )
        if (self.architecture == "encoder-decoder") != (self.num_decoder_layers > 0):
            raise HulkInputError(
                "an encoder-decoder needs num_decoder_layers >= 1, other architectures 0; "
                f"got architecture {self.architecture!r} with {self.num_decoder_layers}",
                source=src,
                field="num_decoder_layers",
            )
        if self.norm not in NORMS:
            raise HulkInputError(
                f"unknown norm {self.norm!r}; choose one of {', '.join(NORMS)}", source=src, field="norm"
            )
        if self.head_dim is None and self.hidden % self.heads:
            raise HulkInputError(
                f"hidden {self.hidden} is not divisible by heads {self.heads}; set head_dim",
                source=src,
                field="heads",
            )
        if self.num_kv_heads is not None and (
            self.num_kv_heads > self.heads or self.heads % self.num_kv_heads
        ):
            raise HulkInputError(
                f"num_kv_heads {self.num_kv_heads} must divide heads {self.heads} (each key/value "
                "head serves the same number of query heads)",
                source=src,
                field="num_kv_heads",
            )
        check_recompute(self.recompute, src)
        value = float(self.bytes_per_activation)
        if not np.isfinite(value) or value <= 0:
            raise HulkInputError(
                f"must be positive and finite, got {value!r}", source=src, field="bytes_per_activation"
            )
        blocks = self.num_layers + self.num_decoder_layers
        if blocks > limits.MAX_LAYERS * self.layers_per_block:  # before building any block
            raise HulkInputError(
                f"{blocks:,} blocks make more than {limits.MAX_LAYERS:,} layers with "
                f"layers_per_block={self.layers_per_block}; raise layers_per_block "
                f"({limits.cite('MAX_LAYERS')})",
                source=src,
                field="num_layers",
            )

    @property
    def ffn_dim(self) -> int:
        """FFN inner size ``f``."""
        return self.ffn if self.ffn is not None else 4 * self.hidden

    @property
    def attn_dim(self) -> int:
        """Attention inner size ``d = heads * head_dim``."""
        return self.heads * (self.head_dim if self.head_dim is not None else self.hidden // self.heads)

    @property
    def kv_heads(self) -> int:
        """Key/value heads ``k``."""
        return self.num_kv_heads if self.num_kv_heads is not None else self.heads

    @property
    def kv_dim(self) -> int:
        """Key/value inner size ``d_kv = k * head_dim``."""
        return self.attn_dim // self.heads * self.kv_heads

    @property
    def target_seq_len(self) -> int:
        """Decoder tokens per sequence of an encoder-decoder."""
        return self.decoder_seq_len if self.decoder_seq_len is not None else self.seq_len


def _check_moe(cfg: TransformerConfig, src: str) -> None:
    for label in ("num_experts", "shared_experts", "first_dense_layers"):
        _check_int(getattr(cfg, label), 0, src, label)
    _check_int(cfg.top_k, 1, src, "top_k")
    for label in ("expert_ffn", "shared_expert_ffn"):
        if getattr(cfg, label) is not None:
            _check_int(getattr(cfg, label), 1, src, label)
    if cfg.num_experts and cfg.top_k > cfg.num_experts:
        raise HulkInputError(
            f"top_k {cfg.top_k} exceeds num_experts {cfg.num_experts}", source=src, field="top_k"
        )
    factor = float(cfg.capacity_factor)
    if not np.isfinite(factor) or factor <= 0 or (cfg.num_experts and factor > cfg.num_experts):
        raise HulkInputError(
            f"capacity_factor must be positive and at most num_experts, got {cfg.capacity_factor!r}",
            source=src,
            field="capacity_factor",
        )


def _check_int(value: Any, minimum: int, src: str, label: str) -> None:
    if isinstance(value, bool) or int(value) != value or value < minimum:
        raise HulkInputError(f"must be an integer >= {minimum}, got {value!r}", source=src, field=label)


class LayerCost(NamedTuple):
    """Parameters, forward FLOPs, stashed bytes and forward FLOPs rerun in the backward pass
    (recomputation) of a layer or part of one, per micro-batch."""

    params: float = 0.0
    flops: float = 0.0
    stash_bytes: float = 0.0
    recompute_flops: float = 0.0


def _total(*parts: LayerCost) -> LayerCost:
    return LayerCost(*(float(sum(column)) for column in zip(*parts, strict=True)))


def _norm(cfg: TransformerConfig, b: int, s: int) -> LayerCost:
    """One LayerNorm/RMSNorm over ``b s`` tokens: params, no counted FLOPs, its input stashed."""
    params = (2 if cfg.norm == "layernorm" else 1) * cfg.hidden
    return LayerCost(params, 0.0, cfg.bytes_per_activation * b * s * cfg.hidden)


def _attention(cfg: TransformerConfig, b: int, s_q: int, s_k: int, cross: bool) -> LayerCost:
    """Self-attention (``s_q == s_k``) or cross-attention of ``s_q`` queries on ``s_k`` keys."""
    h, d, d_kv, a, p = cfg.hidden, cfg.attn_dim, cfg.kv_dim, cfg.heads, cfg.bytes_per_activation
    params = 2 * h * d + 2 * h * d_kv + (d + 2 * d_kv + h if cfg.biases else 0)
    proj_flops = 2 * b * (2 * s_q * d + 2 * s_k * d_kv) * h  # Q, out on queries; K, V on keys
    score_flops = 4 * b * s_q * s_k * d  # Q K^T and softmax x V, every query head
    core_stash = (2 * p + MASK_BYTES) * a * b * s_q * s_k  # softmax, dropout mask and output
    stash = (
        (p + MASK_BYTES) * b * s_q * h
        + p * b * (2 * s_q * d + 2 * s_k * d_kv)
        + (p * b * s_k * h if cross else 0.0)
    )
    if cfg.recompute == "selective":
        return LayerCost(params, proj_flops + score_flops, stash, score_flops)
    return LayerCost(params, proj_flops + score_flops, stash + core_stash)


def _ffn(cfg: TransformerConfig, b: int, s: int) -> LayerCost:
    """Two-matrix FFN, or a gated three-matrix one (SwiGLU)."""
    h, f, p = cfg.hidden, cfg.ffn_dim, cfg.bytes_per_activation
    mats = 3 if cfg.gated_ffn else 2
    params = mats * h * f + (((mats - 1) * f + h) if cfg.biases else 0)
    stash = (p + MASK_BYTES) * b * s * h + mats * p * b * s * f
    return LayerCost(params, 2 * b * s * mats * h * f, stash)


class MoEFFN(NamedTuple):
    """A mixture-of-experts FFN: its cost, the routed experts' parameters and the bytes one
    replica's micro-batch dispatches (module docstring)."""

    cost: LayerCost
    expert_params: float
    a2a_bytes: float


def _moe_ffn(cfg: TransformerConfig, b: int, s: int) -> MoEFFN:
    """Router, routed experts (``top_k`` of them per token, padded to the capacity) and shared
    experts, as in the module docstring."""
    h, p, e, k, c = cfg.hidden, cfg.bytes_per_activation, cfg.num_experts, cfg.top_k, float(cfg.capacity_factor)
    mats = 3 if cfg.gated_ffn else 2
    f_e = cfg.expert_ffn if cfg.expert_ffn is not None else cfg.ffn_dim
    f_sh = cfg.shared_expert_ffn if cfg.shared_expert_ffn is not None else f_e

    def expert(f: int) -> tuple[float, float]:  # params and FLOPs of one expert on all tokens
        return mats * h * f + (((mats - 1) * f + h) if cfg.biases else 0), 2.0 * b * s * mats * h * f

    routed_params, routed_flops = expert(f_e)
    shared_params, shared_flops = expert(f_sh)
    n_sh = cfg.shared_experts
    params = h * e + e * routed_params + n_sh * shared_params
    flops = 2.0 * b * s * h * e + c * k * routed_flops + n_sh * shared_flops
    stash = (
        (p + MASK_BYTES) * b * s * h
        + p * b * s * e
        + c * k * (p * b * s * h + mats * p * b * s * f_e)
        + n_sh * mats * p * b * s * f_sh
    )
    return MoEFFN(LayerCost(params, flops, stash), float(e * routed_params), c * k * b * s * h * p)


def transformer_block(cfg: TransformerConfig, kind: str = "self", moe: bool = False) -> LayerCost:
    """Parameters, forward FLOPs and stashed bytes of one block, per micro-batch.

    Args:
        cfg: the architecture.
        kind: ``"self"`` (a decoder-only or encoder block) or ``"cross"`` (a decoder block of an
            encoder-decoder, attending to ``seq_len`` encoder tokens).
        moe: the block's FFN is the mixture of experts (:func:`_moe_ffn`).
    """
    b, h, p = cfg.micro_batch_size, cfg.hidden, cfg.bytes_per_activation

    def ffn(s: int) -> LayerCost:
        return _moe_ffn(cfg, b, s).cost if moe else _ffn(cfg, b, s)

    if kind == "self":
        s = cfg.seq_len
        block = _total(_attention(cfg, b, s, s, False), ffn(s), *[_norm(cfg, b, s)] * 2)
        inputs = p * b * s * h
    elif kind == "cross":
        s, s_e = cfg.target_seq_len, cfg.seq_len
        block = _total(
            _attention(cfg, b, s, s, False),
            _attention(cfg, b, s, s_e, True),
            ffn(s),
            *[_norm(cfg, b, s)] * 3,
        )
        inputs = p * b * (s + s_e) * h  # its input and the encoder output it attends to
    else:
        raise ValueError(f"unknown block kind {kind!r}")
    if cfg.recompute == "full":
        return LayerCost(block.params, block.flops, inputs, block.flops)
    return block


def _final_norm(cfg: TransformerConfig, b: int, s: int) -> LayerCost:
    """The encoder's final norm, held by its last block: recomputed with it under ``full``."""
    norm = _norm(cfg, b, s)
    return LayerCost(norm.params, 0.0, 0.0) if cfg.recompute == "full" else norm


def _embedding(cfg: TransformerConfig) -> LayerCost:
    b, h = cfg.micro_batch_size, cfg.hidden
    tokens = cfg.seq_len + (cfg.target_seq_len if cfg.architecture == "encoder-decoder" else 0)
    return LayerCost(cfg.vocab * h + cfg.max_positions * h, 0.0, MASK_BYTES * b * tokens * h)


def _head(cfg: TransformerConfig) -> LayerCost:
    b, h, v, p = cfg.micro_batch_size, cfg.hidden, cfg.vocab, cfg.bytes_per_activation
    s = cfg.target_seq_len if cfg.architecture == "encoder-decoder" else cfg.seq_len
    proj = LayerCost(0 if cfg.tied_embeddings else v * h, 2 * b * s * h * v, p * b * s * h)
    logits = LayerCost(0, 0, LOGIT_BYTES * b * s * v)
    if cfg.architecture != "encoder":
        return _total(_norm(cfg, b, s), proj, logits)
    bias = h if cfg.biases else 0
    transform = LayerCost(h * h + bias, 2 * b * s * h * h, p * b * s * h)
    pooler = LayerCost(h * h + bias, 2 * b * h * h, p * b * h)
    output_bias = LayerCost(v if cfg.biases else 0)
    return _total(transform, _norm(cfg, b, s), proj, output_bias, logits, pooler)


def build_transformer(cfg: TransformerConfig, layers_per_block: int | None = None) -> Workload:
    """The layer graph of a transformer, per the module docstring's formulas.

    Layers: ``embed``, then ``block1..blockN`` (a chain) for decoder-only and encoder-only
    models; for an encoder-decoder ``enc1..encN`` and ``dec1..decM`` with edges ``embed ->
    enc1``, ``embed -> dec1``, ``enc_i -> enc_i+1``, ``dec_i -> dec_i+1``, ``encN -> dec_j`` for
    every ``j`` (cross-attention reads the final encoder output) and ``decM -> head``.

    Args:
        cfg: architecture and training settings.
        layers_per_block: overrides ``cfg.layers_per_block`` (1 = one layer per block).
    """
    b, h, p = cfg.micro_batch_size, cfg.hidden, cfg.bytes_per_activation
    act_block = p * b * cfg.seq_len * h
    names: list[str] = ["embed"]
    rows: list[LayerCost] = [_embedding(cfg)]
    acts: list[float] = [p * b * max(cfg.seq_len, cfg.target_seq_len) * h]
    edges: list[tuple[int, int]] = []
    moe_rows: list[tuple[float, float]] = [(0.0, 0.0)]  # expert params, a2a bytes per layer
    n = cfg.num_layers
    blocks = {kind: transformer_block(cfg, kind) for kind in ("self", "cross")}
    moe_blocks = {kind: transformer_block(cfg, kind, moe=True) for kind in blocks} if cfg.num_experts else {}

    def block_of(kind: str, index: int) -> LayerCost:
        """Block ``index`` (from 1, counted over the encoder then the decoder): MoE or dense."""
        is_moe = bool(cfg.num_experts) and index > cfg.first_dense_layers
        seq = cfg.seq_len if kind == "self" else cfg.target_seq_len
        moe_ffn = _moe_ffn(cfg, b, seq) if is_moe else None
        moe_rows.append((moe_ffn.expert_params, moe_ffn.a2a_bytes) if moe_ffn else (0.0, 0.0))
        return moe_blocks[kind] if is_moe else blocks[kind]

    if cfg.architecture == "encoder-decoder":
        for i in range(1, n + 1):
            enc = block_of("self", i)
            names.append(f"enc{i}")
            rows.append(enc if i < n else _total(enc, _final_norm(cfg, b, cfg.seq_len)))
            acts.append(act_block)
            edges.append((i - 1, i))
        for j in range(1, cfg.num_decoder_layers + 1):
            dec = block_of("cross", n + j)
            names.append(f"dec{j}")
            rows.append(dec)
            acts.append(p * b * cfg.target_seq_len * h)
            idx = len(names) - 1
            edges.append((0 if j == 1 else idx - 1, idx))
            edges.append((n, idx))  # cross-attention on the final encoder output
    else:
        for i in range(1, n + 1):
            names.append(f"block{i}")
            rows.append(block_of("self", i))
            acts.append(act_block)
            edges.append((i - 1, i))
    names.append("head")
    rows.append(_head(cfg))
    moe_rows.append((0.0, 0.0))
    acts.append(0.0)  # the loss is a scalar; nothing is sent on
    edges.append((len(names) - 2, len(names) - 1))
    table = np.array(rows, dtype=np.float64)
    workload = Workload(
        name=cfg.name,
        layer_names=tuple(names),
        flops=table[:, LayerCost._fields.index("flops")],
        params=table[:, LayerCost._fields.index("params")],
        activation_bytes=np.array(acts),
        stash_bytes=table[:, LayerCost._fields.index("stash_bytes")],
        edges=np.array(edges, dtype=np.int64),
        recompute_flops=table[:, LayerCost._fields.index("recompute_flops")],
        recompute=cfg.recompute,
        config=cfg if layers_per_block is None else replace(cfg, layers_per_block=layers_per_block),
        micro_batch_size=cfg.micro_batch_size,
        num_micro_batches=cfg.num_micro_batches,
        data_parallel=cfg.data_parallel,
        state_bytes_per_param=cfg.state_bytes_per_param,
        grad_bytes_per_param=cfg.grad_bytes_per_param,
        schedule=cfg.schedule,
        moe=_moe_layers(cfg, moe_rows) if cfg.num_experts else None,
    )
    k = cfg.layers_per_block if layers_per_block is None else layers_per_block
    return workload.coarsen(k)


def _moe_layers(cfg: TransformerConfig, rows: list[tuple[float, float]]) -> dict[str, np.ndarray]:
    """The per-layer MoE arrays of the built graph (:class:`hulk_env.moe.MoELayers` fields)."""
    table = np.array(rows, dtype=np.float64)
    is_moe = (table[:, 1] > 0).astype(np.float64)
    return {
        "expert_params": table[:, 0],
        "num_experts": is_moe * cfg.num_experts,
        "top_k": is_moe * cfg.top_k,
        "a2a_bytes": table[:, 1],
        "a2a_count": is_moe,
    }


def build_from_config(cfg: TransformerConfig, overrides: dict[str, Any]) -> Workload:
    """Build ``cfg`` with ``overrides`` (a :func:`~hulk_env.workload.model.training_overrides` dict).

    The micro-batch size is part of the config, so FLOPs and bytes are rebuilt for it.
    """
    return build_transformer(replace(cfg, **overrides))

