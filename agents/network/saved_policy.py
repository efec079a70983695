"""Saved policies: the file format, saving, and loading (never executing code from the files).

A policy is a directory with two files, written by :func:`save_policy`:

* ``policy.json`` -- what to build: ``{"format": "hulk-policy/1", "env_id", "policy":
  {extractor, hidden_dim, machine_rounds, layer_rounds, heads}, "padding": {max_machines,
  max_layers, max_edges}, "num_timesteps", "weights": "weights.pt", "weights_sha256", ...}``;
* ``weights.pt`` -- the policy network's ``state_dict`` (tensors only), saved with
  ``torch.save`` and read back with ``torch.load(weights_only=True)``, which unpickles
  tensors and plain containers only (no classes, no code). The SHA-256 in the JSON must match;
* optionally ``start_ranker/``, a saved policy of the same kind whose first-slot logits rank the
  greedy decision's start machines (:mod:`agents.decision.start_ranker`), loaded with the policy.

The network is rebuilt from the JSON by :func:`agents.network.policy.policy_class_and_kwargs` and the
Placement-v1 observation space of the recorded padding (it only sizes SB3's bookkeeping). SB3's
own ``model.save`` zip is not used: its ``data`` entry is cloudpickled and runs code on load.

A training run directory holds ``policy/`` (the final weights) and ``best_policy/`` (the best
deterministic evaluation during training); :func:`load_policy` takes ``best_policy/`` when it
exists (``which="best"``), or the one asked for.

The recorded padding is the training run's; the network is size-agnostic (:mod:`agents.network.gnn`),
so a loaded policy places instances of **any** number of machines, layers and replicas
(:mod:`agents.decision.inference` builds the env at the instance's own size).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any, NamedTuple

from agents.network.files import atomic_torch_save, safe_torch_load
from agents.training.runs import BEST_POLICY_DIR, FINAL_POLICY_DIR
from hulk_env.errors import HulkInputError
from hulk_env.feasibility import Padding
from hulk_env.files import atomic_write_text
from hulk_env.validation import limits
from hulk_env.validation.reading import read_bytes, safe_repr

POLICY_FORMAT = "hulk-policy/1"
ENV_ID_V0 = "hulk/Placement-v0"  # policies of the dense observation (Placement-v0, [M, M] link matrices): refused with a clear line
POLICY_JSON = "policy.json"
WEIGHTS_FILE = "weights.pt"
RANKER_DIR = "start_ranker"  # an optional start ranker inside a policy directory (agents.decision.start_ranker)


# ------------------------------------------------------------------------------ save / load
def save_policy(
    policy: Any,
    directory: Path,
    *,
    policy_config: dict[str, Any],
    padding: Padding,
    lookahead: bool | str,
    plan: bool = False,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Write ``weights.pt`` then ``policy.json`` (both atomically) into ``directory``.

    The JSON is written last, so a directory with a ``policy.json`` always has complete
    weights (the checksum is verified on load).
    """
    from hulk_env.env import ENV_ID_V1 as ENV_ID

    directory.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().clone() for k, v in policy.state_dict().items()}
    sha256 = atomic_torch_save(state, directory / WEIGHTS_FILE)
    meta = {
        "format": POLICY_FORMAT,
        "env_id": ENV_ID,
        "policy": dict(policy_config),
        "padding": asdict(padding),
        "observation": {"lookahead": lookahead if isinstance(lookahead, str) else bool(lookahead), "plan": bool(plan)},
        "weights": WEIGHTS_FILE,
        "weights_sha256": sha256,
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
        ranker: the start ranker saved beside it (``start_ranker/``, :mod:`agents.decision.start_ranker`:
            a network of the same architecture whose first-slot logits rank the greedy
            decision's start machines), or ``None``.
    """

    policy: Any
    padding: Padding
    meta: dict[str, Any]
    directory: Path
    ranker: Any = None


def _read_meta(directory: Path) -> dict[str, Any]:
    """``policy.json``, read safely and checked against its schema
    (:class:`hulk_env.validation.schemas.PolicyFile`: limits on every size it asks to build)."""
    from hulk_env.validation.reading import read_mapping
    from hulk_env.validation.schemas import PolicyFile, validate

    path = directory / POLICY_JSON
    meta = read_mapping(path, max_bytes=limits.MAX_SMALL_FILE_BYTES, what="policy description")
    if meta.get("format") != POLICY_FORMAT:
        raise HulkInputError(
            f"not a {POLICY_FORMAT} policy description (format={safe_repr(meta.get('format'))})",
            source=str(path),
        )
    validate(PolicyFile, meta, str(path), rows="key")
    return meta


def policy_observation_space(padding: Padding, lookahead: bool, plan: bool = False) -> Any:
    """The observation space a policy sees: Placement-v1's, plus ``lookahead`` and ``plan``
    (:mod:`agents.training.shaping`, :mod:`agents.decision.plan`) when used."""
    from gymnasium import spaces

    from agents.decision.plan import PLAN_KEY, plan_space
    from agents.training.shaping import LOOKAHEAD_KEY, lookahead_space
    from hulk_env.env.observation_v1 import DEFAULT_NEIGHBOURS, observation_space_v1

    space = observation_space_v1(padding.max_machines, padding.max_layers, padding.max_edges, DEFAULT_NEIGHBOURS)
    parts = dict(space.spaces)
    if lookahead:
        parts[LOOKAHEAD_KEY] = lookahead_space(padding.max_machines)
    if plan:
        parts[PLAN_KEY] = plan_space(padding.max_machines)
    return spaces.Dict(parts)


def build_policy_network(policy_config: dict[str, Any], padding: Padding, lookahead: bool, plan: bool = False) -> Any:
    """A fresh (untrained) policy network for a policy config, padding and observation."""
    from gymnasium import spaces

    from agents.network.policy import policy_class_and_kwargs

    cfg = dict(policy_config)
    try:
        cls, kwargs = policy_class_and_kwargs(
            str(cfg["extractor"]), int(cfg["hidden_dim"]), int(cfg["machine_rounds"]), int(cfg["layer_rounds"]), int(cfg["heads"])
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise HulkInputError(f"bad policy architecture {cfg!r}: {exc}", field="policy") from None
    obs_space = policy_observation_space(padding, lookahead, plan)
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
    if weights_path.exists():
        digest = hashlib.sha256(read_bytes(weights_path, limits.MAX_WEIGHTS_BYTES, what="policy weights")).hexdigest()
        if digest != meta["weights_sha256"]:
            raise HulkInputError(
                "weights do not match the checksum in policy.json (corrupt or replaced file); retrain or restore it",
                source=str(weights_path),
            )
    state = safe_torch_load(weights_path, "policy weights")
    if meta.get("env_id") == ENV_ID_V0:
        raise HulkInputError(
            f"this policy was trained on {ENV_ID_V0} (dense observation); policies now read "
            "hulk/Placement-v1 at any size: retrain it with `hulk train`",
            source=str(directory / POLICY_JSON),
        )
    policy = build_policy_network(meta["policy"], padding, lookahead_of(meta), plan_of(meta))
    try:
        policy.load_state_dict(pad_new_globals(state, policy.state_dict()))
    except (RuntimeError, TypeError, AttributeError) as exc:
        raise HulkInputError(
            f"weights do not fit the network described in policy.json: {str(exc).splitlines()[0]}",
            source=str(weights_path),
        ) from None
    policy.set_training_mode(False)
    return LoadedPolicy(policy, padding, meta, directory, _load_ranker(directory))


# Weights whose input columns end with the env's ``globals`` and then the network's own
# instance features (agents.network.gnn: the current slot's Linear; the pointer head's context and
# critic read the pooled summary, which ends the same way).
GLOBALS_READERS = ("current.weight", "mlp_extractor.context.weight", "mlp_extractor.critic.0.0.weight")
TRAILING_COLUMNS = 2  # agents.network.gnn's instance features after the globals (log2 D / 3, memory need / memory)
LEGACY_GLOBALS = 5  # globals before the plan settings joined them (progress ... stash)


def pad_new_globals(state: dict[str, Any], expected: dict[str, Any]) -> dict[str, Any]:
    """``state`` with zero input columns inserted where the env's ``globals`` grew since it was
    saved (the plan settings of :data:`hulk_env.env.GLOBAL_FEATURES`), so an older policy
    computes exactly what it did: a new column's weights are 0, and at the default settings
    its value is 0 too. Only the :data:`GLOBALS_READERS` weights are padded, only by columns
    the globals gained (at most ``len(GLOBAL_FEATURES) - LEGACY_GLOBALS``), inserted after the
    old globals and before the :data:`TRAILING_COLUMNS`; every other mismatch is left for
    ``load_state_dict`` to refuse. ``expected``: the new network's ``state_dict()``."""
    import torch

    from hulk_env.env import GLOBAL_FEATURES

    out = dict(state)
    for key, want in expected.items():
        have = state.get(key)
        if not key.endswith(GLOBALS_READERS) or not isinstance(have, torch.Tensor) or have.dim() != 2:
            continue
        missing = want.shape[1] - have.shape[1]
        if have.shape[0] != want.shape[0] or not 0 < missing <= len(GLOBAL_FEATURES) - LEGACY_GLOBALS:
            continue
        at = have.shape[1] - TRAILING_COLUMNS
        out[key] = torch.cat([have[:, :at], have.new_zeros(have.shape[0], missing), have[:, at:]], dim=1)
    return out


def _load_ranker(directory: Path) -> Any:
    """The start ranker in ``directory/start_ranker`` (checked like any saved policy), or ``None``."""
    if not (directory / RANKER_DIR / POLICY_JSON).is_file():
        return None
    return load_policy(directory / RANKER_DIR).policy


def lookahead_of(meta: dict[str, Any]) -> bool | str:
    """Whether a saved policy reads the ``lookahead`` observation: ``False``, ``True`` (the
    stay completion) or the name of its completion rule (:data:`agents.training.shaping.COMPLETIONS`)."""
    observation = meta.get("observation", {})
    value = observation.get("lookahead", False) if isinstance(observation, dict) else False
    if isinstance(value, str):
        return True if value == "stay" else value
    return bool(value)


def plan_of(meta: dict[str, Any]) -> bool:
    """Whether a saved policy reads the ``plan`` observation (:mod:`agents.decision.plan`)."""
    return _reads(meta, "plan")


def _reads(meta: dict[str, Any], key: str) -> bool:
    observation = meta.get("observation", {})
    return bool(observation.get(key, False)) if isinstance(observation, dict) else False
