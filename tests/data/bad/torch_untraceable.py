"""A module whose top-level forward branches on data: torch.fx cannot trace it."""

from torch import nn


class Gated(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(100, 16)
        self.a = nn.Linear(16, 16)
        self.b = nn.Linear(16, 16)

    def forward(self, idx):
        x = self.embed(idx)
        if x.sum() > 0:  # data-dependent control flow at the top level
            return self.a(x)
        return self.b(x)


def build():
    return Gated()
