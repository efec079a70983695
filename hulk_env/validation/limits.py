"""Every size and magnitude limit on user input, in one place, with the reason for each.

Loaders check these before they allocate anything that grows with the input (a machine list,
``M x M`` link matrices, a layer table), so a small file that asks for a huge object is one
clear line, never an out-of-memory or a hang. Numbers are bounded so that every product the
cost model forms (FLOPs x micro-batches x replicas / FLOP/s, bytes / bandwidth, memory x stash)
stays finite in float64: the largest such product over these limits is about ``1e40``, far
below the float64 maximum ``1.8e308``, so no iteration time can come out as ``inf`` or ``nan``.

:data:`LIMITS` lists them all (name, value, why) for documentation and error messages; the
constants below are what code imports. Raise a limit here, with its reason, and every loader
follows.
"""

from __future__ import annotations

from typing import NamedTuple

KIB = 1024
MIB = 1024 * KIB

# ---- files -------------------------------------------------------------------------------------

# YAML/JSON files (cluster, workload, config, policy.json) become Python objects of ~50-100x
# their size; 16 MiB caps that near 1.5 GB. A 4,096-machine cluster file with one line per
# machine is ~0.5 MB and a 1,024-layer explicit model ~0.1 MB, so real files sit far below.
MAX_MAPPING_FILE_BYTES = 16 * MIB
# Line-oriented text (the paper's node_feature.csv and edge.txt) is streamed row by row: every
# pair of 2,048 machines (2.1 million `u v rtt` lines) is ~35 MB.
MAX_TEXT_FILE_BYTES = 64 * MIB
# policy.json and config files are a few KB; 1 MiB is generous.
MAX_SMALL_FILE_BYTES = 1 * MIB
# A policy's weights.pt: the default network is ~100 KB; the widest a policy.json may describe
# (MAX_HIDDEN_DIM, MAX_ROUNDS) is far larger, and 1 GiB is what loading may cost at most.
MAX_WEIGHTS_BYTES = 1024 * MIB
# Our formats nest at most 4 deep (top level -> machines -> one machine -> value; edges ->
# pair -> end). 32 allows any sane layout and keeps every reader far from Python's recursion
# limit (1,000), where parsers raise RecursionError or overflow the C stack.
MAX_NESTING_DEPTH = 32
# YAML values after expanding every alias (an alias counts as the whole node it names). A
# 16 MiB file of plain values holds at most ~2 million; more means aliases multiply (a
# "billion laughs" bomb), which is refused before anything is expanded.
MAX_YAML_NODES = 2_000_000
# One scalar (a name, a description, a number written out): longer is not a value a person
# wrote, and an integer of more than 4,300 digits is refused by Python itself.
MAX_SCALAR_CHARS = 10_000
# Names are printed in tables, plots and error lines.
MAX_NAME_CHARS = 200

# ---- the newer readers (placements, traces, HF configs, results) ----------------------

# A Hugging Face config.json is a few KB (the largest in the hub are ~50 KB with id2label maps).
MAX_HF_CONFIG_BYTES = 1 * MIB
# A results.csv holds one row per (instance, method): 1,000 instances x 100 methods, 8 MiB
# at ~80 bytes a row. A resume reads it whole.
MAX_CSV_ROWS = 100_000
# Cells per results row: 12 today; a few hundred is any sane table.
MAX_CSV_COLUMNS = 256
# Events of a failure trace (file or random): each may trigger a re-placement decision.
MAX_TRACE_EVENTS = 100_000
# Event times of a trace file: 10^12 s is 31,700 years, and keeps float time resolving
# milliseconds (ulp(1e12) = 1.2e-4 s).
MAX_TRACE_TIME_S = 1e12
# Iterations of a simulated run: 10^10 is decades of training at 0.1 s an iteration, and
# keeps every iteration count exact in float64 and far from the float time resolution.
MAX_TRAIN_ITERATIONS = 10**10
# Float time must resolve a random trace's events: the mean time between one machine's
# failures must span at least this many float64 steps (ulps) of the trace's end time, or
# events and repairs would round onto the same instant (a 1e20/h rate did).
MIN_EVENT_GAP_ULPS = 2**20
# A child process importing a PyTorch module gets this long by default (`--time-limit`).
DEFAULT_IMPORT_TIME_LIMIT_S = 60.0
MAX_IMPORT_TIME_LIMIT_S = 86_400.0

# ---- instances ---------------------------------------------------------------------------------

# A cluster holds M x M latency, bandwidth, pair-bandwidth (float64) and imputed (bool)
# matrices: 25 bytes a pair, 420 MB at 4,096 machines, about 1 GB while a file builds them.
# Placement (latency-chain-dp) and the env are measured to 2,048 machines (`hulk bench scale`).
MAX_MACHINES = 4_096
# Explicit `links` entries of a cluster file may name regions (all their machine pairs): the
# pairs they write in total are capped at one per machine pair of the largest cluster.
MAX_LINK_PAIRS = MAX_MACHINES * MAX_MACHINES
# Layers of a workload after coarsening. GPT-3 175B has 98 (96 blocks, embedding, head); 1,024
# is 10x the largest catalogued model. The stage DP is cubic in the layers of one replica.
MAX_LAYERS = 1_024
# Transformer blocks before coarsening (layers_per_block groups them): building costs one small
# record per block; the coarsened count must still be within MAX_LAYERS.
MAX_TRANSFORMER_BLOCKS = 100_000
# Layer-graph edges of an explicit workload: a chain has L - 1, skip connections a few L.
MAX_LAYER_EDGES = 16 * MAX_LAYERS
# Replica x layer slots (D x L): the env keeps per-slot arrays and the search baselines
# evaluate batches of 2,048 [D, L] int64 placements (268 MB at this limit).
MAX_SLOTS = 16_384
# Data-parallel replicas D (D x L is also bounded by MAX_SLOTS).
MAX_DATA_PARALLEL = 1_024
# Micro-batches per iteration: GPipe stashes all of them and the pipeline time is linear in
# them; a million is beyond any real global batch (GPT-3 used 1,536 sequences a batch).
MAX_MICRO_BATCHES = 1_048_576
# Sequences per micro-batch.
MAX_MICRO_BATCH_SIZE = 65_536
# Integer settings of a transformer (hidden size, heads, vocabulary, sequence length, FFN size):
# 2^24 is 1,000x the largest real value of each and keeps products of three of them exact.
MAX_TRANSFORMER_DIM = 16_777_216
# Bytes per parameter of model state or gradient (16 = mixed-precision Adam), per activation.
MAX_BYTES_PER_VALUE = 1_024.0

# ---- magnitudes --------------------------------------------------------------------------------

# Forward FLOPs of one layer per micro-batch: GPT-3 175B's whole training run was ~3e23 FLOPs.
MAX_LAYER_FLOPS = 1e24
# Parameters of one layer: 1,000x GPT-3 175B in total.
MAX_LAYER_PARAMS = 1e15
# Activation or stash bytes of one layer per micro-batch: one exabyte.
MAX_LAYER_BYTES = 1e18
# Effective FLOP/s of one machine: 1e21 (a zettaFLOP/s) is ~500x the fastest supercomputer.
MAX_MACHINE_FLOPS = 1e21
# Slower than 1 kFLOP/s is no computer; the bound keeps FLOPs / FLOP/s finite.
MIN_MACHINE_FLOPS = 1e3
# GPU memory of one machine: one exabyte.
MAX_MACHINE_MEMORY_BYTES = 1e18
# Below one byte a machine cannot hold anything.
MIN_MACHINE_MEMORY_BYTES = 1.0
# GPUs in one machine (a "machine" may stand for a pod).
MAX_GPUS_PER_MACHINE = 65_536
# One-way link latency: 1,000 s is beyond any network on Earth (a geostationary hop is 0.3 s).
MAX_LATENCY_MS = 1e6
# Link bandwidth: 1 Pb/s is beyond any single link; 1 kb/s is the slowest that makes sense and
# keeps bytes / bandwidth finite.
MAX_BANDWIDTH_GBPS = 1e6
MIN_BANDWIDTH_GBPS = 1e-6

# ---- training, policies and command lines --------------------------------------------------------

# Seeds feed numpy, Python's random and torch; numpy's legacy global seed takes < 2^32.
MAX_SEED = 2**32 - 1
# Parallel environments of one training run (each holds an env and its observation buffers).
MAX_ENVS = 256
# torch threads: more than the cores of any machine only slows small networks down.
MAX_THREADS = 1_024
# Network widths and depths of a policy: the GNN is small; these bound the weights a
# policy.json may ask to build (hidden_dim^2 x rounds parameters).
MAX_HIDDEN_DIM = 4_096
MAX_HEADS = 64
MAX_ROUNDS = 16
# Environment steps of one training run (10^11 is years of CPU time).
MAX_TIMESTEPS = 10**11
# Cost-model evaluations a search method may be given.
MAX_BUDGET = 10**9


class Limit(NamedTuple):
    """One documented limit: its constant's name, value and unit."""

    name: str
    value: float
    unit: str


LIMITS: tuple[Limit, ...] = (
    Limit("MAX_MAPPING_FILE_BYTES", MAX_MAPPING_FILE_BYTES, "bytes"),
    Limit("MAX_TEXT_FILE_BYTES", MAX_TEXT_FILE_BYTES, "bytes"),
    Limit("MAX_SMALL_FILE_BYTES", MAX_SMALL_FILE_BYTES, "bytes"),
    Limit("MAX_WEIGHTS_BYTES", MAX_WEIGHTS_BYTES, "bytes"),
    Limit("MAX_NESTING_DEPTH", MAX_NESTING_DEPTH, "levels"),
    Limit("MAX_YAML_NODES", MAX_YAML_NODES, "values"),
    Limit("MAX_SCALAR_CHARS", MAX_SCALAR_CHARS, "characters"),
    Limit("MAX_NAME_CHARS", MAX_NAME_CHARS, "characters"),
    Limit("MAX_HF_CONFIG_BYTES", MAX_HF_CONFIG_BYTES, "bytes"),
    Limit("MAX_CSV_ROWS", MAX_CSV_ROWS, "rows"),
    Limit("MAX_CSV_COLUMNS", MAX_CSV_COLUMNS, "cells"),
    Limit("MAX_TRACE_EVENTS", MAX_TRACE_EVENTS, "events"),
    Limit("MAX_TRACE_TIME_S", MAX_TRACE_TIME_S, "s"),
    Limit("MAX_TRAIN_ITERATIONS", MAX_TRAIN_ITERATIONS, "iterations"),
    Limit("MIN_EVENT_GAP_ULPS", MIN_EVENT_GAP_ULPS, "float64 steps"),
    Limit("MAX_IMPORT_TIME_LIMIT_S", MAX_IMPORT_TIME_LIMIT_S, "s"),
    Limit("MAX_MACHINES", MAX_MACHINES, "machines"),
    Limit("MAX_LINK_PAIRS", MAX_LINK_PAIRS, "machine pairs"),
    Limit("MAX_LAYERS", MAX_LAYERS, "layers"),
    Limit("MAX_TRANSFORMER_BLOCKS", MAX_TRANSFORMER_BLOCKS, "blocks"),
    Limit("MAX_LAYER_EDGES", MAX_LAYER_EDGES, "edges"),
    Limit("MAX_SLOTS", MAX_SLOTS, "replica x layer slots"),
    Limit("MAX_DATA_PARALLEL", MAX_DATA_PARALLEL, "replicas"),
    Limit("MAX_MICRO_BATCHES", MAX_MICRO_BATCHES, "micro-batches"),
    Limit("MAX_MICRO_BATCH_SIZE", MAX_MICRO_BATCH_SIZE, "sequences"),
    Limit("MAX_TRANSFORMER_DIM", MAX_TRANSFORMER_DIM, ""),
    Limit("MAX_BYTES_PER_VALUE", MAX_BYTES_PER_VALUE, "bytes"),
    Limit("MAX_LAYER_FLOPS", MAX_LAYER_FLOPS, "FLOPs"),
    Limit("MAX_LAYER_PARAMS", MAX_LAYER_PARAMS, "parameters"),
    Limit("MAX_LAYER_BYTES", MAX_LAYER_BYTES, "bytes"),
    Limit("MAX_MACHINE_FLOPS", MAX_MACHINE_FLOPS, "FLOP/s"),
    Limit("MIN_MACHINE_FLOPS", MIN_MACHINE_FLOPS, "FLOP/s"),
    Limit("MAX_MACHINE_MEMORY_BYTES", MAX_MACHINE_MEMORY_BYTES, "bytes"),
    Limit("MIN_MACHINE_MEMORY_BYTES", MIN_MACHINE_MEMORY_BYTES, "bytes"),
    Limit("MAX_GPUS_PER_MACHINE", MAX_GPUS_PER_MACHINE, "GPUs"),
    Limit("MAX_LATENCY_MS", MAX_LATENCY_MS, "ms"),
    Limit("MAX_BANDWIDTH_GBPS", MAX_BANDWIDTH_GBPS, "Gbit/s"),
    Limit("MIN_BANDWIDTH_GBPS", MIN_BANDWIDTH_GBPS, "Gbit/s"),
    Limit("MAX_SEED", MAX_SEED, ""),
    Limit("MAX_ENVS", MAX_ENVS, "envs"),
    Limit("MAX_THREADS", MAX_THREADS, "threads"),
    Limit("MAX_HIDDEN_DIM", MAX_HIDDEN_DIM, ""),
    Limit("MAX_HEADS", MAX_HEADS, "heads"),
    Limit("MAX_ROUNDS", MAX_ROUNDS, "rounds"),
    Limit("MAX_TIMESTEPS", MAX_TIMESTEPS, "steps"),
    Limit("MAX_BUDGET", MAX_BUDGET, "evaluations"),
)

WHERE = "hulk_env/validation/limits.py"  # named in error messages, so users know where to look


def cite(name: str) -> str:
    """``"limit MAX_MACHINES in hulk_env/validation/limits.py"``: how messages point at a limit."""
    if name not in _NAMES:
        raise KeyError(name)
    return f"limit {name} in {WHERE}"


_NAMES = frozenset(limit.name for limit in LIMITS)
