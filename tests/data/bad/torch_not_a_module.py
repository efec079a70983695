"""A factory that returns a state dict instead of a module."""

from torch import nn


def build():
    return nn.Linear(4, 4).state_dict()
