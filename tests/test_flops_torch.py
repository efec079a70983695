"""The builder's per-layer FLOPs and params against PyTorch's own FLOP counter.

Each check builds a small PyTorch module equivalent to one layer of the builder (a GPT block, a
LLaMA-style gated block, a T5 decoder block with cross-attention, the LM head), counts its
forward FLOPs with ``torch.utils.flop_counter.FlopCounterMode`` and its parameters with
``numel``, and compares. Attention runs through ``scaled_dot_product_attention`` on the MATH
backend: on CPU the fused kernel is not in the counter's registry and would count 0 FLOPs.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from hulk_env.workload import TransformerConfig, build_transformer, transformer_block  # noqa: E402

B, S, H, A, V = 2, 48, 64, 4, 211


class Attention(nn.Module):
    def __init__(self, h: int, heads: int, head_dim: int, bias: bool) -> None:
        super().__init__()
        self.heads, self.d = heads, heads * head_dim
        self.q = nn.Linear(h, self.d, bias=bias)
        self.kv = nn.Linear(h, 2 * self.d, bias=bias)
        self.out = nn.Linear(self.d, h, bias=bias)

    def forward(self, x, memory=None, causal=True):
        memory = x if memory is None else memory
        b, sq, sk = x.shape[0], x.shape[1], memory.shape[1]
        q = self.q(x).view(b, sq, self.heads, -1).transpose(1, 2)
        k, v = self.kv(memory).view(b, sk, 2, self.heads, -1).permute(2, 0, 3, 1, 4)
        with sdpa_kernel(SDPBackend.MATH):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return self.out(y.transpose(1, 2).reshape(b, sq, self.d))


class FFN(nn.Module):
    def __init__(self, h: int, f: int, gated: bool, bias: bool) -> None:
        super().__init__()
        self.gated = gated
        self.up = nn.Linear(h, f, bias=bias)
        self.gate = nn.Linear(h, f, bias=bias) if gated else None
        self.down = nn.Linear(f, h, bias=bias)

    def forward(self, x):
        if self.gated:
            return self.down(F.silu(self.gate(x)) * self.up(x))
        return self.down(F.gelu(self.up(x)))


def make_norm(cfg: TransformerConfig) -> nn.Module:
    return nn.LayerNorm(cfg.hidden) if cfg.norm == "layernorm" else nn.RMSNorm(cfg.hidden)


class Block(nn.Module):
    """Pre-norm transformer block; ``cross`` adds cross-attention on an encoder output."""

    def __init__(self, cfg: TransformerConfig, cross: bool = False) -> None:
        super().__init__()
        hd = cfg.attn_dim // cfg.heads
        self.norm1, self.norm2 = make_norm(cfg), make_norm(cfg)
        self.attn = Attention(cfg.hidden, cfg.heads, hd, cfg.biases)
        self.ffn = FFN(cfg.hidden, cfg.ffn_dim, cfg.gated_ffn, cfg.biases)
        if cross:
            self.norm3 = make_norm(cfg)
            self.cross = Attention(cfg.hidden, cfg.heads, hd, cfg.biases)

    def forward(self, x, memory=None):
        x = x + self.attn(self.norm1(x))
        if memory is not None:
            x = x + self.cross(self.norm3(x), memory, causal=False)
        return x + self.ffn(self.norm2(x))


def count(module: nn.Module, *inputs) -> tuple[int, int]:
    """(forward FLOPs, parameters) of ``module`` on ``inputs``."""
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        module(*inputs)
    return counter.get_total_flops(), sum(p.numel() for p in module.parameters())


GPT = TransformerConfig(name="gpt", num_layers=2, hidden=H, heads=A, vocab=V, seq_len=S,
                        micro_batch_size=B, max_positions=S)
LLAMA = TransformerConfig(name="llama", num_layers=2, hidden=H, heads=A, vocab=V, seq_len=S,
                          micro_batch_size=B, ffn=172, gated_ffn=True, biases=False,
                          norm="rmsnorm", tied_embeddings=False)
T5 = TransformerConfig(name="t5", architecture="encoder-decoder", num_layers=2,
                       num_decoder_layers=2, hidden=H, heads=A, head_dim=32, ffn=512, vocab=V,
                       seq_len=S, decoder_seq_len=20, micro_batch_size=B, biases=False,
                       norm="rmsnorm")


@pytest.mark.parametrize("cfg", [GPT, LLAMA, T5], ids=lambda c: c.name)
def test_self_attention_block(cfg):
    torch.manual_seed(0)
    flops, params = count(Block(cfg), torch.randn(B, S, H))
    block = transformer_block(cfg, "self")
    assert block.flops == pytest.approx(flops, rel=0.02)
    assert block.params == params


def test_cross_attention_decoder_block():
    torch.manual_seed(0)
    x, memory = torch.randn(B, T5.target_seq_len, H), torch.randn(B, S, H)
    flops, params = count(Block(T5, cross=True), x, memory)
    block = transformer_block(T5, "cross")
    assert block.flops == pytest.approx(flops, rel=0.02)
    assert block.params == params


@pytest.mark.parametrize("cfg", [GPT, LLAMA], ids=lambda c: c.name)
def test_lm_head(cfg):
    head = nn.Sequential(make_norm(cfg), nn.Linear(H, V, bias=False))
    flops, params = count(head, torch.randn(B, S, H))
    w = build_transformer(cfg)
    assert w.flops[-1] == pytest.approx(flops, rel=0.02)
    # A tied head's matrix is counted on the embedding, so the head layer holds only its norm.
    assert w.params[-1] == params - (V * H if cfg.tied_embeddings else 0)
    embedding = nn.Embedding(V, H)
    assert count(embedding, torch.zeros(B, S, dtype=torch.long))[0] == w.flops[0] == 0
