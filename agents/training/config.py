"""One typed training configuration: dataclasses, YAML files, dotted overrides.

A run is described by a :class:`RunConfig` with six sections (``env``, ``imitation``, ``ppo``,
``policy``, ``train``, ``eval``). It is read from a YAML file -- a name of one shipped with the package in
``agents/configs/`` or a path (every key is optional; missing keys keep the defaults below) --
then overridden from the command line with dotted ``section.key=value`` pairs (``--set
ppo.learning_rate=1e-4``), and written resolved next to the run (``config.yaml``) so the run can
be repeated or resumed from that file alone. What callers change about a run (the overrides, the
step count, seed, output directory, run name) travels as one :class:`TrainSettings` record.

Unknown sections or keys and values of the wrong type raise :class:`HulkInputError` naming the
file and the key, never a traceback.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from hulk_env.errors import HulkInputError
from hulk_env.files import atomic_write_text

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"  # package data: found in any install


@dataclass
class EnvConfig:
    """What the agent is trained on (``hulk/Placement-v1``, :class:`hulk_env.env.PlacementEnvV1`).

    Attributes:
        generator: where training instances come from: ``fixed`` (one cluster x one model),
            ``suite`` (the first ``suite_instances`` of a benchmark suite), ``toy``,
            ``random`` (a fresh instance from :mod:`hulk_env.generators` every episode) or
            ``generalist`` (:class:`agents.training.distribution.GeneralistGenerator`: 4-128 machines over
            the training cities, built-in models 125M-176B, 1-4 replicas, memory-tight cases).
        cluster: ``fixed``: a built-in cluster name (``default``), a paper data directory or a
            YAML/JSON file.
        model: ``fixed``: a built-in model name (``default``) or a YAML/JSON workload file.
        data_parallel: ``fixed``: replicas ``D`` (``None`` keeps the model's default).
        num_micro_batches: ``fixed``: micro-batches per iteration (``None``: the model's).
        suite: ``suite``: the benchmark suite (e.g. ``geo-v0``).
        suite_instances: ``suite``: how many of its first instances to train on (``0`` = all);
            the rest are held out for evaluation.
        heldout_suite: evaluate on this suite's instances instead (e.g. ``tiny-v0`` for a
            ``toy`` run); empty: the training instance (``fixed``), the suite's held-out
            instances, or ``eval.heldout_instances`` fresh draws of the generator.
        max_machines: machine padding of the observation (``0`` = the largest instance's).
        max_layers: (replica x layer) slot padding (``0`` = the largest instance's).
        max_edges: layer-graph edge padding (``0`` = the largest instance's).
        reward: ``terminal``, ``dense`` (the env's potential-based shaping) or ``stay``
            (:class:`agents.training.shaping.StayLookahead`); all three have the same episode return.
            ``cost`` (the log dollar saving per iteration over naive) or ``mixed`` (its mean
            with the log speed-up): :mod:`hulk_env.rewards`; validation scores the same objective.
        invalid_action: ``fallback`` or ``penalty`` (never reached with masking).
        lookahead: add the one-step lookahead observation of :mod:`agents.training.shaping` (the
            shaped reward of every action, from one batched cost-model call per step).
        completion: how the lookahead and the stay shaping complete a partial placement
            (:mod:`agents.training.shaping`): ``stay`` (the open replica's rest on its last machine, the
            replicas opened so far) or ``pipeline`` (stay or follow the previous replica; later
            replicas copy the open one; the witness's re-plan where none fits in memory),
            ``split`` (also the rest cut into 2-4 stages at its smallest bottleneck) or, for the
            shaping only (no lookahead), ``witness`` (Placement-v1's own memory-feasible
            completion: with ``plan``, the plan shown to the policy).
        plan: add the stage DP's plan from the policy's start machine (:mod:`agents.decision.plan`).
        plan_settings: ``random``: draw plan settings per instance (tensor parallel, ZeRO,
            DiLoCo: :func:`hulk_env.generators.random_geo.draw_plan_settings`), so the policy
            trains on the settings it observes; off keeps the draws of earlier runs.
        cities: ``random``, ``generalist``: the city pool of the training clusters (names of
            :data:`hulk_env.hardware.geo.CITIES`); empty = every city (``random``) or
            :data:`hulk_env.evaluation.suites.TRAINING_CITIES` (``generalist``).
        machines: ``generalist``: ``[low, high]`` machines per cluster (empty: 4-128).
    """

    generator: str = "fixed"
    cluster: str = "default"
    model: str = "default"
    data_parallel: int | None = None
    num_micro_batches: int | None = None
    suite: str = ""
    suite_instances: int = 0
    heldout_suite: str = ""
    max_machines: int = 0
    max_layers: int = 0
    max_edges: int = 0
    reward: str = "stay"
    invalid_action: str = "fallback"
    lookahead: bool = True
    completion: str = "stay"
    plan: bool = False
    plan_settings: bool = False
    cities: list[str] = field(default_factory=list)
    machines: list[int] = field(default_factory=list)


@dataclass
class ImitationConfig:
    """Warm start by behaviour cloning before PPO (:mod:`agents.training.imitation`).

    Attributes:
        demonstrations: training instances to demonstrate (``0`` = no imitation, PPO from
            scratch); drawn from the training generator with seed ``train.seed``.
        methods: baselines whose fastest placement per instance is the demonstration.
        polish_budget: also run ``anneal`` with this budget per instance (``0`` = not).
        epochs: behaviour-cloning passes over the demonstrations (and after each DAgger round).
        dagger_rounds: rounds of DAgger after cloning: the policy's own greedy episodes on the
            demonstrated instances, every state labelled by :func:`agents.training.imitation.expert_action`,
            added to the data, then ``epochs`` more passes.
        learning_rate: Adam's step size (cosine-decayed to 10%).
        batch_steps: slots per Adam step.
        vf_coef: weight of the value loss (the critic learns the demonstrations' returns).
        decision_weight: weight in the cross-entropy of the slots whose demonstrated machine
            is not the predecessor's (a replica's first slot, a new stage): the few decisions
            that shape a pipeline, among many "stay" slots.
        max_minutes: stop behaviour cloning after this many minutes (``0`` = no limit).
    """

    demonstrations: int = 0
    methods: list[str] = field(default_factory=lambda: ["latency-chain-dp", "partition", "compute-greedy"])
    polish_budget: int = 0
    epochs: int = 20
    dagger_rounds: int = 0
    learning_rate: float = 1e-3
    batch_steps: int = 512
    vf_coef: float = 0.5
    decision_weight: float = 1.0
    max_minutes: float = 0.0


@dataclass
class PPOConfig:
    """``sb3_contrib.MaskablePPO`` hyper-parameters (same names as the library), and
    ``anneal_lr``: decay the learning rate linearly to 0 over the run's ``total_timesteps``
    (CleanRL's PPO default; late updates then refine instead of undoing what was learnt), and
    ``trainable``: ``all`` (the whole network) or ``signals`` (only the GNN pointer head's signal
    weights, :func:`agents.training.imitation.trainable_parameters`, and the value head: PPO then
    fits the few weights that say how much the plan, the predecessor's machine and the other
    signals count, as ``experiments.signal_search`` does by search)."""

    learning_rate: float = 3e-4
    n_steps: int = 256
    batch_size: int = 256
    n_epochs: int = 4
    gamma: float = 1.0
    gae_lambda: float = 0.95
    clip_range: float = 0.2
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    target_kl: float | None = None
    normalize_advantage: bool = True
    anneal_lr: bool = False
    trainable: str = "all"


@dataclass
class PolicyConfig:
    """The network.

    Attributes:
        extractor: ``gnn`` (the graph network of :mod:`agents.network.gnn`) or ``mlp`` (SB3's default
            ``MultiInputPolicy`` extractor, for comparisons).
        hidden_dim: embedding width of machines and layers.
        machine_rounds: message-passing rounds over the machine graph.
        layer_rounds: message-passing rounds over the layer DAG.
        heads: attention heads relating the current layer to the machines.
        gain_prior: initial weight of the lookahead gain in the logits (:data:`agents.network.policy.PRIORS`;
            learnable, so it only sets where PPO starts; saved weights carry their own).
    """

    extractor: str = "gnn"
    hidden_dim: int = 32
    machine_rounds: int = 1
    layer_rounds: int = 1
    heads: int = 2
    gain_prior: float = 3.0


@dataclass
class TrainConfig:
    """The run.

    Attributes:
        total_timesteps: environment steps to train for (over all envs); 0 saves the untrained
            network (the generalization experiment's control).
        seed: seeds Python, numpy, torch, the envs and the evaluation instances.
        n_envs: parallel environments (in-process ``DummyVecEnv``).
        torch_threads: ``torch.set_num_threads`` (small networks run fastest on few threads).
        checkpoint_every: steps between atomic checkpoints (``0`` = only at the end).
        progress_bar: show a progress bar.
        out: the directory under which run directories are created.
        name: run directory name (empty: ``<config>-<timestamp>``).
        device: torch device.
        tensorboard: write TensorBoard logs under ``RUN_DIR/tb``.
        max_minutes: stop training after this many minutes of wall-clock time, whatever the
            step count (``0`` = no limit); the run can be resumed later.
        init_policy: a saved policy (a run directory or a policy directory, e.g.
            ``agents/pretrained/gnn-ppo``) whose weights PPO starts from instead of a fresh
            network: fine-tuning. Its architecture and observation (``policy``, ``env.plan``,
            ``env.lookahead``) must be this config's; it replaces imitation (``""`` = none).
    """

    total_timesteps: int = 100_000
    seed: int = 0
    n_envs: int = 4
    torch_threads: int = 1
    checkpoint_every: int = 10_000
    progress_bar: bool = True
    out: str = "runs"
    name: str = ""
    device: str = "cpu"
    tensorboard: bool = True
    max_minutes: float = 0.0
    init_policy: str = ""


@dataclass
class EvalConfig:
    """Evaluation during and after training.

    Attributes:
        eval_every: steps between evaluations on the held-out instances (``0`` = never); the
            best one is kept as ``best_policy/`` (:class:`agents.training.train.Validation`).
        n_eval_episodes: held-out instances per evaluation (greedy rollouts at each
            instance's own size; the first ``n``).
        heldout_instances: held-out instances for a suite run (the single-instance run evaluates
            on its own instance).
        baselines: methods the final comparison runs next to the policy.
        budget: evaluation budget passed to the search baselines (``None`` = their default).
        samples: besides the deterministic rollout, also sample this many stochastic rollouts
            and keep the best placement (``0`` = deterministic only); reported as a separate
            method ``gnn-ppo+N``.
        temperature: softmax temperature of those samples (above 1: more diverse).
        keep_policies: also save the weights of every evaluation as ``eval/policies/<steps>/``
            (a policy directory), so a checkpoint can be chosen afterwards by another rule
            than the evaluation's score (e.g. the network's own rollout on more instances).
    """

    eval_every: int = 10_000
    n_eval_episodes: int = 4
    heldout_instances: int = 4
    baselines: list[str] = field(default_factory=lambda: ["naive", "compute-greedy", "latency-chain-dp"])
    budget: int | None = None
    samples: int = 0
    temperature: float = 1.0
    keep_policies: bool = False


@dataclass
class RunConfig:
    """Everything a training run needs, as one object."""

    env: EnvConfig = field(default_factory=EnvConfig)
    imitation: ImitationConfig = field(default_factory=ImitationConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict (YAML/JSON ready)."""
        return dataclasses.asdict(self)


SECTIONS: dict[str, type] = {
    "env": EnvConfig,
    "imitation": ImitationConfig,
    "ppo": PPOConfig,
    "policy": PolicyConfig,
    "train": TrainConfig,
    "eval": EvalConfig,
}


# --------------------------------------------------------------------------------- coercion
def _coerce(value: Any, kind: Any, source: str | None, key: str) -> Any:
    """``value`` converted to the annotated type ``kind``; a clear error when it cannot be."""
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(kind)
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _coerce(value, inner[0], source, key)
    if origin is list:
        (item,) = typing.get_args(kind)
        if isinstance(value, str):  # "a,b,c" from the command line
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list | tuple):
            raise HulkInputError(f"expected a list, got {value!r}", source=source, field=key)
        return [_coerce(v, item, source, key) for v in value]
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "1", "0"):
            return value.lower() in ("true", "yes", "1")
        raise HulkInputError(f"expected true or false, got {value!r}", source=source, field=key)
    if kind is int:
        if isinstance(value, bool):
            raise HulkInputError(f"expected an integer, got {value!r}", source=source, field=key)
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)  # 1e5 in YAML is a float
        try:
            as_float = float(str(value).replace("_", ""))
        except ValueError:
            as_float = float("nan")
        if as_float.is_integer():
            return int(as_float)
        raise HulkInputError(f"expected an integer, got {value!r}", source=source, field=key)
    if kind is float:
        if isinstance(value, bool):
            raise HulkInputError(f"expected a number, got {value!r}", source=source, field=key)
        try:
            return float(value)  # PyYAML reads "1e-4" (no dot) as a string
        except (TypeError, ValueError):
            raise HulkInputError(f"expected a number, got {value!r}", source=source, field=key) from None
    if kind is str:
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            return str(value)
        raise HulkInputError(f"expected a string, got {value!r}", source=source, field=key)
    raise TypeError(f"unsupported config field type {kind!r}")  # a programming error


def _section_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _apply(config: RunConfig, section: str, key: str, value: Any, source: str | None) -> None:
    """Set ``config.section.key = value`` with type checking."""
    if section not in SECTIONS:
        raise HulkInputError(
            f"unknown config section '{section}'; sections: {', '.join(SECTIONS)}",
            source=source,
            field=section,
        )
    hints = _section_types(SECTIONS[section])
    if key not in hints:
        raise HulkInputError(
            f"unknown key '{section}.{key}'; keys of '{section}': {', '.join(hints)}",
            source=source,
            field=f"{section}.{key}",
        )
    setattr(getattr(config, section), key, _coerce(value, hints[key], source, f"{section}.{key}"))


# ---------------------------------------------------------------------------------- loading
def resolve_config_path(name_or_path: str | Path) -> Path:
    """A config file path: an existing path, or a name under ``agents/configs/``."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    for candidate in (CONFIG_DIR / f"{name_or_path}.yaml", CONFIG_DIR / str(name_or_path)):
        if candidate.is_file():
            return candidate
    known = sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))
    raise HulkInputError(
        f"no config file '{name_or_path}'; give a YAML path or one of: {', '.join(known)}",
        field="config",
    )


def config_from_dict(data: dict[str, Any], source: str | None = None) -> RunConfig:
    """A config from a nested mapping; missing keys keep their defaults."""
    config = RunConfig()
    if data is None:
        return config
    if not isinstance(data, dict):
        raise HulkInputError("a config must be a mapping of sections", source=source)
    for section, values in data.items():
        if values is None:
            continue
        if not isinstance(values, dict):
            raise HulkInputError(
                f"section '{section}' must be a mapping of keys", source=source, field=str(section)
            )
        for key, value in values.items():
            _apply(config, str(section), str(key), value, source)
    return config


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> RunConfig:
    """Read a YAML config (``None``: ``agents/configs/default.yaml``), then apply overrides.

    Args:
        path: a YAML file or a config name under ``agents/configs/``.
        overrides: ``section.key=value`` strings; values are parsed as YAML scalars/lists.
    """
    file = resolve_config_path(path if path is not None else "default")
    config = config_from_dict(read_config_file(file), source=str(file))
    return validate_config(apply_overrides(config, overrides), str(file), overrides)


def read_config_file(file: Path) -> Any:
    """A config file's YAML, read safely (size, encoding, nesting, aliases, duplicate keys)."""
    from hulk_env.validation import limits
    from hulk_env.validation.reading import load_yaml, read_text

    return load_yaml(read_text(file, limits.MAX_SMALL_FILE_BYTES, what="config file"), str(file))


def validate_config(
    config: RunConfig,
    source: str | None = None,
    overrides: tuple[str, ...] | list[str] = (),
    methods: Collection[str] | None = None,
) -> RunConfig:
    """Check every setting's range, type and name (:class:`hulk_env.validation.schemas.RunConfigSchema`).

    Runs before anything is created for a run. Names are checked against what exists: suites,
    cities, and -- when ``methods`` is given (``agents.training.train`` gives every baseline and agent
    method) -- ``eval.baselines``. A bad value set by an override is reported at ``--set``, one
    from the file at ``source``.

    Raises:
        HulkInputError: the first bad setting, as ``<source>: field 'section.key': ...``.
    """
    from hulk_env.evaluation import suite_names
    from hulk_env.hardware import geo
    from hulk_env.validation.schemas import RunConfigSchema, validate

    context = {
        "methods": methods,
        "suites": suite_names(),
        "cities": lambda name: geo.find_city(name) is not None,
    }
    try:
        validate(RunConfigSchema, config.to_dict(), source or "config", rows="key", context=context)
    except HulkInputError as err:
        overridden = {item.partition("=")[0].strip() for item in overrides}
        if err.field in overridden or source is None:
            raise HulkInputError(err.message, source="--set", field=err.field) from None
        raise
    return config


def apply_overrides(config: RunConfig, overrides: list[str] | tuple[str, ...]) -> RunConfig:
    """Apply ``section.key=value`` overrides in order (later ones win)."""
    for item in overrides:
        key, sep, raw = item.partition("=")
        section, dot, name = key.strip().partition(".")
        if not sep or not dot or not name:
            raise HulkInputError(
                f"override '{item}' must look like section.key=value (e.g. ppo.learning_rate=1e-4)",
                field="--set",
            )
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        _apply(config, section, name, value, "--set")
    return config


def config_text(config: RunConfig) -> str:
    """The resolved config as the YAML a run directory keeps (``config.yaml``)."""
    return yaml.safe_dump(config.to_dict(), sort_keys=False)


def save_config(config: RunConfig, path: Path) -> None:
    """Write the resolved config as YAML (atomically)."""
    atomic_write_text(path, config_text(config))


@dataclass(frozen=True)
class TrainSettings:
    """What a caller changes about a training run, as one record.

    ``hulk train``, ``hulk bench train``, the experiments and the tests build one of these and
    :meth:`resolve` turns it into a :class:`RunConfig` in one fixed order: the base config, then
    ``overrides`` in order (later ones win), then each named field that is set (they win over
    both).

    Attributes:
        config: the base: a config name under ``agents/configs/`` or a YAML path (``None``:
            ``default``), or a :class:`RunConfig` (e.g. one embedded in an experiment's file).
        overrides: ``section.key=value`` strings (``--set``).
        total_timesteps: ``train.total_timesteps`` (``None``: the base's).
        seed: ``train.seed``.
        out: ``train.out``, the directory under which the run directory is created.
        name: ``train.name``, the run directory's name.
        progress_bar: ``train.progress_bar``.
    """

    config: str | Path | RunConfig | None = None
    overrides: tuple[str, ...] = ()
    total_timesteps: int | None = None
    seed: int | None = None
    out: str | Path | None = None
    name: str | None = None
    progress_bar: bool | None = None

    @property
    def label(self) -> str:
        """Prefix of a new run directory's name when ``name`` is not set: the config's name."""
        if isinstance(self.config, RunConfig):
            return "run"
        return Path(self.config).stem if self.config is not None else "default"

    def resolve(self) -> RunConfig:
        """The run's configuration (see the class docstring for the order)."""
        if isinstance(self.config, RunConfig):
            config = config_from_dict(self.config.to_dict())  # a copy: the base stays as it was
        else:
            config = load_config(self.config)
        apply_overrides(config, tuple(self.overrides))
        for key, value in (
            ("total_timesteps", self.total_timesteps), ("seed", self.seed), ("out", self.out),
            ("name", self.name), ("progress_bar", self.progress_bar),
        ):  # fmt: skip
            if value is not None:
                _apply(config, "train", key, str(value) if isinstance(value, Path) else value, None)
        named = [f"train.{key}=" for key in ("total_timesteps", "seed", "out", "name", "progress_bar")
                 if getattr(self, key) is not None]  # fmt: skip
        base = None if isinstance(self.config, RunConfig) else str(resolve_config_path(self.config or "default"))
        return validate_config(config, base, (*self.overrides, *named))


def lookahead_mode(config: RunConfig) -> bool | str:
    """What the inference and saved-policy code take as ``lookahead``: ``False`` (none),
    ``True`` (the stay completion, as every policy saved before ``env.completion`` existed) or
    the completion rule's name."""
    env = config.env
    return env.completion if env.lookahead and env.completion != "stay" else bool(env.lookahead)
