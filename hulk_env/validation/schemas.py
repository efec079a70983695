"""Schemas of the files and settings users give: pydantic v2 models, errors as one located line.

Models (every one ``extra="forbid"``, so a misspelt key is an error that suggests the right one):

* :class:`ClusterFile` -- a YAML/JSON cluster file (:mod:`hulk_env.cluster.files`);
* :func:`workload_file_model` -- a YAML/JSON workload file; its ``transformer`` block and
  top-level training keys are built from the ``TransformerConfig`` fields the loader passes, so
  a field added there is accepted here with default bounds;
* :class:`PolicyFile` -- a saved policy's ``policy.json``;
* :class:`RunConfigSchema` -- the agent's resolved run config (``agents.training.config.RunConfig``).

Every number is parsed by one rule (:func:`Number`, built on
:func:`hulk_env.validation.numbers.parse_number_value`) and each bound names its limit in
:mod:`hulk_env.validation.limits`. Semantic checks that need the catalogs (a city, a GPU, a
cycle in the layer graph) stay in the loaders; these models check shape, types and limits, so
that a loader never allocates from an unchecked count.

:func:`validate` runs a model and turns the first error into a :class:`HulkInputError`: the
file as ``source``; as ``row`` either the 1-based line of the innermost mapping (``rows="line"``,
read from the key the YAML reader stored it under) or the item path (``rows="path"``:
``layers[3]``); the key as ``field``. With ``rows="key"`` there is no row and the field is the
dotted key path (``ppo.batch_size``, as ``--set`` writes it).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from functools import lru_cache, partial
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    ValidationError,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from hulk_env.errors import HulkInputError
from hulk_env.validation import limits
from hulk_env.validation.numbers import NumberProblem, parse_number_value
from hulk_env.validation.reading import safe_repr

LINE_KEY = "__line__"  # where the YAML reader stores a mapping's line (reading.read_mapping)
_ERROR = "hulk"  # the pydantic error type of every message written here


def _fail(message: str, **ctx: Any) -> PydanticCustomError:
    """A pydantic error carrying our message; ``ctx`` may set ``field`` or ``loc`` overrides."""
    return PydanticCustomError(_ERROR, message.replace("{", "{{").replace("}", "}}"), ctx or None)


# ---- scalars -----------------------------------------------------------------------------------

def _pydantic_number(value: Any, **rule: Any) -> int | float:
    try:
        return parse_number_value(value, **rule)
    except NumberProblem as problem:
        raise _fail(str(problem)) from None


def Number(  # noqa: N802 - a type factory, used like a type
    ge: float | None = None,
    le: float | None = None,
    *,
    integer: bool = False,
    positive: bool = False,
    limit_low: str | None = None,
    limit_high: str | None = None,
    unit: str = "",
) -> Any:
    """An ``int`` (``integer=True``) or ``float`` parsed by the module's one number rule.

    Args:
        ge, le: inclusive bounds.
        positive: must be > 0 (checked before ``ge``, for the plainer message).
        limit_low, limit_high: names in :mod:`~hulk_env.validation.limits` the bounds come from.
        unit: printed after a bound (``"TFLOP/s"``).
    """
    parse = partial(
        _pydantic_number,
        integer=integer,
        ge=ge,
        le=le,
        positive=positive,
        limit_low=limit_low,
        limit_high=limit_high,
        unit=unit,
    )
    return Annotated[int if integer else float, BeforeValidator(parse)]


def _parse_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    raise _fail(f"expected true or false, got {safe_repr(value)}")


def _parse_text(value: Any, *, name: bool) -> str:
    limit = limits.MAX_NAME_CHARS if name else limits.MAX_SCALAR_CHARS
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise _fail(f"expected {'a name' if name else 'text'}, got {safe_repr(value)}")
    text = str(value).strip() if name else str(value)
    if name and not text:
        raise _fail("must not be empty")
    if len(text) > limit:
        which = "MAX_NAME_CHARS" if name else "MAX_SCALAR_CHARS"
        raise _fail(f"has {len(text):,} characters, more than {limit:,} ({limits.cite(which)})")
    if name and any(ch in text for ch in "\n\r\x00"):
        raise _fail("must be on one line")
    return text


Bool = Annotated[bool, BeforeValidator(_parse_bool)]
Name = Annotated[str, BeforeValidator(partial(_parse_text, name=True))]
Text = Annotated[str, BeforeValidator(partial(_parse_text, name=False))]


def _choice(options: Sequence[str]) -> Any:
    def parse(value: Any) -> str:
        text = _parse_text(value, name=True)
        if text not in options:
            close = difflib.get_close_matches(text, list(options), n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise _fail(f"must be one of {', '.join(options)}, got {safe_repr(value)}{hint}")
        return text

    return Annotated[str, BeforeValidator(parse)]


def _items(
    max_items: int, limit: str, *, min_items: int = 0, what: str = "items"
) -> Callable[[Any], Any]:
    """Check a list's length before its items are validated (never iterate a huge list)."""

    def check(value: Any) -> Any:
        if not isinstance(value, list | tuple):
            raise _fail(f"expected a list, got {safe_repr(value)}")
        if len(value) < min_items:
            raise _fail(f"must be a list of at least {min_items} {what}, got {len(value)}")
        if len(value) > max_items:
            raise _fail(
                f"has {len(value):,} {what}, more than {max_items:,} ({limits.cite(limit)})"
            )
        return value

    return check


# ---- the base model ------------------------------------------------------------------------------


class Strict(BaseModel):
    """Unknown keys refused with a suggestion; the YAML reader's line key ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)
    WHAT: ClassVar[str] = "the top level"  # "unknown key in <WHAT>"

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            raise _fail(f"expected a mapping (key: value pairs), got {safe_repr(data)}")
        allowed = list(cls.model_fields)
        for key in data:
            if key == LINE_KEY:
                continue
            if not isinstance(key, str):
                raise _fail(f"keys must be text, got {safe_repr(key)}", field=safe_repr(key))
            if key not in allowed:
                close = difflib.get_close_matches(key, allowed, n=1)
                hint = f"did you mean '{close[0]}'?" if close else f"valid keys: {', '.join(allowed)}"
                raise _fail(f"unknown key in {cls.WHAT}; {hint}", field=key)
        return {k: v for k, v in data.items() if k != LINE_KEY}


# ---- cluster files --------------------------------------------------------------------------------

TFLOPS = 1e12  # (units are not imported: this package sits below every instance module)
GB = 1e9


class MachineEntry(Strict):
    """One entry of a cluster file's ``machines`` list (format: :mod:`hulk_env.cluster.files`)."""

    WHAT: ClassVar[str] = "a machine"
    name: Name | None = None
    region: Name | None = None  # required: the loader says how to give it
    lat: Number(-90, 90) | None = None
    lon: Number(-180, 180) | None = None
    gpu: Name | None = None
    num_gpus: Number(1, limits.MAX_GPUS_PER_MACHINE, integer=True, limit_high="MAX_GPUS_PER_MACHINE") = 1
    count: Number(1, limits.MAX_MACHINES, integer=True, limit_high="MAX_MACHINES") = 1
    intra_node_gb_per_s: Number(0, 1e5, positive=True, unit="GB/s") | None = None
    usd_per_hour: Number(0, 1e6, unit="USD") | None = None
    tflops: Number(
        limits.MIN_MACHINE_FLOPS / TFLOPS,
        limits.MAX_MACHINE_FLOPS / TFLOPS,
        positive=True,
        limit_low="MIN_MACHINE_FLOPS",
        limit_high="MAX_MACHINE_FLOPS",
        unit="TFLOP/s",
    ) | None = None
    memory_gb: Number(
        limits.MIN_MACHINE_MEMORY_BYTES / GB,
        limits.MAX_MACHINE_MEMORY_BYTES / GB,
        positive=True,
        limit_low="MIN_MACHINE_MEMORY_BYTES",
        limit_high="MAX_MACHINE_MEMORY_BYTES",
        unit="GB",
    ) | None = None


class LinkEntry(Strict):
    """One entry of a cluster file's ``links`` list."""

    WHAT: ClassVar[str] = "a link"
    a: Name | None = None
    b: Name | None = None
    latency_ms: Number(0, limits.MAX_LATENCY_MS, limit_high="MAX_LATENCY_MS", unit="ms") | None = None
    rtt_ms: Number(0, 2 * limits.MAX_LATENCY_MS, limit_high="MAX_LATENCY_MS", unit="ms") | None = None  # round trip
    bandwidth_gbps: Number(
        limits.MIN_BANDWIDTH_GBPS,
        limits.MAX_BANDWIDTH_GBPS,
        positive=True,
        limit_low="MIN_BANDWIDTH_GBPS",
        limit_high="MAX_BANDWIDTH_GBPS",
        unit="Gbit/s",
    ) | None = None


class ClusterFile(Strict):
    """A YAML/JSON cluster file: sizes checked before a single machine is built.

    The ``count`` of all entries together is at most ``MAX_MACHINES``; links are checked by
    the loader (which knows how many machines each end names) against ``MAX_LINK_PAIRS``.
    """

    name: Name | None = None
    description: Text | None = None
    mfu: Number(0, 1, positive=True, unit="(a fraction of peak)") | None = None
    machines: Annotated[
        list[MachineEntry],
        BeforeValidator(_items(limits.MAX_MACHINES, "MAX_MACHINES", what="entries")),
    ] | None = None
    links: Annotated[
        list[LinkEntry],
        BeforeValidator(_items(limits.MAX_LINK_PAIRS, "MAX_LINK_PAIRS", what="links")),
    ] | None = None

    @model_validator(mode="after")
    def _machine_total(self) -> ClusterFile:
        total = 0
        for i, entry in enumerate(self.machines or ()):
            total += entry.count
            if total > limits.MAX_MACHINES:
                raise _fail(
                    f"the machines' counts add up to more than {limits.MAX_MACHINES:,} machines "
                    f"({limits.cite('MAX_MACHINES')})",
                    loc=("machines", i, "count"),
                )
        return self


# ---- workload files ---------------------------------------------------------------------------------


class LayerEntry(Strict):
    """One entry of a workload file's explicit ``layers`` list (per micro-batch)."""

    WHAT: ClassVar[str] = "a layer"
    name: Name | None = None  # required: the loader says so
    flops: Number(0, limits.MAX_LAYER_FLOPS, limit_high="MAX_LAYER_FLOPS") | None = None
    tflops: Number(0, limits.MAX_LAYER_FLOPS / TFLOPS, limit_high="MAX_LAYER_FLOPS") | None = None
    params: Number(0, limits.MAX_LAYER_PARAMS, limit_high="MAX_LAYER_PARAMS") | None = None
    activation_bytes: Number(0, limits.MAX_LAYER_BYTES, limit_high="MAX_LAYER_BYTES") | None = None
    activation_mb: Number(0, limits.MAX_LAYER_BYTES / 1e6, limit_high="MAX_LAYER_BYTES") | None = None
    stash_bytes: Number(0, limits.MAX_LAYER_BYTES, limit_high="MAX_LAYER_BYTES") | None = None
    stash_mb: Number(0, limits.MAX_LAYER_BYTES / 1e6, limit_high="MAX_LAYER_BYTES") | None = None


def _edge(value: Any) -> Any:
    if not isinstance(value, list | tuple) or len(value) != 2:
        raise _fail(f"must be a [from, to] pair, got {safe_repr(value)}", field="edges")
    ends = []
    for end in value:
        if isinstance(end, bool) or not isinstance(end, int | str):
            raise _fail(f"an end must be a layer name or index, got {safe_repr(end)}", field="edges")
        if isinstance(end, str) and len(end) > limits.MAX_NAME_CHARS:
            raise _fail(f"an end of {len(end):,} characters is no layer name ({limits.cite('MAX_NAME_CHARS')})", field="edges")
        ends.append(end)
    return ends


# Bounds of TransformerConfig fields and top-level training keys, by name; a field not named
# here gets the bounds of its type (_DEFAULT_BOUNDS).
_SETTING_BOUNDS: dict[str, tuple[float, float, str | None]] = {
    "num_layers": (1, limits.MAX_TRANSFORMER_BLOCKS, "MAX_TRANSFORMER_BLOCKS"),
    "num_decoder_layers": (0, limits.MAX_TRANSFORMER_BLOCKS, "MAX_TRANSFORMER_BLOCKS"),
    "layers_per_block": (1, limits.MAX_TRANSFORMER_BLOCKS, "MAX_TRANSFORMER_BLOCKS"),
    "micro_batch_size": (1, limits.MAX_MICRO_BATCH_SIZE, "MAX_MICRO_BATCH_SIZE"),
    "num_micro_batches": (1, limits.MAX_MICRO_BATCHES, "MAX_MICRO_BATCHES"),
    "data_parallel": (1, limits.MAX_DATA_PARALLEL, "MAX_DATA_PARALLEL"),
    "max_positions": (0, limits.MAX_TRANSFORMER_DIM, "MAX_TRANSFORMER_DIM"),
    # plan settings; the workload checks the exact choices (zero 0-3, bits 32/16/8/4)
    "tensor_parallel": (0, 64, None),
    "zero": (0, 3, None),
    "inner_steps": (1, 1_000_000, None),
    "outer_bits": (4, 32, None),
    # mixture of experts: 0 = a dense model / no shared experts / no dense blocks
    "num_experts": (0, limits.MAX_TRANSFORMER_DIM, "MAX_TRANSFORMER_DIM"),
    "shared_experts": (0, limits.MAX_TRANSFORMER_DIM, "MAX_TRANSFORMER_DIM"),
    "first_dense_layers": (0, limits.MAX_TRANSFORMER_BLOCKS, "MAX_TRANSFORMER_BLOCKS"),
}
_DEFAULT_BOUNDS = {
    "int": (1, limits.MAX_TRANSFORMER_DIM, "MAX_TRANSFORMER_DIM"),
    "float": (0, limits.MAX_BYTES_PER_VALUE, "MAX_BYTES_PER_VALUE"),
}


def _setting_type(name: str, annotation: str) -> Any:
    """The schema type of one TransformerConfig field, from its annotation text (``"int | None"``)."""
    parts = [p.strip() for p in annotation.split("|")]
    base, optional = parts[0], "None" in parts[1:]
    if base == "bool":
        kind: Any = Bool
    elif base in _DEFAULT_BOUNDS:
        low, high, limit = _SETTING_BOUNDS.get(name, _DEFAULT_BOUNDS[base])
        kind = Number(low, high, integer=base == "int", limit_high=limit)
    else:
        kind = Name
    return (kind | None) if optional else kind


class _TransformerBase(Strict):
    WHAT: ClassVar[str] = "'transformer'"


@lru_cache(maxsize=8)
def workload_file_model(
    settings: tuple[tuple[str, str], ...], training_keys: tuple[str, ...]
) -> type[Strict]:
    """The model of a workload file, given ``TransformerConfig``'s ``(field, annotation)`` pairs.

    ``training_keys`` may also sit at the top level. The loader passes these (this package
    cannot import the workload package, which imports it), so fields added there are covered.
    """
    types = {name: _setting_type(name, annotation) for name, annotation in settings}
    block = create_model(
        "TransformerBlock",
        __base__=_TransformerBase,
        **{name: (kind | None, None) for name, kind in types.items()},
    )
    top = {name: (types[name] | None, None) for name in training_keys if name in types}
    return create_model(
        "WorkloadFile",
        __base__=Strict,
        name=(Name | None, None),
        description=(Text | None, None),
        transformer=(block | None, None),
        layers=(
            Annotated[
                list[LayerEntry],
                BeforeValidator(_items(limits.MAX_LAYERS, "MAX_LAYERS", min_items=1, what="layers")),
            ]
            | None,
            None,
        ),
        edges=(
            Annotated[
                list[Annotated[list, BeforeValidator(_edge)]],
                BeforeValidator(_items(limits.MAX_LAYER_EDGES, "MAX_LAYER_EDGES", what="edges")),
            ]
            | None,
            None,
        ),
        **top,
    )


# ---- saved policies ----------------------------------------------------------------------------------


class PolicyArchitecture(Strict):
    """The network of a policy (``policy`` in ``policy.json``; the ``policy`` config section)."""

    WHAT: ClassVar[str] = "'policy'"
    extractor: _choice(("gnn", "mlp"))
    hidden_dim: Number(1, limits.MAX_HIDDEN_DIM, integer=True, limit_high="MAX_HIDDEN_DIM")
    machine_rounds: Number(0, limits.MAX_ROUNDS, integer=True, limit_high="MAX_ROUNDS")
    layer_rounds: Number(0, limits.MAX_ROUNDS, integer=True, limit_high="MAX_ROUNDS")
    heads: Number(1, limits.MAX_HEADS, integer=True, limit_high="MAX_HEADS")
    gain_prior: Number(0, 1000) = 3.0  # initial logit weight of the lookahead gain (agents.network.policy)

    @model_validator(mode="after")
    def _heads_divide(self) -> PolicyArchitecture:
        if self.extractor == "gnn" and self.hidden_dim % self.heads:
            raise _fail(
                f"hidden_dim {self.hidden_dim} must be a multiple of heads {self.heads} "
                "(each attention head takes hidden_dim / heads)",
                loc=("hidden_dim",),
            )
        return self


class PolicyPadding(Strict):
    """The padding a policy was trained with: the largest instance it places."""

    WHAT: ClassVar[str] = "'padding'"
    max_machines: Number(1, limits.MAX_MACHINES, integer=True, limit_high="MAX_MACHINES")
    max_layers: Number(1, limits.MAX_SLOTS, integer=True, limit_high="MAX_SLOTS")
    max_edges: Number(1, limits.MAX_SLOTS * 16, integer=True, limit_high="MAX_SLOTS")


# The lookahead's completion rules (agents.training.shaping.COMPLETIONS; a test keeps them equal),
# and the shaping's: also the env's witness completion, which has no per-candidate form.
LOOKAHEAD_COMPLETIONS = ("stay", "pipeline", "split")
SHAPING_COMPLETIONS = (*LOOKAHEAD_COMPLETIONS, "witness")


def _parse_lookahead(value: Any) -> bool | str:
    """A saved policy's ``lookahead``: true / false (the stay completion) or a completion rule."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value in LOOKAHEAD_COMPLETIONS:
        return value
    raise _fail(f"expected true, false or one of {', '.join(map(repr, LOOKAHEAD_COMPLETIONS))}, got {safe_repr(value)}")


class PolicyObservation(Strict):
    WHAT: ClassVar[str] = "'observation'"
    lookahead: Annotated[bool | str, BeforeValidator(_parse_lookahead)] = False
    plan: Bool = False


_SHA256 = re.compile(r"[0-9a-f]{64}")


class PolicyFile(Strict):
    """``policy.json`` (format ``hulk-policy/1``): what to build, and which weights to load."""

    format: Literal["hulk-policy/1"]
    env_id: Name
    policy: PolicyArchitecture
    padding: PolicyPadding
    observation: PolicyObservation = PolicyObservation()
    weights: Name
    weights_sha256: Name
    num_timesteps: Number(0, limits.MAX_TIMESTEPS, integer=True, limit_high="MAX_TIMESTEPS") | None = None
    mean_reward: Number() | None = None

    @field_validator("weights")
    @classmethod
    def _plain_file_name(cls, value: str) -> str:
        if "/" in value or "\\" in value or value in (".", ".."):
            raise _fail(f"must be a file name inside the policy directory, got {safe_repr(value)}")
        return value

    @field_validator("weights_sha256")
    @classmethod
    def _hex_digest(cls, value: str) -> str:
        if not _SHA256.fullmatch(value):
            raise _fail("must be a SHA-256 digest (64 lowercase hex digits)")
        return value


# ---- the agent's run config ---------------------------------------------------------------------------

_RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+=-]*")
_DEVICE = re.compile(r"cpu|cuda(:\d+)?|mps|auto")


def _known(context_key: str, what: str) -> Callable[[Any, ValidationInfo], Any]:
    """A validator checking names against ``info.context[context_key]`` (when given): a
    collection of the valid names, or a function telling whether a name is valid."""

    def check(value: Any, info: ValidationInfo) -> Any:
        known = (info.context or {}).get(context_key)
        if known is None:
            return value
        for name in [value] if isinstance(value, str) else value:
            if not name or (known(name) if callable(known) else name in known):
                continue
            if callable(known):
                raise _fail(f"unknown {what} '{name}'")
            close = difflib.get_close_matches(str(name), list(known), n=1)
            hint = f"did you mean '{close[0]}'?" if close else f"choose from {', '.join(sorted(known))}"
            raise _fail(f"unknown {what} '{name}'; {hint}")
        return value

    return check


class EnvSection(Strict):
    WHAT: ClassVar[str] = "'env'"
    generator: _choice(("fixed", "suite", "toy", "random", "generalist"))
    cluster: Name
    model: Name
    data_parallel: Number(1, limits.MAX_DATA_PARALLEL, integer=True, limit_high="MAX_DATA_PARALLEL") | None
    num_micro_batches: Number(1, limits.MAX_MICRO_BATCHES, integer=True, limit_high="MAX_MICRO_BATCHES") | None
    suite: Text
    suite_instances: Number(0, 10**6, integer=True)
    heldout_suite: Text
    max_machines: Number(0, limits.MAX_MACHINES, integer=True, limit_high="MAX_MACHINES")
    max_layers: Number(0, limits.MAX_SLOTS, integer=True, limit_high="MAX_SLOTS")
    max_edges: Number(0, limits.MAX_SLOTS * 16, integer=True, limit_high="MAX_SLOTS")
    reward: _choice(("terminal", "dense", "stay", "cost", "mixed"))
    invalid_action: _choice(("fallback", "penalty"))
    lookahead: Bool
    completion: _choice(SHAPING_COMPLETIONS)  # the lookahead's and shaping's completion (agents.training.shaping)
    plan: Bool
    plan_settings: Bool  # random generator: draw plan settings per instance
    cities: list[Name]
    machines: list[Number(1, limits.MAX_MACHINES, integer=True, limit_high="MAX_MACHINES")]

    check_suites = field_validator("suite", "heldout_suite")(_known("suites", "suite"))
    check_cities = field_validator("cities")(_known("cities", "city"))


class ImitationSection(Strict):
    WHAT: ClassVar[str] = "'imitation'"
    demonstrations: Number(0, 10**6, integer=True)
    methods: list[Name]
    polish_budget: Number(0, limits.MAX_BUDGET, integer=True, limit_high="MAX_BUDGET")
    epochs: Number(0, 10**5, integer=True)
    dagger_rounds: Number(0, 100, integer=True)
    learning_rate: Number(0, 1, positive=True)
    batch_steps: Number(1, 10**7, integer=True)
    vf_coef: Number(0, 100)
    decision_weight: Number(0, 1000, positive=True)
    max_minutes: Number(0, 10**7)

    check_methods = field_validator("methods")(_known("methods", "baseline method"))


class PPOSection(Strict):
    WHAT: ClassVar[str] = "'ppo'"
    learning_rate: Number(0, 1, positive=True)
    n_steps: Number(1, 10**7, integer=True)
    batch_size: Number(1, 10**7, integer=True)
    n_epochs: Number(1, 10**4, integer=True)
    gamma: Number(0, 1)
    gae_lambda: Number(0, 1)
    clip_range: Number(0, 10, positive=True)
    ent_coef: Number(0, 100)
    vf_coef: Number(0, 100)
    max_grad_norm: Number(0, 1e6, positive=True)
    target_kl: Number(0, 100, positive=True) | None
    normalize_advantage: Bool
    anneal_lr: Bool
    trainable: _choice(("all", "signals"))  # agents.training.imitation.TRAINABLE (a test keeps them equal)

    @model_validator(mode="after")
    def _minibatch(self) -> PPOSection:
        if self.normalize_advantage and self.batch_size < 2:
            raise _fail(
                "must be >= 2 with normalize_advantage (one sample has no spread to normalise by), "
                f"got {self.batch_size}",
                loc=("batch_size",),
            )
        return self


class TrainSection(Strict):
    WHAT: ClassVar[str] = "'train'"
    total_timesteps: Number(0, limits.MAX_TIMESTEPS, integer=True, limit_high="MAX_TIMESTEPS")
    seed: Number(0, limits.MAX_SEED, integer=True, limit_high="MAX_SEED")
    n_envs: Number(1, limits.MAX_ENVS, integer=True, limit_high="MAX_ENVS")
    torch_threads: Number(1, limits.MAX_THREADS, integer=True, limit_high="MAX_THREADS")
    checkpoint_every: Number(0, limits.MAX_TIMESTEPS, integer=True, limit_high="MAX_TIMESTEPS")
    progress_bar: Bool
    out: Name
    name: Text
    device: Name
    tensorboard: Bool
    max_minutes: Number(0, 10**7)
    init_policy: Text

    @field_validator("name")
    @classmethod
    def _run_name(cls, value: str) -> str:
        if value and (not _RUN_NAME.fullmatch(value) or len(value) > limits.MAX_NAME_CHARS):
            raise _fail(
                f"a run name is one directory name of letters, digits and . _ + = - (not starting "
                f"with . or -), got {safe_repr(value)}"
            )
        return value

    @field_validator("device")
    @classmethod
    def _device(cls, value: str) -> str:
        if not _DEVICE.fullmatch(value):
            raise _fail(f"must be cpu, cuda, cuda:N, mps or auto, got {safe_repr(value)}")
        return value


class EvalSection(Strict):
    WHAT: ClassVar[str] = "'eval'"
    eval_every: Number(0, limits.MAX_TIMESTEPS, integer=True, limit_high="MAX_TIMESTEPS")
    n_eval_episodes: Number(1, 10**6, integer=True)
    heldout_instances: Number(1, 10**5, integer=True)
    baselines: list[Name]
    budget: Number(1, limits.MAX_BUDGET, integer=True, limit_high="MAX_BUDGET") | None
    samples: Number(0, 10**4, integer=True)
    temperature: Number(0, 1e3, positive=True)
    keep_policies: bool

    check_methods = field_validator("baselines")(_known("methods", "baseline method"))


class RunConfigSchema(Strict):
    """A resolved run config (every key present): ranges, names and cross-key rules.

    Validate with ``context={"methods": ..., "suites": ..., "cities": ...}`` to check names
    against what exists (each optional; a collection of names or a predicate).
    """

    env: EnvSection
    imitation: ImitationSection
    ppo: PPOSection
    policy: PolicyArchitecture
    train: TrainSection
    eval: EvalSection

    @model_validator(mode="after")
    def _rollout(self) -> RunConfigSchema:
        if self.ppo.n_steps * self.train.n_envs < 2:
            raise _fail(
                "ppo.n_steps x train.n_envs must be >= 2 (a rollout of one step cannot be "
                "normalised)",
                loc=("ppo", "n_steps"),
            )
        if self.ppo.trainable == "signals" and self.policy.extractor != "gnn":
            raise _fail(
                "ppo.trainable=signals trains the GNN pointer head's signal weights: set policy.extractor=gnn "
                "or ppo.trainable=all",
                loc=("ppo", "trainable"),
            )
        if self.env.lookahead and self.env.completion == "witness":
            raise _fail(
                "env.completion=witness shapes the reward only (the env's witness is one completion, "
                "not one per candidate machine): set env.lookahead=false, or another completion",
                loc=("env", "completion"),
            )
        if self.train.init_policy and self.imitation.demonstrations > 0:
            raise _fail(
                "train.init_policy starts from saved weights and imitation.demonstrations clones "
                "new ones: set one of them (imitation.demonstrations=0 to fine-tune the saved policy)",
                loc=("train", "init_policy"),
            )
        return self


# ---- from pydantic's errors to one line ----------------------------------------------------------------

_STANDARD = {  # pydantic's own error types, in our words
    "missing": "missing required key",
    "model_type": "expected a mapping (key: value pairs)",
    "model_attributes_type": "expected a mapping (key: value pairs)",
    "dict_type": "expected a mapping (key: value pairs)",
    "list_type": "expected a list",
    "string_type": "expected text",
    "bool_type": "expected true or false",
    "bool_parsing": "expected true or false",
    "int_type": "expected an integer",
    "int_parsing": "expected an integer",
    "float_type": "expected a number",
    "float_parsing": "expected a number",
    "literal_error": "must be",
}


def _render_path(loc: Sequence[Any]) -> str | None:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or None


def _locate(
    loc: tuple[Any, ...], data: Any, rows: str, field: str | None
) -> tuple[int | str | None, str | None]:
    """``(row, field)`` for an error at ``loc`` in ``data`` (see the module docstring).

    ``field`` is the key at fault when the error names it (an unknown key); otherwise the last
    part of ``loc`` when that is a key. The rest of ``loc`` is the container: rendered as a
    path (``layers[3]``), or for ``rows="line"`` the line of that mapping.
    """
    if rows == "key":
        return None, ".".join(str(p) for p in (*loc, *([field] if field else [])) if p != "") or None
    container = loc
    if field is None and loc and isinstance(loc[-1], str):
        container, field = loc[:-1], str(loc[-1])
    if not container:
        return None, field
    row: int | str | None = _render_path(container)
    if rows == "line":
        node = data
        for part in container:
            try:
                node = node[part]
            except (KeyError, IndexError, TypeError):
                return row, field
        if isinstance(node, Mapping) and isinstance(node.get(LINE_KEY), int):
            row = node[LINE_KEY]
    return row, field


def to_input_error(
    err: ValidationError, data: Any, source: str, rows: Literal["line", "path", "key"] = "path"
) -> HulkInputError:
    """The first error of ``err`` as a :class:`HulkInputError` at its file, row and key."""
    first = err.errors(include_url=False, include_input=True)[0]
    ctx = first.get("ctx") or {}
    loc = tuple(first["loc"]) + tuple(ctx.get("loc") or ())  # ctx["loc"]: below the raiser
    kind = first["type"]
    if kind == _ERROR:
        message = first["msg"]
    elif kind in _STANDARD:
        message = _STANDARD[kind]
        if kind == "literal_error":
            message = f"must be {ctx.get('expected', '')}"
        if kind != "missing":
            message += f", got {safe_repr(first.get('input'))}"
    else:
        text = str(first["msg"])
        message = f"{text[:1].lower()}{text[1:]}"
    row, field = _locate(loc, data, rows, ctx.get("field"))
    return HulkInputError(message, source=source, row=row, field=field)


def validate(
    model: type[BaseModel],
    data: Any,
    source: str,
    *,
    rows: Literal["line", "path", "key"] = "path",
    context: Mapping[str, Collection[str]] | None = None,
) -> BaseModel:
    """``model.model_validate(data)``, its first error as a located :class:`HulkInputError`."""
    try:
        return model.model_validate(data, context=dict(context) if context else None)
    except ValidationError as err:
        raise to_input_error(err, data, source, rows) from None


__all__ = [
    "LINE_KEY",
    "ClusterFile",
    "LayerEntry",
    "LinkEntry",
    "MachineEntry",
    "Number",
    "PolicyArchitecture",
    "PolicyFile",
    "PolicyPadding",
    "RunConfigSchema",
    "Strict",
    "to_input_error",
    "validate",
    "workload_file_model",
]
