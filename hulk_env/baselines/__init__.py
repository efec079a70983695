"""Placement algorithms as plain functions: ``method(instance, seed, budget) -> PlacementResult``."""

from __future__ import annotations

from collections.abc import Callable

from hulk_env.baselines.base import PlacementResult
from hulk_env.baselines.naive import naive
from hulk_env.errors import HulkInputError
from hulk_env.instance import Instance

Method = Callable[[Instance, int, "int | None"], PlacementResult]

METHODS: dict[str, Method] = {
    "naive": naive,
}


def method_names() -> list[str]:
    """Registered method names."""
    return list(METHODS)


def get_method(name: str) -> Method:
    """The method registered as ``name``; an unknown name is a clear error."""
    try:
        return METHODS[name]
    except KeyError:
        raise HulkInputError(
            f"unknown method '{name}'; choose from {', '.join(METHODS)}", field="method"
        ) from None


__all__ = ["METHODS", "PlacementResult", "get_method", "method_names"]
