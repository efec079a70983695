"""Saved policies: the file format, loading, placing with a policy, comparing with baselines.

## The saved-policy format (loading never executes code from the files)

A policy is a directory with two files, written by :func:`save_policy`:

* ``policy.json`` -- what to build: ``{"format": "hulk-policy/1", "env_id", "policy":
  {extractor, hidden_dim, machine_rounds, layer_rounds, heads}, "padding": {max_machines,
  max_layers, max_edges}, "num_timesteps", "weights": "weights.pt", "weights_sha256", ...}``;
* ``weights.pt`` -- the policy network's ``state_dict`` (tensors only), saved with
  ``torch.save`` and read back with ``torch.load(weights_only=True)``, which unpickles
  tensors and plain containers only (no classes, no code). The SHA-256 in the JSON must match.

The network is rebuilt from the JSON by :func:`agents.policy.policy_class_and_kwargs` and the
observation space :func:`hulk_env.env.observation_space` of the recorded padding. SB3's own
``model.save`` zip is not used: its ``data`` entry is cloudpickled and runs code on load.

A training run directory holds ``policy/`` (the final weights) and ``best_policy/`` (the best
deterministic evaluation during training); :func:`load_policy` takes ``best_policy/`` when it
exists (``which="best"``), or the one asked for.

A policy trained with padding ``(M, N, E)`` places any instance with at most ``M`` machines,
``N`` (replica x layer) slots and ``E`` layer-graph edges (the network itself is size-agnostic;
the padding fixes the tensor shapes); a larger instance is a :class:`HulkInputError` that says
which limit it exceeds.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from hulk_env import cost
from hulk_env.baselines import PlacementResult
from hulk_env.errors import HulkInputError
from hulk_env.generators import InstanceListGenerator, instance_edges
from hulk_env.instance import Instance

POLICY_FORMAT = "hulk-policy/1"
POLICY_JSON = "policy.json"
WEIGHTS_FILE = "weights.pt"
FINAL_POLICY_DIR = "policy"
BEST_POLICY_DIR = "best_policy"


# ---------------------------------------------------------------------------------- padding
@dataclass(frozen=True)
class Padding:
    """Observation padding: the largest instance a policy can place."""

    max_machines: int
    max_layers: int
    max_edges: int

    @classmethod
    def of(cls, instances: Sequence[Instance]) -> Padding:
        """The smallest padding that fits every instance."""
        return cls(
            max_machines=max(i.num_machines for i in instances),
            max_layers=max(i.data_parallel * i.num_layers for i in instances),
            max_edges=max(1, max(instance_edges(i) for i in instances)),
        )

    def at_least(self, other: Padding) -> Padding:
        """Element-wise maximum."""
        return Padding(
            max(self.max_machines, other.max_machines),
            max(self.max_layers, other.max_layers),
            max(self.max_edges, other.max_edges),
        )

    def check_fits(self, instance: Instance, who: str = "the policy") -> None:
        """Raise :class:`HulkInputError` when ``instance`` is larger than the padding."""
        sizes = (
            ("machines", instance.num_machines, self.max_machines, "max_machines"),
            ("replica x layer slots", instance.data_parallel * instance.num_layers, self.max_layers, "max_layers"),
            ("layer-graph edges", instance_edges(instance), self.max_edges, "max_edges"),
        )
        for what, have, limit, key in sizes:
            if have > limit:
                raise HulkInputError(
                    f"instance has {have} {what} but {who} was trained with padding {key}={limit}; "
                    f"train a policy with env.{key}>={have} (e.g. `hulk train --set env.{key}={have}`)",
                    source=instance.instance_id,
                )


# ------------------------------------------------------------------------------ save / load
def _atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write via a temporary file and ``os.replace``: readers see the old or the new file."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def atomic_write_text(path: Path, text: str) -> None:
    """Text version of :func:`_atomic_write_bytes`."""
    _atomic_write_bytes(path, text.encode())


def atomic_torch_save(obj: Any, path: Path) -> None:
    """``torch.save`` to a temporary file, then ``os.replace`` (never a half-written file)."""
    import io

    import torch

    buffer = io.BytesIO()
    torch.save(obj, buffer)
    _atomic_write_bytes(path, buffer.getvalue())


def safe_torch_load(path: Path, what: str) -> Any:
    """``torch.load(weights_only=True)``; a missing/corrupt file is one clear HulkInputError."""
    import torch

    if not path.is_file():
        raise HulkInputError(f"{what} not found", source=str(path))
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # zip/pickle/EOF errors all mean the same thing to a user
        raise HulkInputError(
            f"{what} is corrupt or not a weights-only torch file ({type(exc).__name__}); "
            "delete it and retrain (or resume from an earlier checkpoint)",
            source=str(path),
        ) from None


def save_policy(
    policy: Any,
    directory: Path,
    *,
    policy_config: dict[str, Any],
    padding: Padding,
    lookahead: bool,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Write ``weights.pt`` then ``policy.json`` (both atomically) into ``directory``.

    The JSON is written last, so a directory with a ``policy.json`` always has complete
    weights (the checksum is verified on load).
    """
    import io

    import torch

    from hulk_env.env import ENV_ID

    directory.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    torch.save({k: v.detach().cpu().clone() for k, v in policy.state_dict().items()}, buffer)
    data = buffer.getvalue()
    _atomic_write_bytes(directory / WEIGHTS_FILE, data)
    meta = {
        "format": POLICY_FORMAT,
        "env_id": ENV_ID,
        "policy": dict(policy_config),
        "padding": asdict(padding),
        "observation": {"lookahead": bool(lookahead)},
        "weights": WEIGHTS_FILE,
        "weights_sha256": hashlib.sha256(data).hexdigest(),
        **(extra or {}),
    }
    atomic_write_text(directory / POLICY_JSON, json.dumps(meta, indent=2) + "\n")
    return directory


def _policy_dir(path: Path, which: str) -> Path:
    """The directory holding ``policy.json``: ``path`` itself or a run's ``best_policy``/``policy``."""
    if (path / POLICY_JSON).is_file():
        return path
    if which not in ("best", "final"):
        raise HulkInputError(f"which must be 'best' or 'final', got {which!r}", field="which")
    order = (BEST_POLICY_DIR, FINAL_POLICY_DIR) if which == "best" else (FINAL_POLICY_DIR,)
    for name in order:
        if (path / name / POLICY_JSON).is_file():
            return path / name
    if not path.exists():
        raise HulkInputError("no such run directory", source=str(path))
    raise HulkInputError(
        f"no saved policy here (expected {FINAL_POLICY_DIR}/{POLICY_JSON} or {BEST_POLICY_DIR}/{POLICY_JSON}); "
        "give a run directory written by `hulk train`",
        source=str(path),
    )


class LoadedPolicy(NamedTuple):
    """A policy network rebuilt from its files.

    Attributes:
        policy: the SB3 policy module (eval mode, CPU).
        padding: the observation padding it was trained with.
        meta: the parsed ``policy.json``.
        directory: where it was loaded from.
    """

    policy: Any
    padding: Padding
    meta: dict[str, Any]
    directory: Path


def _read_meta(directory: Path) -> dict[str, Any]:
    path = directory / POLICY_JSON
    try:
        meta = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise HulkInputError(f"cannot read the policy description: {exc}", source=str(path)) from None
    if not isinstance(meta, dict) or meta.get("format") != POLICY_FORMAT:
        raise HulkInputError(
            f"not a {POLICY_FORMAT} policy description (format={meta.get('format') if isinstance(meta, dict) else None!r})",
            source=str(path),
        )
    for key in ("policy", "padding", "weights", "weights_sha256"):
        if key not in meta:
            raise HulkInputError(f"missing key '{key}'", source=str(path), field=key)
    return meta


def policy_observation_space(padding: Padding, lookahead: bool) -> Any:
    """The observation space a policy sees: the env's, plus ``lookahead`` when used."""
    from gymnasium import spaces

    from agents.shaping import LOOKAHEAD_KEY, lookahead_space
    from hulk_env.env import observation_space

    space = observation_space(padding.max_machines, padding.max_layers, padding.max_edges)
    if lookahead:
        parts = dict(space.spaces)
        parts[LOOKAHEAD_KEY] = lookahead_space(padding.max_machines)
        space = spaces.Dict(parts)
    return space


def build_policy_network(policy_config: dict[str, Any], padding: Padding, lookahead: bool) -> Any:
    """A fresh (untrained) policy network for a policy config, padding and observation."""
    from gymnasium import spaces

    from agents.policy import policy_class_and_kwargs

    cfg = dict(policy_config)
    try:
        cls, kwargs = policy_class_and_kwargs(
            str(cfg["extractor"]), int(cfg["hidden_dim"]), int(cfg["machine_rounds"]), int(cfg["layer_rounds"]), int(cfg["heads"])
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise HulkInputError(f"bad policy architecture {cfg!r}: {exc}", field="policy") from None
    obs_space = policy_observation_space(padding, lookahead)
    return cls(obs_space, spaces.Discrete(padding.max_machines), lambda _: 0.0, **kwargs)


def load_policy(path: str | Path, which: str = "best") -> LoadedPolicy:
    """Rebuild a saved policy (weights only; see the module docstring).

    Args:
        path: a run directory (``policy/``, ``best_policy/`` inside) or a policy directory.
        which: ``best`` (``best_policy/`` if present, else ``policy/``) or ``final``.

    Raises:
        HulkInputError: no policy there, a malformed description, a checksum mismatch or
            weights that do not fit the described network.
    """
    directory = _policy_dir(Path(path), which)
    meta = _read_meta(directory)
    try:
        padding = Padding(**{k: int(meta["padding"][k]) for k in ("max_machines", "max_layers", "max_edges")})
    except (KeyError, TypeError, ValueError):
        raise HulkInputError(f"bad padding {meta['padding']!r}", source=str(directory / POLICY_JSON), field="padding") from None
    weights_path = directory / str(meta["weights"])
    if weights_path.is_file():
        digest = hashlib.sha256(weights_path.read_bytes()).hexdigest()
        if digest != meta["weights_sha256"]:
            raise HulkInputError(
                "weights do not match the checksum in policy.json (corrupt or replaced file); retrain or restore it",
                source=str(weights_path),
            )
    state = safe_torch_load(weights_path, "policy weights")
    policy = build_policy_network(meta["policy"], padding, lookahead_of(meta))
    try:
        policy.load_state_dict(state)
    except (RuntimeError, TypeError, AttributeError) as exc:
        raise HulkInputError(
            f"weights do not fit the network described in policy.json: {str(exc).splitlines()[0]}",
            source=str(weights_path),
        ) from None
    policy.set_training_mode(False)
    return LoadedPolicy(policy, padding, meta, directory)


def lookahead_of(meta: dict[str, Any]) -> bool:
    """Whether a saved policy reads the ``lookahead`` observation."""
    observation = meta.get("observation", {})
    return bool(observation.get("lookahead", False)) if isinstance(observation, dict) else False


# ------------------------------------------------------------------------------ placing
def make_eval_env(instance: Instance, padding: Padding, lookahead: bool) -> Any:
    """A terminal-reward env on one instance with the policy's padding and observation."""
    from agents.shaping import StayLookahead
    from hulk_env.env import PlacementEnv

    env = PlacementEnv(
        generator=InstanceListGenerator((instance,)),
        max_machines=padding.max_machines,
        max_layers=padding.max_layers,
        max_edges=padding.max_edges,
        reward="terminal",
    )
    return StayLookahead(env, shape=False, lookahead=True) if lookahead else env


def sample_action(policy: Any, obs: dict[str, np.ndarray], mask: np.ndarray, temperature: float) -> int:
    """A masked action drawn from ``softmax(logits / temperature)`` (torch's global RNG)."""
    import torch

    obs_tensor, _ = policy.obs_to_tensor(obs)
    dist = policy.get_distribution(obs_tensor, action_masks=mask[None])
    logits = dist.distribution.logits[0] / temperature  # masked logits stay at about -1e8 / T
    return int(torch.multinomial(torch.softmax(logits, -1), 1))


def rollout(policy: Any, env: Any, instance: Instance, temperature: float | None = None) -> np.ndarray | None:
    """One masked episode of ``policy`` on ``instance``: greedy (``temperature=None``) or
    sampled at ``temperature``; the ``[D, L]`` placement, or ``None`` at a dead end."""
    obs, _ = env.reset(options={"instance": instance})
    while True:
        mask = env.action_masks()
        if temperature is None:
            action = int(policy.predict(obs, deterministic=True, action_masks=mask)[0])
        else:
            action = sample_action(policy, obs, mask, temperature)
        obs, _, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            if info.get("dead_end") or truncated:
                return None
            return np.asarray(info["placement"], dtype=np.int64)


@contextmanager
def single_thread() -> Iterator[None]:
    """Run torch on one thread inside the block (restored after).

    One observation at a time is a chain of tiny kernels: extra threads only add
    synchronisation, and on a loaded 2-core machine their spin-waits made inference 6x slower.
    """
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def policy_placement(
    loaded: LoadedPolicy,
    instance: Instance,
    seed: int = 0,
    samples: int = 0,
    name: str = "policy",
    temperature: float = 1.0,
) -> PlacementResult:
    """Place ``instance`` with a loaded policy: the deterministic (greedy) rollout, plus the
    best of ``samples`` rollouts sampled at ``temperature`` when ``samples > 0`` (seeded by
    ``seed``), the cost model choosing.

    ``cost_evals`` counts the completed rollouts (each costs one cost-model evaluation; a
    policy with the lookahead observation also makes one batched call per step, not counted).
    """
    import torch

    loaded.padding.check_fits(instance, who=f"the policy at {loaded.directory}")
    env = make_eval_env(instance, loaded.padding, lookahead_of(loaded.meta))
    best, best_time, evals = None, np.inf, 0
    with torch.random.fork_rng(), torch.no_grad(), single_thread():
        torch.manual_seed(seed)
        for i in range(1 + max(0, samples)):
            placement = rollout(loaded.policy, env, instance, None if i == 0 else temperature)
            if placement is None:
                continue
            evals += 1
            breakdown = cost.evaluate(instance.cluster, instance.workload, placement)
            if breakdown.memory_feasible and float(breakdown.iteration_time_s) < best_time:
                best, best_time = placement, float(breakdown.iteration_time_s)
    if best is None:
        return PlacementResult(name, None, evals, "every rollout ended in a dead end (no machine could take a layer)")
    return PlacementResult(name, best, evals)


def load_policy_method(
    run_dir: str | Path, which: str = "best", samples: int = 0, temperature: float = 1.0
) -> Callable[[Instance, int, int | None], PlacementResult]:
    """A saved policy as a leaderboard method ``(instance, seed, budget) -> PlacementResult``.

    Masked and deterministic by default; with ``samples > 0`` (or a ``budget``, taken as the
    number of rollouts) it also samples that many rollouts and keeps the best placement.
    Loads once; errors (no policy, corrupt files) are raised here, not at the first call.
    """
    loaded = load_policy(run_dir, which)
    name = f"policy:{Path(run_dir).name}"

    def method(instance: Instance, seed: int = 0, budget: int | None = None) -> PlacementResult:
        extra = samples if budget is None else max(0, int(budget) - 1)
        return policy_placement(loaded, instance, seed=seed, samples=extra, name=name, temperature=temperature)

    return method


def agent_methods() -> dict[str, Callable[[Instance, int, int | None], PlacementResult]]:
    """Leaderboard methods that live with the agent (they need torch): ``hulk-gcn``."""
    from agents.hulk_gcn import hulk_gcn_method

    return {"hulk-gcn": hulk_gcn_method}


# ------------------------------------------------------------------------------ metrics
class Traffic(NamedTuple):
    """Bytes one training iteration sends between machines, and the share between regions.

    Attributes:
        total_bytes: pipeline activations and their gradients (all micro-batches) plus the
            data-parallel ring all-reduce traffic, over machine boundaries.
        wan_bytes: the part between machines in different regions.
    """

    total_bytes: float
    wan_bytes: float

    @property
    def wan_share(self) -> float:
        """``wan_bytes / total_bytes`` (0 when nothing crosses a machine boundary)."""
        return self.wan_bytes / self.total_bytes if self.total_bytes > 0 else 0.0


def traffic(instance: Instance, placement: np.ndarray) -> Traffic:
    """Inter-machine and inter-region bytes of one iteration of ``placement`` ``[D, L]``.

    Pipeline: each cross-machine edge ``u -> v`` carries ``a_u`` forward and ``a_u`` of
    gradients backward per micro-batch. Data parallel: a ring all-reduce of ``G`` bytes over
    ``k`` machines sends ``2 (k - 1) / k * G`` over each of its ``k`` links (the cost model's
    rings, :func:`hulk_env.cost.dp_rings`).
    """
    c, w = instance.cluster, instance.workload
    mach = np.asarray(placement, dtype=np.int64).reshape(w.data_parallel, w.num_layers)
    region = c.region_index
    total = wan = 0.0
    edges = np.asarray(w.edges, dtype=np.int64).reshape(-1, 2)
    if len(edges):
        a, b = mach[:, edges[:, 0]], mach[:, edges[:, 1]]
        sent = 2.0 * w.num_micro_batches * np.broadcast_to(w.activation_bytes[edges[:, 0]], a.shape)
        cross = a != b
        total += float(sent[cross].sum())
        wan += float(sent[cross & (region[a] != region[b])].sum())
    rings = cost.dp_rings(w, mach[None])
    for layer in np.flatnonzero(rings.leader[0]):
        k = int(rings.size[0, layer])
        if k < 2:
            continue
        members = rings.members[0, :k, layer]
        per_link = 2.0 * (k - 1) / k * float(rings.group_bytes[0, layer])
        nxt = np.roll(members, -1)
        total += per_link * k
        wan += per_link * int(np.count_nonzero(region[members] != region[nxt]))
    return Traffic(total, wan)


# ------------------------------------------------------------------------- run comparison
POLICY_METHOD = "gnn-ppo"


def evaluate_run(
    run_dir: str | Path,
    methods: Sequence[str] | None = None,
    which: str = "best",
    samples: int | None = None,
    seed: int = 0,
    progress: bool = True,
) -> tuple[list[Any], dict[str, Path]]:
    """The trained policy against baselines on the run's evaluation instances.

    Runs ``methods`` (default: the run's ``eval.baselines``) and the policy, named
    ``gnn-ppo`` (deterministic) and, with ``samples > 0`` (default: the run's
    ``eval.samples``), ``gnn-ppo+N`` (best of the greedy and ``N`` sampled rollouts), through
    :func:`hulk_env.evaluation.run_methods`; agent-side methods (``hulk-gcn``) may be named
    among ``methods``. Writes ``RUN_DIR/eval/results.{csv,json}``, ``summary.md``, and the plots
    ``curves.png`` (learning curves) and ``placement.png`` (the policy's placement of the first
    instance). Returns ``(rows, paths)``.
    """
    from agents.train import read_run_config, training_source
    from hulk_env.evaluation import run_methods, write_results

    run_dir = Path(run_dir)
    config = read_run_config(run_dir)
    _, instances = training_source(config)
    names = list(methods) if methods is not None else list(config.eval.baselines)
    samples = config.eval.samples if samples is None else samples
    loaded = load_policy(run_dir, which)
    agents_side = agent_methods()
    extra: dict[str, Callable[[Instance, int, int | None], PlacementResult]] = {
        n: agents_side[n] for n in names if n in agents_side
    }
    extra[POLICY_METHOD] = lambda inst, s, b: policy_placement(loaded, inst, seed=s, name=POLICY_METHOD)
    if samples > 0:
        sampled = f"{POLICY_METHOD}+{samples}"
        temperature = config.eval.temperature
        extra[sampled] = lambda inst, s, b: policy_placement(
            loaded, inst, seed=s, samples=samples, name=sampled, temperature=temperature
        )
    rows = run_methods(instances, names, seed=seed, progress=progress, extra_methods=extra)
    paths = write_results(rows, run_dir / "eval", title=f"{run_dir.name}: policy vs baselines")
    paths.update(write_plots(run_dir, loaded, instances[0]))
    return rows, paths


def write_plots(run_dir: Path, loaded: LoadedPolicy, instance: Instance) -> dict[str, Path]:
    """``eval/curves.png`` and ``eval/placement.png`` (skipped, not fatal, when there is
    nothing to draw, e.g. a run without TensorBoard logs or a dead-end placement)."""
    from hulk_env.render import curves_figure, placement_figure, read_curves, save_figure

    out: dict[str, Path] = {}
    try:
        curves = read_curves(run_dir)
        tags = [t for t in ("placement/speedup_vs_naive", "eval/mean_speedup_vs_naive", "rollout/ep_rew_mean")
                if any(c.tag == t for c in curves)]
        out["curves"] = save_figure(curves_figure({run_dir.name: curves}, tags=tags or None), run_dir / "eval" / "curves.png")
    except HulkInputError:
        pass
    result = policy_placement(loaded, instance, name=POLICY_METHOD)
    if result.feasible:
        fig = placement_figure(instance, result.placement, title=f"{POLICY_METHOD} on {instance.instance_id}")
        out["placement"] = save_figure(fig, run_dir / "eval" / "placement.png")
    return out
