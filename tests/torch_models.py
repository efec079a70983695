"""Small real PyTorch models for the ``hulk import torch`` tests (imported as MODULE:FACTORY).

* :func:`gpt_gqa` -- a GPT-style decoder with grouped-query attention (8 query heads sharing 2
  key/value heads), learned positions, tied LM head, written Megatron-style (explicit
  softmax, dropout on the attention probabilities and after each residual branch) so that its
  saved activations follow Korthikanti et al. 2022 term by term;
* :func:`encoder_decoder` -- a T5-shaped encoder-decoder with cross-attention, two inputs;
* :func:`resnet` -- a ResNet-style CNN (basic blocks with projection shortcuts).

Their shapes are module constants so the tests can compare with the transformer builder.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

GPT_SHAPE = dict(layers=4, hidden=128, heads=8, kv_heads=2, vocab=1000, positions=64, dropout=0.1)
ENC_DEC_SHAPE = dict(enc_layers=2, dec_layers=3, hidden=96, heads=4, vocab=500, ffn=256)
RESNET_SHAPE = dict(widths=(16, 32, 64), blocks_per_stage=2, classes=10)


class Attention(nn.Module):
    """Multi-head attention with ``kv_heads`` key/value heads (``kv_heads == heads``: MHA)."""

    def __init__(self, hidden: int, heads: int, kv_heads: int, dropout: float, bias: bool = True):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, hidden // heads
        self.q = nn.Linear(hidden, hidden, bias=bias)
        self.kv = nn.Linear(hidden, 2 * kv_heads * self.head_dim, bias=bias)
        self.out = nn.Linear(hidden, hidden, bias=bias)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, memory=None, causal: bool = True):
        b, s_q, h = x.shape
        src = x if memory is None else memory
        s_k = src.shape[1]
        group = self.heads // self.kv_heads
        # The query heads of one key/value head are stacked along the sequence, so K and V
        # are used (and saved) at their own size, as grouped-query kernels do.
        q = self.q(x).view(b, s_q, self.kv_heads, group, self.head_dim)
        q = q.permute(0, 2, 3, 1, 4).reshape(b, self.kv_heads, group * s_q, self.head_dim)
        k, v = self.kv(src).view(b, s_k, 2, self.kv_heads, self.head_dim).unbind(2)
        k, v = k.transpose(1, 2), v.transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        if causal and memory is None:
            mask = torch.ones(s_q, s_k, dtype=torch.bool, device=x.device).triu(1)
            scores = scores.masked_fill(mask.repeat(group, 1), float("-inf"))
        probs = self.drop(F.softmax(scores, dim=-1))
        y = (probs @ v).view(b, self.kv_heads, group, s_q, self.head_dim)
        return self.out(y.permute(0, 3, 1, 2, 4).reshape(b, s_q, h))


class MLP(nn.Module):
    def __init__(self, hidden: int, ffn: int, bias: bool = True):
        super().__init__()
        self.up = nn.Linear(hidden, ffn, bias=bias)
        self.down = nn.Linear(ffn, hidden, bias=bias)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


class DecoderBlock(nn.Module):
    """Pre-norm block: ``x + drop(attn(ln(x)))``, then ``x + drop(mlp(ln(x)))``."""

    def __init__(self, hidden: int, heads: int, kv_heads: int, dropout: float):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.attn = Attention(hidden, heads, kv_heads, dropout)
        self.mlp = MLP(hidden, 4 * hidden)
        self.drop1, self.drop2 = nn.Dropout(dropout), nn.Dropout(dropout)

    def forward(self, x):
        x = x + self.drop1(self.attn(self.ln1(x)))
        return x + self.drop2(self.mlp(self.ln2(x)))


class Embedding(nn.Module):
    def __init__(self, vocab: int, hidden: int, positions: int, dropout: float):
        super().__init__()
        self.tok = nn.Embedding(vocab, hidden)
        self.pos = nn.Embedding(positions, hidden)
        self.drop = nn.Dropout(dropout)

    def forward(self, idx):
        positions = torch.arange(idx.shape[1], device=idx.device)
        return self.drop(self.tok(idx) + self.pos(positions))


class Head(nn.Module):
    def __init__(self, hidden: int, vocab: int):
        super().__init__()
        self.ln = nn.LayerNorm(hidden)
        self.proj = nn.Linear(hidden, vocab, bias=False)

    def forward(self, x):
        return self.proj(self.ln(x))


class GPT(nn.Module):
    def __init__(self, layers, hidden, heads, kv_heads, vocab, positions, dropout):
        super().__init__()
        self.embed = Embedding(vocab, hidden, positions, dropout)
        self.blocks = nn.ModuleList(
            DecoderBlock(hidden, heads, kv_heads, dropout) for _ in range(layers)
        )
        self.head = Head(hidden, vocab)
        self.head.proj.weight = self.embed.tok.weight  # tied

    def forward(self, idx):
        x = self.embed(idx)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def gpt_gqa() -> GPT:
    return GPT(**GPT_SHAPE)


class CrossBlock(nn.Module):
    """Decoder block of an encoder-decoder: causal self-attention, cross-attention, FFN."""

    def __init__(self, hidden: int, heads: int, ffn: int):
        super().__init__()
        self.n1, self.n2, self.n3 = nn.LayerNorm(hidden), nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.self_attn = Attention(hidden, heads, heads, 0.0, bias=False)
        self.cross = Attention(hidden, heads, heads, 0.0, bias=False)
        self.mlp = MLP(hidden, ffn, bias=False)

    def forward(self, x, memory):
        x = x + self.self_attn(self.n1(x))
        x = x + self.cross(self.n2(x), memory=memory)
        return x + self.mlp(self.n3(x))


class EncoderBlock(nn.Module):
    def __init__(self, hidden: int, heads: int, ffn: int):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.attn = Attention(hidden, heads, heads, 0.0, bias=False)
        self.mlp = MLP(hidden, ffn, bias=False)

    def forward(self, x):
        x = x + self.attn(self.n1(x), causal=False)
        return x + self.mlp(self.n2(x))


class EncoderDecoder(nn.Module):
    def __init__(self, enc_layers, dec_layers, hidden, heads, vocab, ffn):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.encoder = nn.ModuleList(EncoderBlock(hidden, heads, ffn) for _ in range(enc_layers))
        self.enc_norm = nn.LayerNorm(hidden)
        self.decoder = nn.ModuleList(CrossBlock(hidden, heads, ffn) for _ in range(dec_layers))
        self.head = Head(hidden, vocab)

    def forward(self, src, tgt):
        memory = self.embed(src)
        for layer in self.encoder:
            memory = layer(memory)
        memory = self.enc_norm(memory)
        y = self.embed(tgt)  # the shared embedding runs again, on the decoder's tokens
        for layer in self.decoder:
            y = layer(y, memory)
        return self.head(y)


def encoder_decoder() -> EncoderDecoder:
    return EncoderDecoder(**ENC_DEC_SHAPE)


class BasicBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.short = (
            nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))
            if stride != 1 or c_in != c_out
            else nn.Identity()
        )

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(y)) + self.short(x))


class Stem(nn.Module):
    def __init__(self, c_out: int):
        super().__init__()
        self.conv = nn.Conv2d(3, c_out, 3, 1, 1, bias=False)
        self.bn = nn.BatchNorm2d(c_out)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))


class ResNet(nn.Module):
    def __init__(self, widths, blocks_per_stage, classes):
        super().__init__()
        self.stem = Stem(widths[0])
        stages, c_in = [], widths[0]
        for i, width in enumerate(widths):
            for j in range(blocks_per_stage):
                stages.append(BasicBlock(c_in, width, 2 if (i > 0 and j == 0) else 1))
                c_in = width
        self.stages = nn.Sequential(*stages)
        self.fc = nn.Linear(c_in, classes)

    def forward(self, x):
        x = self.stages(self.stem(x))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)  # root-level ops: join the last stage
        return self.fc(x)


def resnet() -> ResNet:
    return ResNet(**RESNET_SHAPE)
