"""The search representation shared by ``genetic`` and ``anneal``: stages on machines.

A genome is ``(machines[D, S], cuts[D, S - 1])``: replica ``r``'s stage ``s`` runs on machine
``machines[r, s]`` and holds layers ``cuts[r, s - 1] .. cuts[r, s] - 1`` (with ``cuts[r, -1] = 0``
and ``cuts[r, S - 1] = L``). Cuts are non-decreasing, so a stage may be empty: moving a cut
changes the pipeline depth. Columns of ``machines`` are the data-parallel groups of Yuan et al.
(2022) (the machines holding the same stage across replicas), rows are the pipelines. Machines
may repeat (replicas that share machines). Every placement of contiguous runs is a genome
(:func:`encode`), and :func:`decode` gives the ``[D, L]`` placement back.

The moves (each returns a new genome; ``rng`` drives every choice):

- :func:`swap_machines`: exchange the machines of two stages (any replicas);
- :func:`reassign_stage`: move one stage to a machine the genome does not use (any machine when
  all are used), preferring machines close in latency to the stage's pipeline neighbours;
- :func:`shift_cut`: move one stage boundary of one replica, or of all replicas at once (which
  keeps the data-parallel groups aligned), by a few layers;
- :func:`split_stage`: cut one stage in two (in every replica), the new half on unused machines
  close to the old one: the only move that makes pipelines deeper.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from hulk_env.instance import Instance


class Genome(NamedTuple):
    """Stages on machines; see the module docstring."""

    machines: np.ndarray  # [D, S] int64
    cuts: np.ndarray  # [D, S - 1] int64, non-decreasing in 0..L

    @property
    def num_stages(self) -> int:
        return self.machines.shape[1]

    def key(self) -> bytes:
        return self.machines.tobytes() + b"|" + self.cuts.tobytes()


def decode(genome: Genome, num_layers: int) -> np.ndarray:
    """``[D, L]`` machine of each layer of each replica."""
    layers = np.arange(num_layers)
    stage = (genome.cuts[:, :, None] <= layers[None, None, :]).sum(axis=1)  # [D, L]
    return np.take_along_axis(genome.machines, stage, axis=1)


def encode(placement: np.ndarray, num_machines: int) -> Genome:
    """The genome of a placement: each run of one machine along a replica is a stage.

    Replicas with fewer runs get empty stages at the end, on machines the placement does not
    use when there are any (so a later cut move can bring a new machine in).
    """
    placement = np.asarray(placement, dtype=np.int64)
    d, n = placement.shape
    runs = []
    for r in range(d):
        starts = np.flatnonzero(np.concatenate([[True], placement[r, 1:] != placement[r, :-1]]))
        runs.append((placement[r, starts], starts[1:]))
    s = max(len(m) for m, _ in runs)
    spare = [x for x in range(num_machines) if x not in set(placement.ravel().tolist())]
    machines = np.empty((d, s), dtype=np.int64)
    cuts = np.full((d, s - 1), n, dtype=np.int64)
    for r, (mach, starts) in enumerate(runs):
        machines[r, : len(mach)] = mach
        cuts[r, : len(starts)] = starts
        for j in range(len(mach), s):
            machines[r, j] = spare.pop(0) if spare else mach[-1]
    return Genome(machines, cuts)


def swap_machines(genome: Genome, rng: np.random.Generator) -> Genome:
    """Exchange the machines of two different stages."""
    flat = genome.machines.ravel().copy()
    if len(flat) < 2:
        return genome
    i, j = rng.choice(len(flat), size=2, replace=False)
    flat[i], flat[j] = flat[j], flat[i]
    return Genome(flat.reshape(genome.machines.shape), genome.cuts)


def reassign_stage(genome: Genome, rng: np.random.Generator, instance: Instance) -> Genome:
    """Move one stage to another machine, an unused one if any, nearer ones more likely."""
    d, s = genome.machines.shape
    m = instance.num_machines
    if m < 2:
        return genome
    r, j = int(rng.integers(d)), int(rng.integers(s))
    current = int(genome.machines[r, j])
    used = np.zeros(m, dtype=bool)
    used[genome.machines.ravel()] = True
    pool = np.flatnonzero(~used)
    if len(pool) == 0:
        pool = np.flatnonzero(np.arange(m) != current)
    # Closeness to the stage's pipeline neighbours (or to the stage itself at the ends).
    anchors = [int(genome.machines[r, k]) for k in (j - 1, j + 1) if 0 <= k < s] or [current]
    dist = instance.cluster.latency_s[np.ix_(anchors, pool)].mean(axis=0)
    scale = max(float(np.median(dist)), 1e-6)
    weight = np.exp(-dist / scale)
    choice = int(rng.choice(pool, p=weight / weight.sum()))
    machines = genome.machines.copy()
    machines[r, j] = choice
    return Genome(machines, genome.cuts)


def shift_cut(genome: Genome, rng: np.random.Generator, num_layers: int) -> Genome:
    """Move one stage boundary (of one replica, or of all of them) by a few layers."""
    d, s = genome.machines.shape
    if s < 2:
        return genome
    c = int(rng.integers(s - 1))
    # Mostly one or two layers; sometimes a long jump (up to a quarter of the model).
    size = int(rng.geometric(0.5)) if rng.random() < 0.8 else int(rng.integers(1, num_layers // 4 + 2))
    step = size if rng.random() < 0.5 else -size
    rows = np.arange(d) if rng.random() < 0.5 else np.array([int(rng.integers(d))])
    cuts = genome.cuts.copy()
    for r in rows:
        low = cuts[r, c - 1] if c > 0 else 0
        high = cuts[r, c + 1] if c + 1 < s - 1 else num_layers
        cuts[r, c] = int(np.clip(cuts[r, c] + step, low, high))
    return Genome(genome.machines, cuts)


def split_stage(genome: Genome, rng: np.random.Generator, instance: Instance) -> Genome:
    """Cut stage ``j`` in two in every replica; the second half goes to the nearest unused machine.

    Replicas whose stage ``j`` holds fewer than two layers get an empty new stage. With no
    unused machine left the genome is returned unchanged.
    """
    d, s = genome.machines.shape
    m = instance.num_machines
    used = np.zeros(m, dtype=bool)
    used[genome.machines.ravel()] = True
    if (~used).sum() < d:
        return genome
    j = int(rng.integers(s))
    bounds = np.concatenate([np.zeros((d, 1), np.int64), genome.cuts, np.full((d, 1), instance.num_layers)], axis=1)
    low, high = bounds[:, j], bounds[:, j + 1]
    # A random point inside each replica's stage (the stage stays whole when it has one layer).
    middle = low + np.ceil((high - low) * rng.uniform(0.25, 0.75)).astype(np.int64)
    middle = np.where(high - low >= 2, np.clip(middle, low + 1, high - 1), high)
    new = np.empty(d, dtype=np.int64)
    for r in range(d):
        pool = np.flatnonzero(~used)
        here = int(genome.machines[r, j])
        new[r] = pool[np.argmin(instance.cluster.latency_s[here, pool] - 1e-9 * instance.cluster.flops[pool])]
        used[new[r]] = True
    machines = np.insert(genome.machines, j + 1, new, axis=1)
    cuts = np.insert(genome.cuts, j, middle, axis=1)
    return Genome(machines, cuts)


def mutate(genome: Genome, rng: np.random.Generator, instance: Instance, moves: int = 1) -> Genome:
    """Apply ``moves`` random moves: swap, reassign and shift equally likely, split rarer."""
    for _ in range(moves):
        kind = int(rng.choice(4, p=[0.3, 0.3, 0.3, 0.1]))
        if kind == 0:
            genome = swap_machines(genome, rng)
        elif kind == 1:
            genome = reassign_stage(genome, rng, instance)
        elif kind == 2:
            genome = shift_cut(genome, rng, instance.num_layers)
        else:
            genome = split_stage(genome, rng, instance)
    return genome


def crossover(a: Genome, b: Genome, rng: np.random.Generator) -> Genome:
    """A child of two genomes with the same shape.

    Data-parallel groups (columns) come from either parent (each column by a coin flip), then
    machines the child now holds more often than either parent did are replaced by machines of
    the parents that it lost (a PMX-style repair, so distinct machines stay distinct); each
    replica's cuts come from either parent.
    """
    d, s = a.machines.shape
    take_a = rng.random(s) < 0.5
    child = np.where(take_a[None, :], a.machines, b.machines)
    m = int(max(a.machines.max(), b.machines.max())) + 1
    limit = np.maximum(np.bincount(a.machines.ravel(), minlength=m), np.bincount(b.machines.ravel(), minlength=m))
    count = np.bincount(child.ravel(), minlength=m)
    lost = [x for x in np.concatenate([a.machines.ravel(), b.machines.ravel()]) if count[x] == 0]
    lost = list(dict.fromkeys(int(x) for x in lost))
    flat = child.ravel()
    seen = np.zeros(m, dtype=np.int64)
    for i, x in enumerate(flat):
        seen[x] += 1
        if seen[x] > limit[x] and lost:
            flat[i] = lost.pop(0)
    cut_rows = rng.random(d) < 0.5
    cuts = np.where(cut_rows[:, None], a.cuts, b.cuts)
    return Genome(flat.reshape(d, s), cuts)
