"""Workloads: the layer graph of a model to train, and its training settings.

A :class:`Workload` is a DAG of layers in topological order (every edge ``u -> v`` has
``u < v``). Per layer, per micro-batch: forward ``flops``, ``params``, ``activation_bytes`` (the
output sent to each successor) and ``stash_bytes`` (activations kept for the backward pass).
Validated on construction: finite, non-negative, acyclic, weakly connected.

Transformer builder (:func:`build_transformer`)
-----------------------------------------------
Symbols: ``b`` micro-batch size (sequences), ``s`` sequence length (``s_e`` encoder, ``s_d``
decoder), ``h`` hidden size, ``a`` heads, ``d = a * head_dim`` attention inner size (``= h``
unless ``head_dim`` is set, as in T5), ``f`` FFN size, ``V`` vocabulary, ``P`` learned
positions, ``p`` bytes per activation value (2 = fp16/bf16). Counts are parameters, FLOPs are
forward FLOPs per micro-batch (a multiply-add = 2 FLOPs), bytes are bytes.

Parameters (``[bias]`` terms only when ``biases``; a norm has ``2h`` params as LayerNorm and
``h`` as RMSNorm):

* attention (self or cross): ``4 h d  [+ 3d + h]``
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

* linear layers: ``2 x tokens x weight params`` (``tokens = b s``); cross-attention projects
  queries and output on ``b s_d`` decoder tokens and keys/values on ``b s_e`` encoder tokens:
  ``2 b (2 s_d + 2 s_e) h d``
* attention scores ``Q K^T`` and ``softmax x V``: ``4 b s_q s_k d`` (no saving for the causal
  mask, as in Megatron-LM's accounting)
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

* attention: ``(p + 1) b s_q h`` (input, output dropout mask) + ``p b (2 s_q + 2 s_k) d`` (Q, K,
  V, output-projection input) + ``(2p + 1) a b s_q s_k`` (softmax, its dropout mask and
  output); cross-attention also keeps the encoder output ``p b s_e h``
* FFN: ``(p + 1) b s h + 2 p b s f`` (gated: ``3 p b s f``)
* norm: ``p b s h`` each
* embedding: ``b s h`` (dropout mask); head: ``2 p b s h`` (norm and projection inputs) +
  ``4 b s V`` (fp32 logits for the cross-entropy, Korthikanti et al. Sec. 4.3)

Workload files (:func:`load_workload_file`)
-------------------------------------------
YAML or JSON, one mapping, in one of two forms. Training settings (``micro_batch_size``,
``num_micro_batches``, ``data_parallel``, ``schedule``, ``state_bytes_per_param``,
``grad_bytes_per_param``, ``layers_per_block``) and ``name``/``description`` may sit at the top
level in both forms::

    # 1. a transformer, built by build_transformer (keys = TransformerConfig fields)
    transformer:
      num_layers: 24
      hidden: 2048
      heads: 16
      vocab: 50257
      seq_len: 2048
      max_positions: 2048
    micro_batch_size: 1

    # 2. an explicit layer list; numbers per micro-batch; any order (sorted topologically)
    name: my-net
    layers:
      - {name: embed, flops: 0, params: 1.0e8, activation_mb: 8, stash_mb: 4}
      - {name: body, tflops: 3.5, params: 1.2e9, activation_mb: 8, stash_mb: 900}
    edges: [[embed, body]]   # names or 0-based indices into `layers`; default: a chain

Each layer needs ``name``, ``flops`` or ``tflops``, ``params``, ``activation_bytes`` or
``activation_mb`` and ``stash_bytes`` or ``stash_mb`` (MB = 1e6 bytes).
"""

from __future__ import annotations

import difflib
import json
from dataclasses import MISSING, dataclass, fields, replace
from functools import cached_property
from pathlib import Path
from typing import Any, NamedTuple

import networkx as nx
import numpy as np
import yaml

from hulk_env.errors import HulkInputError
from hulk_env.units import MB, TFLOPS

SCHEDULES = ("gpipe", "1f1b")


@dataclass(frozen=True, eq=False)
class Workload:
    """A model's layer DAG plus how it is trained.

    Attributes:
        name: a label (``"gpt3-1.3b"``).
        layer_names: ``L`` names in topological order.
        flops: ``[L]`` forward FLOPs per micro-batch (backward costs 2x, see :mod:`hulk_env.cost`).
        params: ``[L]`` parameter counts.
        activation_bytes: ``[L]`` bytes of the layer's output sent to each successor, per
            micro-batch (its gradient of the same size flows back in the backward pass).
        stash_bytes: ``[L]`` activation bytes kept for backward, per micro-batch.
        edges: ``[E, 2]`` int64 DAG edges ``(u, v)`` with ``u < v``.
        micro_batch_size: sequences per micro-batch.
        num_micro_batches: micro-batches per iteration (per replica).
        data_parallel: replicas ``D`` of the pipeline.
        state_bytes_per_param: model-state bytes per parameter (16 = mixed-precision Adam:
            fp16 weight + grad, fp32 master weight + 2 moments).
        grad_bytes_per_param: bytes per parameter exchanged by the data-parallel all-reduce
            (2 = fp16 gradients).
        schedule: ``"gpipe"`` or ``"1f1b"``.
    """

    name: str
    layer_names: tuple[str, ...]
    flops: np.ndarray
    params: np.ndarray
    activation_bytes: np.ndarray
    stash_bytes: np.ndarray
    edges: np.ndarray
    micro_batch_size: int = 1
    num_micro_batches: int = 8
    data_parallel: int = 1
    state_bytes_per_param: float = 16.0
    grad_bytes_per_param: float = 2.0
    schedule: str = "1f1b"

    def __post_init__(self) -> None:
        names = tuple(self.layer_names)
        object.__setattr__(self, "layer_names", names)
        n = len(names)
        src = f"model '{self.name}'"
        if n < 1:
            raise HulkInputError("a model needs at least one layer", source=src)
        if len(set(names)) != n:
            dup = sorted({x for x in names if names.count(x) > 1})
            raise HulkInputError(f"duplicate layer names {dup}", source=src)
        for label in ("flops", "params", "activation_bytes", "stash_bytes"):
            arr = np.array(getattr(self, label), dtype=np.float64, copy=True)
            if arr.shape != (n,):
                raise HulkInputError(
                    f"has shape {arr.shape}, expected ({n},)", source=src, field=label
                )
            bad = ~np.isfinite(arr) | (arr < 0)
            if bad.any():
                i = int(np.argmax(bad))
                raise HulkInputError(
                    f"layer '{names[i]}' has {arr[i]!r}; must be finite and >= 0",
                    source=src,
                    field=label,
                )
            arr.setflags(write=False)
            object.__setattr__(self, label, arr)
        edges = np.array(self.edges, dtype=np.int64, copy=True).reshape(-1, 2)
        if edges.size and (edges.min() < 0 or edges.max() >= n):
            raise HulkInputError(f"edge refers to a layer outside 0..{n - 1}", source=src, field="edges")
        if edges.size and np.any(edges[:, 0] >= edges[:, 1]):
            u, v = edges[np.argmax(edges[:, 0] >= edges[:, 1])]
            raise HulkInputError(
                f"edge {names[u]} -> {names[v]} goes backwards: layers must be in topological "
                "order (the graph must be acyclic)",
                source=src,
                field="edges",
            )
        edges = np.unique(edges, axis=0) if edges.size else edges
        edges.setflags(write=False)
        object.__setattr__(self, "edges", edges)
        if n > 1 and not _weakly_connected(n, edges):
            raise HulkInputError(
                "the layer graph is disconnected: every layer must be reachable from the input",
                source=src,
                field="edges",
            )
        for label in ("micro_batch_size", "num_micro_batches", "data_parallel"):
            value = getattr(self, label)
            if int(value) != value or int(value) < 1:
                raise HulkInputError(f"must be an integer >= 1, got {value!r}", source=src, field=label)
            object.__setattr__(self, label, int(value))
        for label in ("state_bytes_per_param", "grad_bytes_per_param"):
            value = float(getattr(self, label))
            if not np.isfinite(value) or value < 0:
                raise HulkInputError(f"must be finite and >= 0, got {value!r}", source=src, field=label)
            object.__setattr__(self, label, value)
        if self.schedule not in SCHEDULES:
            raise HulkInputError(
                f"unknown schedule {self.schedule!r}; choose one of {', '.join(SCHEDULES)}",
                source=src,
                field="schedule",
            )

    # -- derived --------------------------------------------------------------------------------
    @property
    def num_layers(self) -> int:
        return len(self.layer_names)

    @property
    def total_params(self) -> float:
        return float(self.params.sum())

    @property
    def total_flops(self) -> float:
        """Forward FLOPs of one micro-batch through the whole model."""
        return float(self.flops.sum())

    @cached_property
    def predecessors(self) -> tuple[tuple[int, ...], ...]:
        """For each layer, the layers whose output it reads."""
        preds: list[list[int]] = [[] for _ in range(self.num_layers)]
        for u, v in self.edges:
            preds[int(v)].append(int(u))
        return tuple(tuple(p) for p in preds)

    @cached_property
    def successors(self) -> tuple[tuple[int, ...], ...]:
        succ: list[list[int]] = [[] for _ in range(self.num_layers)]
        for u, v in self.edges:
            succ[int(u)].append(int(v))
        return tuple(tuple(s) for s in succ)

    @property
    def is_chain(self) -> bool:
        n = self.num_layers
        return len(self.edges) == n - 1 and bool(np.all(self.edges[:, 1] - self.edges[:, 0] == 1))

    def memory_floor_bytes(self) -> float:
        """Memory one replica needs at least (model state + one micro-batch of stash)."""
        return float(self.state_bytes_per_param * self.params.sum() + self.stash_bytes.sum())

    def with_training(
        self,
        *,
        micro_batch_size: int | None = None,
        num_micro_batches: int | None = None,
        data_parallel: int | None = None,
        schedule: str | None = None,
        state_bytes_per_param: float | None = None,
        grad_bytes_per_param: float | None = None,
    ) -> Workload:
        """A copy with other training settings.

        Note: changing ``micro_batch_size`` here does *not* rescale per-layer FLOPs or bytes;
        rebuild the model with the transformer builder for that.
        """
        changes = {
            k: v
            for k, v in dict(
                micro_batch_size=micro_batch_size,
                num_micro_batches=num_micro_batches,
                data_parallel=data_parallel,
                schedule=schedule,
                state_bytes_per_param=state_bytes_per_param,
                grad_bytes_per_param=grad_bytes_per_param,
            ).items()
            if v is not None
        }
        return replace(self, **changes)

    def coarsen(self, layers_per_block: int) -> Workload:
        """Merge runs of ``layers_per_block`` consecutive layers (topological order) into blocks.

        FLOPs, params and stash add up. A block's ``activation_bytes`` is the largest output of
        a member with an edge leaving the block (for a chain: its last layer's output). Edges
        inside a block disappear; edges between blocks are kept once.
        """
        k = int(layers_per_block)
        if k < 1:
            raise HulkInputError(f"layers_per_block must be >= 1, got {layers_per_block!r}")
        if k == 1:
            return self
        n = self.num_layers
        block = np.arange(n) // k
        nb = int(block[-1]) + 1
        leaving = np.zeros(n, dtype=bool)
        if len(self.edges):
            crosses = block[self.edges[:, 0]] != block[self.edges[:, 1]]
            leaving[self.edges[crosses, 0]] = True
        act = np.zeros(nb)
        np.maximum.at(act, block[leaving], self.activation_bytes[leaving])
        # A block with no leaving edge is the last one: keep its last member's output size.
        last = np.minimum((np.arange(nb) + 1) * k, n) - 1
        act = np.where(act > 0, act, self.activation_bytes[last])
        bedges = block[self.edges] if len(self.edges) else np.zeros((0, 2), dtype=np.int64)
        bedges = bedges[bedges[:, 0] != bedges[:, 1]]
        names = tuple(
            self.layer_names[b * k] if min((b + 1) * k, n) - b * k == 1
            else f"{self.layer_names[b * k]}..{self.layer_names[min((b + 1) * k, n) - 1]}"
            for b in range(nb)
        )
        return replace(
            self,
            layer_names=names,
            flops=np.bincount(block, self.flops, nb),
            params=np.bincount(block, self.params, nb),
            activation_bytes=act,
            stash_bytes=np.bincount(block, self.stash_bytes, nb),
            edges=bedges,
        )

    def summary(self) -> dict:
        """A JSON-ready summary (used by ``hulk show model --json``)."""
        return {
            "name": self.name,
            "layers": self.num_layers,
            "edges": int(len(self.edges)),
            "is_chain": self.is_chain,
            "params": self.total_params,
            "forward_flops_per_micro_batch": self.total_flops,
            "activation_bytes_max": float(self.activation_bytes.max()),
            "stash_bytes_per_micro_batch": float(self.stash_bytes.sum()),
            "model_state_bytes": float(self.state_bytes_per_param * self.params.sum()),
            "micro_batch_size": self.micro_batch_size,
            "num_micro_batches": self.num_micro_batches,
            "data_parallel": self.data_parallel,
            "schedule": self.schedule,
        }


def _weakly_connected(n: int, edges: np.ndarray) -> bool:
    parent = list(range(n))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for u, v in edges:
        parent[find(int(u))] = find(int(v))
    return len({find(i) for i in range(n)}) == 1


# ---- transformer builder ----------------------------------------------------------------------

ARCHITECTURES = ("decoder", "encoder", "encoder-decoder")
NORMS = ("layernorm", "rmsnorm")
MASK_BYTES = 1.0  # a dropout mask keeps one byte per element (Korthikanti et al. 2022)
LOGIT_BYTES = 4.0  # logits are kept in fp32 for the cross-entropy


@dataclass(frozen=True)
class TransformerConfig:
    """A transformer's architecture and training settings; see the module docstring's formulas.

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
        gated_ffn: SwiGLU/GEGLU FFN with three matrices (LLaMA).
        tied_embeddings: the LM head reuses the embedding matrix.
        max_positions: learned position embeddings (0 for rotary, ALiBi or relative bias).
        biases: linear layers have biases.
        norm: ``"layernorm"`` (2h params) or ``"rmsnorm"`` (h params).
        bytes_per_activation: bytes per activation value ``p`` (2 = fp16/bf16).
        micro_batch_size, num_micro_batches, data_parallel, schedule, state_bytes_per_param,
        grad_bytes_per_param: training settings, as in :class:`Workload`.
        layers_per_block: coarsen the built graph into blocks of this many layers.
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

    def __post_init__(self) -> None:
        src = f"model config '{self.name}'"
        for label in ("num_layers", "hidden", "heads", "vocab", "seq_len", "layers_per_block"):
            _check_int(getattr(self, label), 1, src, label)
        for label in ("num_decoder_layers", "max_positions"):
            _check_int(getattr(self, label), 0, src, label)
        for label in ("decoder_seq_len", "ffn", "head_dim"):
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
        value = float(self.bytes_per_activation)
        if not np.isfinite(value) or value <= 0:
            raise HulkInputError(
                f"must be positive and finite, got {value!r}", source=src, field="bytes_per_activation"
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
    def target_seq_len(self) -> int:
        """Decoder tokens per sequence of an encoder-decoder."""
        return self.decoder_seq_len if self.decoder_seq_len is not None else self.seq_len


def _check_int(value: Any, minimum: int, src: str, label: str) -> None:
    if isinstance(value, bool) or int(value) != value or value < minimum:
        raise HulkInputError(f"must be an integer >= {minimum}, got {value!r}", source=src, field=label)


class LayerCost(NamedTuple):
    """Parameters, forward FLOPs and stashed bytes of a layer (or part of one), per micro-batch."""

    params: float = 0.0
    flops: float = 0.0
    stash_bytes: float = 0.0


def _total(*parts: LayerCost) -> LayerCost:
    return LayerCost(*(float(sum(column)) for column in zip(*parts, strict=True)))


def _norm(cfg: TransformerConfig, b: int, s: int) -> LayerCost:
    """One LayerNorm/RMSNorm over ``b s`` tokens: params, no counted FLOPs, its input stashed."""
    params = (2 if cfg.norm == "layernorm" else 1) * cfg.hidden
    return LayerCost(params, 0.0, cfg.bytes_per_activation * b * s * cfg.hidden)


def _attention(cfg: TransformerConfig, b: int, s_q: int, s_k: int, cross: bool) -> LayerCost:
    """Self-attention (``s_q == s_k``) or cross-attention of ``s_q`` queries on ``s_k`` keys."""
    h, d, a, p = cfg.hidden, cfg.attn_dim, cfg.heads, cfg.bytes_per_activation
    params = 4 * h * d + (3 * d + h if cfg.biases else 0)
    proj_flops = 2 * b * (2 * s_q + 2 * s_k) * h * d  # Q, out on queries; K, V on keys
    score_flops = 4 * b * s_q * s_k * d  # Q K^T and softmax x V
    stash = (
        (p + MASK_BYTES) * b * s_q * h
        + p * b * (2 * s_q + 2 * s_k) * d
        + (2 * p + MASK_BYTES) * a * b * s_q * s_k
        + (p * b * s_k * h if cross else 0.0)
    )
    return LayerCost(params, proj_flops + score_flops, stash)


def _ffn(cfg: TransformerConfig, b: int, s: int) -> LayerCost:
    """Two-matrix FFN, or a gated three-matrix one (SwiGLU)."""
    h, f, p = cfg.hidden, cfg.ffn_dim, cfg.bytes_per_activation
    mats = 3 if cfg.gated_ffn else 2
    params = mats * h * f + (((mats - 1) * f + h) if cfg.biases else 0)
    stash = (p + MASK_BYTES) * b * s * h + mats * p * b * s * f
    return LayerCost(params, 2 * b * s * mats * h * f, stash)


def transformer_block(cfg: TransformerConfig, kind: str = "self") -> LayerCost:
    """Parameters, forward FLOPs and stashed bytes of one block, per micro-batch.

    Args:
        cfg: the architecture.
        kind: ``"self"`` (a decoder-only or encoder block) or ``"cross"`` (a decoder block of an
            encoder-decoder, attending to ``seq_len`` encoder tokens).
    """
    b = cfg.micro_batch_size
    if kind == "self":
        s = cfg.seq_len
        return _total(_attention(cfg, b, s, s, False), _ffn(cfg, b, s), *[_norm(cfg, b, s)] * 2)
    if kind == "cross":
        s, s_e = cfg.target_seq_len, cfg.seq_len
        return _total(
            _attention(cfg, b, s, s, False),
            _attention(cfg, b, s, s_e, True),
            _ffn(cfg, b, s),
            *[_norm(cfg, b, s)] * 3,
        )
    raise ValueError(f"unknown block kind {kind!r}")


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
    n = cfg.num_layers
    if cfg.architecture == "encoder-decoder":
        enc = transformer_block(cfg, "self")
        for i in range(1, n + 1):
            names.append(f"enc{i}")
            rows.append(enc if i < n else _total(enc, _norm(cfg, b, cfg.seq_len)))
            acts.append(act_block)
            edges.append((i - 1, i))
        dec = transformer_block(cfg, "cross")
        for j in range(1, cfg.num_decoder_layers + 1):
            names.append(f"dec{j}")
            rows.append(dec)
            acts.append(p * b * cfg.target_seq_len * h)
            idx = len(names) - 1
            edges.append((0 if j == 1 else idx - 1, idx))
            edges.append((n, idx))  # cross-attention on the final encoder output
    else:
        block = transformer_block(cfg, "self")
        for i in range(1, n + 1):
            names.append(f"block{i}")
            rows.append(block)
            acts.append(act_block)
            edges.append((i - 1, i))
    names.append("head")
    rows.append(_head(cfg))
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
        micro_batch_size=cfg.micro_batch_size,
        num_micro_batches=cfg.num_micro_batches,
        data_parallel=cfg.data_parallel,
        state_bytes_per_param=cfg.state_bytes_per_param,
        grad_bytes_per_param=cfg.grad_bytes_per_param,
        schedule=cfg.schedule,
    )
    k = cfg.layers_per_block if layers_per_block is None else layers_per_block
    return workload.coarsen(k)


# ---- workload files ---------------------------------------------------------------------------

FILE_SUFFIXES = (".yaml", ".yml", ".json")
TRAINING_KEYS = (
    "micro_batch_size",
    "num_micro_batches",
    "data_parallel",
    "schedule",
    "state_bytes_per_param",
    "grad_bytes_per_param",
    "layers_per_block",
)
_TOP_KEYS = ("name", "description", "transformer", "layers", "edges", *TRAINING_KEYS)
# Per-layer keys of the explicit form: field -> (alternative keys, scale to SI).
_LAYER_NUMBERS = {
    "flops": (("flops", 1.0), ("tflops", TFLOPS)),
    "params": (("params", 1.0),),
    "activation_bytes": (("activation_bytes", 1.0), ("activation_mb", MB)),
    "stash_bytes": (("stash_bytes", 1.0), ("stash_mb", MB)),
}
_LAYER_KEYS = ("name", *(key for alts in _LAYER_NUMBERS.values() for key, _ in alts))


def training_overrides(
    *,
    micro_batch_size: int | None = None,
    num_micro_batches: int | None = None,
    data_parallel: int | None = None,
    schedule: str | None = None,
    state_bytes_per_param: float | None = None,
    grad_bytes_per_param: float | None = None,
    layers_per_block: int | None = None,
) -> dict[str, Any]:
    """The training settings that were given (not None), as a dict keyed by field name."""
    given = dict(
        micro_batch_size=micro_batch_size,
        num_micro_batches=num_micro_batches,
        data_parallel=data_parallel,
        schedule=schedule,
        state_bytes_per_param=state_bytes_per_param,
        grad_bytes_per_param=grad_bytes_per_param,
        layers_per_block=layers_per_block,
    )
    return {k: v for k, v in given.items() if v is not None}


def build_from_config(cfg: TransformerConfig, overrides: dict[str, Any]) -> Workload:
    """Build ``cfg`` with training ``overrides`` (a :func:`training_overrides` dict) applied.

    The micro-batch size is part of the config, so FLOPs and bytes are rebuilt for it.
    """
    return build_transformer(replace(cfg, **overrides))


def load_workload(
    name_or_path: str | Path,
    *,
    micro_batch_size: int | None = None,
    num_micro_batches: int | None = None,
    data_parallel: int | None = None,
    schedule: str | None = None,
    state_bytes_per_param: float | None = None,
    grad_bytes_per_param: float | None = None,
    layers_per_block: int | None = None,
) -> Workload:
    """A built-in model by name (see :mod:`hulk_env.catalog`) or a ``.yaml/.yml/.json`` file.

    Training settings given here override the model's or the file's.

    Raises:
        HulkInputError: unknown name (the message lists the valid ones), missing or bad file.
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
    path = Path(name_or_path)
    if path.suffix.lower() in FILE_SUFFIXES or path.is_file():
        return load_workload_file(path, **overrides)
    from hulk_env import catalog  # the catalog imports this module

    return catalog.get_model(str(name_or_path), **overrides)


def load_workload_file(
    path: str | Path,
    *,
    micro_batch_size: int | None = None,
    num_micro_batches: int | None = None,
    data_parallel: int | None = None,
    schedule: str | None = None,
    state_bytes_per_param: float | None = None,
    grad_bytes_per_param: float | None = None,
    layers_per_block: int | None = None,
) -> Workload:
    """Load a workload file in the format of the module docstring.

    Training settings given here override the file's. For an explicit layer list the numbers
    are per micro-batch as written: overriding ``micro_batch_size`` relabels, it does not rescale.

    Raises:
        HulkInputError: naming the file, the item (``layers[3]``, ``edges[0]``) and the field.
    """
    path = Path(path)
    src = str(path)
    data = _read_mapping(path)
    _check_keys(data, _TOP_KEYS, src, None)
    if ("transformer" in data) == ("layers" in data):
        raise HulkInputError(
            "give exactly one of 'transformer' (an architecture) or 'layers' (an explicit list)",
            source=src,
        )
    kinds = {f.name: str(f.type) for f in fields(TransformerConfig)}
    in_file = {k: _typed(data[k], kinds[k], src, None, k) for k in TRAINING_KEYS if k in data}
    overrides = training_overrides(
        micro_batch_size=micro_batch_size,
        num_micro_batches=num_micro_batches,
        data_parallel=data_parallel,
        schedule=schedule,
        state_bytes_per_param=state_bytes_per_param,
        grad_bytes_per_param=grad_bytes_per_param,
        layers_per_block=layers_per_block,
    )
    name = str(data.get("name", path.stem))
    try:
        if "transformer" in data:
            if "edges" in data:
                raise HulkInputError("'edges' only goes with an explicit 'layers' list", source=src, field="edges")
            return _transformer_from_file(data["transformer"], name, in_file, overrides, src)
        settings = {**in_file, **overrides}
        return _layers_from_file(data["layers"], data.get("edges"), name, settings, src)
    except HulkInputError as err:
        if err.source == src:
            raise
        # Validation inside the dataclasses names the model; point at the file instead.
        raise HulkInputError(err.message, source=src, row=err.row, field=err.field) from None


def _read_mapping(path: Path) -> dict:
    src = str(path)
    if path.suffix.lower() not in FILE_SUFFIXES:
        raise HulkInputError(f"unknown file type; use one of {', '.join(FILE_SUFFIXES)}", source=src)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise HulkInputError(f"cannot read the file ({err.strerror or err})", source=src) from None
    try:
        data = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    except json.JSONDecodeError as err:
        raise HulkInputError(f"not valid JSON: {err.msg}", source=src, row=err.lineno) from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        problem = getattr(err, "problem", None) or "syntax error"
        row = mark.line + 1 if mark is not None else None
        raise HulkInputError(f"not valid YAML: {problem}", source=src, row=row) from None
    if not isinstance(data, dict):
        raise HulkInputError("the file must hold one mapping (key: value pairs)", source=src)
    return data


def _check_keys(item: Any, allowed: tuple[str, ...], src: str, row: str | None) -> None:
    if not isinstance(item, dict):
        raise HulkInputError(f"expected a mapping, got {type(item).__name__}", source=src, row=row)
    for key in item:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f"did you mean '{close[0]}'?" if close else f"valid keys: {', '.join(allowed)}"
            raise HulkInputError(f"unknown key; {hint}", source=src, row=row, field=str(key))


def _number(value: Any, src: str, row: str | None, field: str) -> float:
    """A finite, non-negative number (numeric strings such as YAML's ``1e9`` accepted)."""
    if isinstance(value, bool) or value is None:
        raise HulkInputError(f"must be a number, got {value!r}", source=src, row=row, field=field)
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise HulkInputError(f"must be a number, got {value!r}", source=src, row=row, field=field) from None
    if not np.isfinite(number) or number < 0:
        raise HulkInputError(
            f"must be finite and >= 0, got {value!r}", source=src, row=row, field=field
        )
    return number


def _typed(value: Any, kind: str, src: str, row: str | None, field: str) -> Any:
    """Convert a config value to the dataclass field's annotated ``kind`` (int, float, bool, str)."""
    if kind.startswith("bool"):
        if not isinstance(value, bool):
            raise HulkInputError(f"must be true or false, got {value!r}", source=src, row=row, field=field)
        return value
    if kind.startswith("str"):
        return str(value)
    number = _number(value, src, row, field)
    if kind.startswith("int"):
        if number != int(number):
            raise HulkInputError(f"must be an integer, got {value!r}", source=src, row=row, field=field)
        return int(number)
    return number


def _transformer_from_file(
    block: Any, name: str, in_file: dict, overrides: dict, src: str
) -> Workload:
    kinds = {f.name: str(f.type) for f in fields(TransformerConfig)}
    _check_keys(block, tuple(kinds), src, "transformer")
    twice = sorted(set(block) & set(in_file))
    if twice:
        raise HulkInputError(
            "given both inside 'transformer' and at the top level; keep one",
            source=src,
            field=twice[0],
        )
    given = {**block, **in_file, **overrides}
    given.setdefault("name", name)
    required = [f.name for f in fields(TransformerConfig) if f.default is MISSING]
    missing = [k for k in required if k not in given]
    if missing:
        raise HulkInputError(
            f"missing required key(s) {', '.join(missing)}", source=src, row="transformer", field=missing[0]
        )
    values = {
        k: (v if v is None and "None" in kinds[k] else _typed(v, kinds[k], src, "transformer", k))
        for k, v in given.items()
    }
    return build_transformer(TransformerConfig(**values))


def _layers_from_file(
    layers: Any, edges: Any, name: str, settings: dict, src: str
) -> Workload:
    if not isinstance(layers, list) or not layers:
        raise HulkInputError("must be a non-empty list of layers", source=src, field="layers")
    names: list[str] = []
    table = {label: [] for label in _LAYER_NUMBERS}
    for i, item in enumerate(layers):
        row = f"layers[{i}]"
        _check_keys(item, _LAYER_KEYS, src, row)
        if "name" not in item:
            raise HulkInputError("missing required key", source=src, row=row, field="name")
        layer_name = str(item["name"])
        if layer_name in names:
            raise HulkInputError(
                f"duplicate layer name '{layer_name}' (also layers[{names.index(layer_name)}])",
                source=src,
                row=row,
                field="name",
            )
        names.append(layer_name)
        for label, alternatives in _LAYER_NUMBERS.items():
            present = [(key, scale) for key, scale in alternatives if key in item]
            keys = " or ".join(key for key, _ in alternatives)
            if len(present) != 1:
                problem = "missing required key" if not present else "give only one of"
                raise HulkInputError(f"{problem} {keys}", source=src, row=row, field=label)
            key, scale = present[0]
            table[label].append(_number(item[key], src, row, key) * scale)
    pairs = _parse_edges(edges, names, src)
    order = _topological_order(len(names), pairs, names, src)
    rank = np.empty(len(names), dtype=np.int64)
    rank[order] = np.arange(len(names))
    workload = Workload(
        name=name,
        layer_names=tuple(names[i] for i in order),
        flops=np.array(table["flops"])[order],
        params=np.array(table["params"])[order],
        activation_bytes=np.array(table["activation_bytes"])[order],
        stash_bytes=np.array(table["stash_bytes"])[order],
        edges=rank[np.array(pairs, dtype=np.int64).reshape(-1, 2)],
        **{k: v for k, v in settings.items() if k != "layers_per_block"},
    )
    return workload.coarsen(settings.get("layers_per_block", 1))


def _parse_edges(edges: Any, names: list[str], src: str) -> list[tuple[int, int]]:
    """Edges as index pairs into ``names`` (file order); a chain in file order when omitted."""
    if edges is None:
        return [(i, i + 1) for i in range(len(names) - 1)]
    if not isinstance(edges, list):
        raise HulkInputError("must be a list of [from, to] pairs", source=src, field="edges")
    index = {n: i for i, n in enumerate(names)}
    pairs = []
    for j, edge in enumerate(edges):
        row = f"edges[{j}]"
        if not isinstance(edge, list | tuple) or len(edge) != 2:
            raise HulkInputError(f"must be a [from, to] pair, got {edge!r}", source=src, row=row, field="edges")
        ends = []
        for end in edge:
            if isinstance(end, int) and not isinstance(end, bool) and 0 <= end < len(names):
                ends.append(end)
            elif isinstance(end, str) and end in index:
                ends.append(index[end])
            else:
                close = difflib.get_close_matches(str(end), names, n=1)
                hint = f"; did you mean '{close[0]}'?" if close else ""
                raise HulkInputError(
                    f"endpoint {end!r} is not a layer name or an index 0..{len(names) - 1}{hint}",
                    source=src,
                    row=row,
                    field="edges",
                )
        pairs.append((ends[0], ends[1]))
    return pairs


def _topological_order(n: int, pairs: list[tuple[int, int]], names: list[str], src: str) -> list[int]:
    """File indices in topological order (file order among ties); cycles and islands rejected."""
    graph = nx.DiGraph()
    graph.add_nodes_from(range(n))
    graph.add_edges_from(pairs)
    if not nx.is_directed_acyclic_graph(graph):
        cycle = [u for u, _ in nx.find_cycle(graph)]
        path = " -> ".join(names[i] for i in [*cycle, cycle[0]])
        raise HulkInputError(
            f"the layer graph has a cycle {path}; remove one of its edges", source=src, field="edges"
        )
    parts = sorted(nx.weakly_connected_components(graph), key=len, reverse=True)
    if len(parts) > 1:
        island = sorted(set().union(*parts[1:]))
        shown = ", ".join(names[i] for i in island[:5]) + (", ..." if len(island) > 5 else "")
        raise HulkInputError(
            f"the layer graph is disconnected: layer(s) {shown} are not connected to "
            f"'{names[min(parts[0])]}'; add edges to join them",
            source=src,
            field="edges",
        )
    return list(nx.lexicographical_topological_sort(graph))
