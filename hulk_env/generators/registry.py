"""Generators by name, from plain keyword values (what YAML configs and ``--env-kwargs`` hold)."""

from __future__ import annotations

import difflib
from dataclasses import fields

from hulk_env.errors import HulkInputError
from hulk_env.generators.base import InstanceGenerator
from hulk_env.generators.fixed import FixedGenerator
from hulk_env.generators.random_geo import RandomGeoGenerator
from hulk_env.generators.toy import ToyGenerator

GENERATORS: dict[str, type] = {
    "random": RandomGeoGenerator,
    "toy": ToyGenerator,
    "fixed": FixedGenerator,
}


def make_generator(name: str, **kwargs: object) -> InstanceGenerator:
    """A generator by name (``"random"``, ``"toy"``, ``"fixed"``) from plain keyword values.

    Lists (from YAML/JSON) are accepted where tuples are expected. An unknown keyword is a
    :class:`HulkInputError` naming the valid ones.
    """
    if name not in GENERATORS:
        close = difflib.get_close_matches(str(name), GENERATORS, n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise HulkInputError(f"unknown generator '{name}'; {hint}choose one of {', '.join(GENERATORS)}", field="generator")
    cls = GENERATORS[name]
    allowed = [f.name for f in fields(cls) if f.init]
    for key in kwargs:
        if key not in allowed:
            close = difflib.get_close_matches(key, allowed, n=1)
            hint = f"did you mean '{close[0]}'?" if close else f"valid: {', '.join(allowed)}"
            raise HulkInputError(f"unknown argument of the '{name}' generator; {hint}", field=key)
    plain = {k: (tuple(tuple(x) if isinstance(x, list) else x for x in v) if isinstance(v, list) else v) for k, v in kwargs.items()}
    return cls(**plain)
