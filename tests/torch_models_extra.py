"""More real PyTorch models for the ``hulk import torch`` tests, as MODULE:FACTORY.

* :func:`vit` -- a Vision Transformer: conv patch embedding, class token and positions as root
  parameters, pre-norm encoder blocks, classification head; float images in;
* :func:`unet` -- a U-Net whose single parameter-free ``nn.MaxPool2d`` is called three times,
  with skip connections concatenated in the top-level forward;
* :func:`moe_dense` -- a decoder whose FFNs are mixtures of experts in dense-dispatch form
  (top-k gates scattered into a token x expert matrix, every expert run on every token);
* :func:`moe_indexed` -- the same block routing tokens by index (``torch.nonzero``), which no
  trace on meta tensors can follow.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class PatchEmbed(nn.Module):
    def __init__(self, channels: int, hidden: int, patch: int):
        super().__init__()
        self.proj = nn.Conv2d(channels, hidden, patch, patch)

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2)


class SelfAttention(nn.Module):
    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.out = nn.Linear(hidden, hidden)

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        probs = F.softmax(q @ k.transpose(-2, -1) / math.sqrt(h // self.heads), dim=-1)
        return self.out((probs @ v).transpose(1, 2).reshape(b, s, h))


class EncoderBlock(nn.Module):
    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.attn = SelfAttention(hidden, heads)
        self.mlp = nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.GELU(), nn.Linear(4 * hidden, hidden))

    def forward(self, x):
        x = x + self.attn(self.n1(x))
        return x + self.mlp(self.n2(x))


class ViT(nn.Module):
    def __init__(self, image=32, patch=8, channels=3, hidden=64, heads=4, layers=3, classes=10):
        super().__init__()
        self.patch = PatchEmbed(channels, hidden, patch)
        tokens = (image // patch) ** 2 + 1
        self.cls = nn.Parameter(torch.zeros(1, 1, hidden))
        self.pos = nn.Parameter(torch.zeros(1, tokens, hidden))
        self.blocks = nn.ModuleList(EncoderBlock(hidden, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, classes)

    def forward(self, images):
        x = self.patch(images)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x)[:, 0])


def vit() -> ViT:
    return ViT()


class ConvBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(c_in, c_out, 3, padding=1), nn.BatchNorm2d(c_out), nn.ReLU(),
            nn.Conv2d(c_out, c_out, 3, padding=1), nn.BatchNorm2d(c_out), nn.ReLU(),
        )  # fmt: skip

    def forward(self, x):
        return self.body(x)


class UNet(nn.Module):
    def __init__(self, channels=3, width=8, classes=2):
        super().__init__()
        w = width
        self.enc1, self.enc2, self.enc3 = ConvBlock(channels, w), ConvBlock(w, 2 * w), ConvBlock(2 * w, 4 * w)
        self.pool = nn.MaxPool2d(2)  # one module, called after each encoder stage
        self.bottom = ConvBlock(4 * w, 8 * w)
        self.up3, self.dec3 = nn.ConvTranspose2d(8 * w, 4 * w, 2, 2), ConvBlock(8 * w, 4 * w)
        self.up2, self.dec2 = nn.ConvTranspose2d(4 * w, 2 * w, 2, 2), ConvBlock(4 * w, 2 * w)
        self.up1, self.dec1 = nn.ConvTranspose2d(2 * w, w, 2, 2), ConvBlock(2 * w, w)
        self.out = nn.Conv2d(w, classes, 1)

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(self.pool(e1))
        e3 = self.enc3(self.pool(e2))
        y = self.bottom(self.pool(e3))
        y = self.dec3(torch.cat([self.up3(y), e3], dim=1))
        y = self.dec2(torch.cat([self.up2(y), e2], dim=1))
        y = self.dec1(torch.cat([self.up1(y), e1], dim=1))
        return self.out(y)


def unet() -> UNet:
    return UNet()


class Expert(nn.Module):
    def __init__(self, hidden: int, ffn: int):
        super().__init__()
        self.up, self.down = nn.Linear(hidden, ffn, bias=False), nn.Linear(ffn, hidden, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.up(x)))


class DenseMoE(nn.Module):
    """Top-k routing in dense-dispatch form: gates ``[tokens, E]`` (zero off the top k) weight
    every expert's output on every token."""

    def __init__(self, hidden: int, ffn: int, experts: int, top_k: int):
        super().__init__()
        self.top_k = top_k
        self.router = nn.Linear(hidden, experts, bias=False)
        self.experts = nn.ModuleList(Expert(hidden, ffn) for _ in range(experts))

    def forward(self, x):
        probs = F.softmax(self.router(x), dim=-1)
        top, idx = probs.topk(self.top_k, dim=-1)
        gates = torch.zeros_like(probs).scatter(-1, idx, top)
        outs = torch.stack([expert(x) for expert in self.experts], dim=-2)  # [b, s, E, h]
        return (gates.unsqueeze(-1) * outs).sum(dim=-2)


class IndexedMoE(DenseMoE):
    """The same routing by index: each expert runs on the tokens ``torch.nonzero`` finds."""

    def forward(self, x):
        flat = x.reshape(-1, x.shape[-1])
        probs = F.softmax(self.router(flat), dim=-1)
        top, idx = probs.topk(self.top_k, dim=-1)
        out = torch.zeros_like(flat)
        for e, expert in enumerate(self.experts):
            rows, slot = torch.nonzero(idx == e, as_tuple=True)
            out[rows] += top[rows, slot, None] * expert(flat[rows])
        return out.view_as(x)


class MoEBlock(nn.Module):
    def __init__(self, hidden: int, heads: int, moe: nn.Module):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.attn = SelfAttention(hidden, heads)
        self.moe = moe

    def forward(self, x):
        x = x + self.attn(self.n1(x))
        return x + self.moe(self.n2(x))


class MoEDecoder(nn.Module):
    def __init__(self, moe_cls, vocab=500, hidden=64, heads=4, layers=2, experts=4, top_k=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.blocks = nn.ModuleList(
            MoEBlock(hidden, heads, moe_cls(hidden, 2 * hidden, experts, top_k)) for _ in range(layers)
        )
        self.head = nn.Linear(hidden, vocab, bias=False)

    def forward(self, idx):
        x = self.embed(idx)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def moe_dense() -> MoEDecoder:
    return MoEDecoder(DenseMoE)


def moe_indexed() -> MoEDecoder:
    return MoEDecoder(IndexedMoE)
