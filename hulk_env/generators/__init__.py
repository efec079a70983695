"""Instance generators: where :class:`hulk_env.env.PlacementEnv` gets its problems (Jumanji style).

A generator is an object with ``__call__(np_random) -> Instance`` plus three bounds the env pads
its observation to: ``max_machines``, ``max_slots`` (replicas x layers, ``D * L``) and
``max_edges`` (layer-graph edges of all replicas). All randomness comes from the ``np_random``
passed in (the env's ``self.np_random``): same seed, same instance.

* :class:`RandomGeoGenerator` (:mod:`.random_geo`): clusters over real cities (the city table
  of :mod:`hulk_env.hardware.geo`, GPUs drawn from a mix, link noise) and GPT-style transformer
  workloads of random size and training settings;
* :class:`ToyGenerator` (:mod:`.toy`): tiny instances (2-4 machines, 2-5 layers, ``D`` in
  {1, 2}) whose optimum :func:`exhaustive_optimum` (:mod:`.enumerate`) finds by enumerating
  every placement;
* :class:`FixedGenerator` (:mod:`.fixed`): one cluster and one model, named or loaded from files;
* :class:`InstanceListGenerator` (:mod:`.instance_list`): a uniform draw from given instances
  (e.g. a benchmark suite).

Every generated instance is feasible: the naive placement (the env's reference,
:mod:`hulk_env.reference`) fits in memory. Random and toy generators draw one integer ``key``
from ``np_random`` and build the instance from it alone, so ``instance_id``
(``"random-geo/<key>"``) names it reproducibly: ``generator.instance(key)`` rebuilds it.

:func:`make_generator` (:mod:`.registry`) builds any of them from a name and plain keyword
values (what RL Zoo's ``--env-kwargs`` and YAML configs can hold). A new generator: a module
here with a frozen dataclass that has the three bounds and ``__call__``, registered in
:data:`GENERATORS` if it should be reachable by name.
"""

from hulk_env.feasibility import instance_edges
from hulk_env.generators.base import KEY_RANGE, InstanceGenerator, is_feasible, naive_fits_memory
from hulk_env.generators.enumerate import (
    MAX_EXHAUSTIVE_PLACEMENTS,
    enumerate_placements,
    exhaustive_optimum,
    exhaustive_search,
    num_placements,
)
from hulk_env.generators.fixed import FixedGenerator, fixed_instance
from hulk_env.generators.instance_list import InstanceListGenerator
from hulk_env.generators.random_geo import DEFAULT_GPU_MIX, RandomGeoGenerator
from hulk_env.generators.registry import GENERATORS, make_generator
from hulk_env.generators.toy import ToyGenerator

__all__ = [
    "DEFAULT_GPU_MIX",
    "GENERATORS",
    "KEY_RANGE",
    "MAX_EXHAUSTIVE_PLACEMENTS",
    "FixedGenerator",
    "InstanceGenerator",
    "InstanceListGenerator",
    "RandomGeoGenerator",
    "ToyGenerator",
    "enumerate_placements",
    "exhaustive_optimum",
    "exhaustive_search",
    "fixed_instance",
    "instance_edges",
    "is_feasible",
    "naive_fits_memory",
    "make_generator",
    "num_placements",
]
