"""A ``torch.nn.Module`` to a workload file (the explicit ``layers:`` form).

``MODULE:FACTORY`` names a callable (a function or a class) in a module importable from the
current directory or ``PYTHONPATH``; it must return an ``nn.Module`` and is called with no
arguments under ``torch.device("meta")``, so the weights take no memory. The module is cast to
the training dtype (``bfloat16`` by default: mixed precision keeps activations in 16 bits),
put in training mode, and traced with :mod:`torch.fx` into a graph whose leaves are its
blocks.

Blocks (the layers of the workload) are the module's children at ``block_depth`` (1 = the
top-level children); containers (``nn.Sequential``, ``nn.ModuleList``, ``nn.ModuleDict``) are
looked through, so ``self.blocks = nn.ModuleList([...])`` gives one layer per block. An
operation written directly in a traced ``forward`` (a residual add, a reshape, a final
``F.linear`` on a tied weight) joins the latest block whose output it reads, or, reading only
the inputs, the first block that reads it; the edges of the layer graph are the data flowing
between blocks.

A parameter-free block called at several points (one pooling or activation module reused
across a U-Net) is not a layer of its own: each call joins the block whose output it reads, as
a root-level operation does. A block with parameters called twice (shared weights) is refused:
its layer would have to live on two machines.

Input dtypes, unless given: each input follows the first operation that consumes it (found by
running the module once under a ``TorchFunctionMode``): an embedding (or ``one_hot``) takes
integer ids (``long``), anything else (a convolution, a linear layer, a norm) a float tensor of
the training dtype; views and shape queries pass the decision on to their result.

Data-dependent control flow (routing tokens by ``torch.nonzero``, boolean masks or ``topk``
indices, ``.item()``) cannot be measured on meta tensors: it is refused in one line saying so and
what to do instead (the dense-dispatch form of a mixture of experts, or ``hulk import hf`` /
a transformer with ``num_experts``).

Per layer and per micro-batch (the input shapes are one micro-batch):

* ``params``: the parameters of its modules, each counted once (a tied weight on its first
  owner, as ``module.parameters()`` lists it); a parameter no block uses goes on the first
  layer. They add up to ``sum(p.numel() for p in module.parameters())`` exactly.
* ``flops``: forward FLOPs as :class:`torch.utils.flop_counter.FlopCounterMode` counts them
  for the layer's operations (matrix multiplies, convolutions, attention; a multiply-add is 2).
* ``activation_bytes``: the bytes of the traced tensors the layer sends to its largest
  consumer (0 for the output layer: its output is the loss).
* ``stash_bytes``: the bytes of the tensors autograd saves for the backward pass while the
  layer runs (``torch.autograd.graph.saved_tensors_hooks``), each storage once per layer,
  parameters excluded (they are model state).

torch is imported inside the functions: ``hulk_env`` itself never imports it.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from hulk_env.errors import HulkInputError

INSTALL_HINT = "pip install 'hulk-env[agent]' (or pip install torch)"
DTYPES = ("bfloat16", "float16", "float32")
INPUT_DTYPES = ("long", "float")


def require_torch():
    """The ``torch`` module, or a HulkInputError saying how to install it."""
    try:
        import torch
    except ImportError:
        raise HulkInputError(f"importing a PyTorch module needs torch: {INSTALL_HINT}") from None
    return torch


class TorchImport(NamedTuple):
    """What :func:`import_torch_module` found.

    Attributes:
        workload: the workload file mapping (``name``, ``description``, ``micro_batch_size``,
            ``layers``, ``edges``).
        total_params: ``sum(p.numel() for p in module.parameters())``.
        counter_flops: forward FLOPs of the whole module under ``FlopCounterMode`` (an
            independent run, not the traced graph).
    """

    workload: dict
    total_params: int
    counter_flops: float

    @property
    def layer_flops(self) -> float:
        return float(sum(layer["flops"] for layer in self.workload["layers"]))

    @property
    def flops_error(self) -> float:
        """Relative difference of the layers' FLOPs from the counter's total."""
        if self.counter_flops == 0:
            return 0.0 if self.layer_flops == 0 else math.inf
        return (self.layer_flops - self.counter_flops) / self.counter_flops


def parse_shape(text: str) -> tuple[int, ...]:
    """``"2,64"`` -> ``(2, 64)``.

    Raises:
        HulkInputError: not a comma-separated list of positive integers.
    """
    parts = [p.strip() for p in str(text).replace("x", ",").split(",") if p.strip()]
    try:
        shape = tuple(int(p) for p in parts)
    except ValueError:
        shape = ()
    if not shape or any(d < 1 for d in shape):
        raise HulkInputError(
            f"input shape {text!r} must be positive integers separated by commas, e.g. 2,64",
            field="input_shape",
        )
    return shape


def load_factory(spec: str):
    """The callable ``MODULE:FACTORY`` names (the current directory is importable).

    Raises:
        HulkInputError: malformed spec, module not importable, attribute missing or not
            callable.
    """
    module_name, sep, attr = str(spec).partition(":")
    if not sep or not module_name.strip() or not attr.strip():
        raise HulkInputError(
            f"{spec!r} is not MODULE:FACTORY (e.g. my_models:build_gpt)", field="module"
        )
    cwd = str(Path.cwd())
    added = cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name.strip())
    except ImportError as err:
        raise HulkInputError(
            f"cannot import module '{module_name}' ({err}); run from its directory or add it "
            "to PYTHONPATH",
            field="module",
        ) from None
    except Exception as err:  # the user's module failed while importing
        raise HulkInputError(
            f"importing module '{module_name}' raised {type(err).__name__}: {_first_line(err)}",
            field="module",
        ) from None
    finally:
        if added:
            sys.path.remove(cwd)
    factory: Any = module
    for part in attr.strip().split("."):
        if not hasattr(factory, part):
            public = sorted(
                (n for n, v in vars(module).items() if _defined_callable(v, module.__name__, n)),
                key=lambda n: (n[:1].isupper(), n),  # factory functions before classes
            )
            raise HulkInputError(
                f"module '{module_name}' has no '{attr}'; callables there: {', '.join(public[:12])}",
                field="module",
            )
        factory = getattr(factory, part)
    if not callable(factory):
        raise HulkInputError(f"'{spec}' is not callable", field="module")
    return factory


def _defined_callable(value: Any, module_name: str, name: str) -> bool:
    return callable(value) and not name.startswith("_") and getattr(value, "__module__", None) == module_name


DATA_DEPENDENT_HINTS = ("nonzero", "data-dependent", "data dependent", "masked_select", ".item()",
                        "item() cannot", "unique", "control flow", "GuardOnDataDependent")  # fmt: skip
DATA_DEPENDENT_ADVICE = (
    "a trace on meta tensors cannot follow values: write the routing in dense-dispatch form (run "
    "every expert on every token and weight by the gates, e.g. a one_hot/scatter gate matrix), or "
    "describe the mixture of experts with `hulk import hf` or a transformer with num_experts"
)


def _data_dependent(err: BaseException) -> bool:
    text = str(err)
    return any(hint in text for hint in DATA_DEPENDENT_HINTS)


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


def build_on_meta(spec: str, dtype: str = "bfloat16"):
    """Call the factory under the meta device; the module in training mode and ``dtype``.

    Raises:
        HulkInputError: the factory fails or returns something that is not an ``nn.Module``.
    """
    torch = require_torch()
    if dtype not in DTYPES:
        raise HulkInputError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}", field="dtype")
    factory = load_factory(spec)
    try:
        with torch.device("meta"):
            module = factory()
    except Exception as err:
        raise HulkInputError(
            f"'{spec}()' raised {type(err).__name__}: {_first_line(err)} (it is called with no "
            "arguments, on the meta device)",
            field="module",
        ) from None
    if not isinstance(module, torch.nn.Module):
        raise HulkInputError(
            f"'{spec}()' returned {type(module).__name__}, not a torch.nn.Module", field="module"
        )
    return module.to(device="meta", dtype=getattr(torch, dtype)).train()


# ---- blocks -----------------------------------------------------------------------------------


def block_names(module, block_depth: int = 1) -> list[str]:
    """Qualified names of the blocks at ``block_depth``, containers looked through."""
    torch = require_torch()
    containers = (torch.nn.Sequential, torch.nn.ModuleList, torch.nn.ModuleDict)
    names: list[str] = []

    def walk(mod, prefix: str, depth: int) -> None:
        for child_name, child in mod.named_children():
            qual = f"{prefix}{child_name}"
            if isinstance(child, containers) and len(child):
                walk(child, f"{qual}.", depth)
            elif depth <= 1 or not any(True for _ in child.children()):
                names.append(qual)
            else:
                walk(child, f"{qual}.", depth - 1)

    walk(module, "", block_depth)
    return names


def _owner(qualname: str, blocks: Sequence[str]) -> str | None:
    """The block ``qualname`` (a module or parameter path) lies in, if any."""
    for block in blocks:
        if qualname == block or qualname.startswith(block + "."):
            return block
    return None


def trace_blocks(module, blocks: Sequence[str], spec: str, block_depth: int):
    """A ``torch.fx.GraphModule`` whose leaves are ``blocks`` (and torch's own layers).

    Raises:
        HulkInputError: the traced ``forward`` cannot be traced (data-dependent control flow,
            unsupported Python); the message suggests how to group differently.
    """
    torch = require_torch()
    block_set = set(blocks)

    class BlockTracer(torch.fx.Tracer):
        def is_leaf_module(self, m, qualname: str) -> bool:
            if qualname in block_set:
                return True
            if any(b.startswith(qualname + ".") for b in block_set):
                return False  # holds blocks: trace into it, even a torch.nn one
            return super().is_leaf_module(m, qualname)

    try:
        graph = BlockTracer().trace(module)
    except Exception as err:
        deeper = (
            f"; group by top-level blocks (--block-depth {block_depth - 1}) so less of the "
            "code is traced"
            if block_depth > 1
            else ""
        )
        flow = " (data-dependent control flow)" if _data_dependent(err) else ""
        raise HulkInputError(
            f"torch.fx cannot trace '{spec}' at block depth {block_depth}{flow} "
            f"({type(err).__name__}: {_first_line(err)}); group it differently: move the "
            "untraceable code into a child module (a block is run, not traced)" + deeper,
            field="module",
        ) from None
    return torch.fx.GraphModule(module, graph)


# ---- measuring --------------------------------------------------------------------------------


@dataclass
class _Layer:
    name: str
    flops: float = 0.0
    params: int = 0
    stash_bytes: float = 0.0


def _tensor_bytes(value) -> float:
    """Bytes of the tensors in a node's output (a tensor, or tuples, lists, dicts of them)."""
    torch = require_torch()
    if isinstance(value, torch.Tensor):
        return float(value.numel() * value.element_size())
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list | tuple):
        return float(sum(_tensor_bytes(v) for v in value))
    return 0.0


def _assign_groups(gm, blocks: Sequence[str]) -> tuple[dict[Any, str], list[str]]:
    """Node -> block name, per the module docstring's rules, and the blocks in run order.

    A block's rank is the position of its first own operation; input-only operations that
    join it later do not move it.
    """
    group: dict[Any, str] = {}
    order: dict[str, int] = {}
    pending = []
    reused = _reused_parameter_free(gm, blocks)
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "output"):
            continue
        owner = _owner(str(node.target), blocks) if node.op == "call_module" else None
        if owner in reused:
            owner = None  # a shared parameter-free module: each call joins its reader's block
        if owner is None:
            inputs = [group[n] for n in node.all_input_nodes if n in group]
            owner = max(inputs, key=order.__getitem__) if inputs else None
        if owner is None:
            pending.append(node)
            continue
        order.setdefault(owner, len(order))
        group[node] = owner
    for node in reversed(pending):  # input-only nodes: the first block that reads them
        readers = [group[u] for u in node.users if u in group]
        if readers:
            group[node] = min(readers, key=order.__getitem__)
    first = min(order, key=order.__getitem__) if order else None
    for node in pending:
        group.setdefault(node, first)
    return group, sorted(order, key=order.__getitem__)


def _reused_parameter_free(gm, blocks: Sequence[str]) -> set[str]:
    """Blocks without parameters or buffers called at more than one point of the graph."""
    calls: dict[str, int] = {}
    for node in gm.graph.nodes:
        if node.op == "call_module":
            owner = _owner(str(node.target), blocks)
            if owner is not None and str(node.target) == owner:
                calls[owner] = calls.get(owner, 0) + 1
    modules = dict(gm.named_modules())
    return {
        name
        for name, count in calls.items()
        if count > 1
        and name in modules
        and not any(True for _ in modules[name].parameters())
        and not any(True for _ in modules[name].buffers())
    }


def _run_measured(gm, group: dict, inputs: Sequence[Any]) -> tuple[dict, dict, dict]:
    """Run ``gm`` once: FLOPs and saved bytes per block, output bytes per node."""
    torch = require_torch()
    from torch.utils.flop_counter import FlopCounterMode

    param_storages = {p.untyped_storage()._cdata for p in gm.parameters()}
    flops: dict[str, float] = {}
    saved: dict[str, dict[int, float]] = {}
    out_bytes: dict[Any, float] = {}
    keep: list = []  # saved tensors stay referenced, so storage ids are never reused
    current: list[str | None] = [None]

    def pack(t):
        storage = t.untyped_storage()
        key = storage._cdata
        if key not in param_storages and current[0] is not None:
            saved.setdefault(current[0], {})[key] = float(storage.nbytes())
        keep.append(t)
        return t

    counter = FlopCounterMode(display=False)

    class Measured(torch.fx.Interpreter):
        def run_node(self, node):
            current[0] = group.get(node)
            before = counter.get_total_flops()
            result = super().run_node(node)
            if current[0] is not None:
                flops[current[0]] = flops.get(current[0], 0.0) + counter.get_total_flops() - before
            out_bytes[node] = _tensor_bytes(result)
            return result

    with counter, fused_dropout(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        output = Measured(gm).run(*inputs)
    keep.append(output)
    stash = {name: float(sum(per.values())) for name, per in saved.items()}
    return flops, stash, out_bytes


@contextlib.contextmanager
def fused_dropout():
    """Dropout as CUDA runs it while measuring: ``native_dropout`` with a 1-byte mask.

    On any device but CUDA (meta included) ``F.dropout`` falls back to multiplying by a noise
    tensor of the activation's dtype, and that is what autograd would save; the GPUs being
    modelled keep a bool mask (Korthikanti et al. 2022 count 1 byte per element).
    """
    torch = require_torch()
    functional = torch.nn.functional
    original = functional.dropout

    def dropout(input, p=0.5, training=True, inplace=False):
        if not training or p == 0:
            return input
        return torch.native_dropout(input, p, True)[0]

    functional.dropout = dropout
    try:
        yield
    finally:
        functional.dropout = original


def _counter_total(module, inputs: Sequence[Any]) -> float:
    require_torch()
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        module(*inputs)
    return float(counter.get_total_flops())


# Operations that only look at a tensor or re-view it: the decision passes to their result.
_NEUTRAL_OPS = frozenset({
    "__get__", "size", "dim", "numel", "view", "reshape", "flatten", "unsqueeze", "squeeze",
    "permute", "transpose", "contiguous", "expand", "chunk", "split", "unbind", "__getitem__",
    "clone", "detach", "narrow", "unflatten", "movedim",
})  # fmt: skip
_ID_OPS = frozenset({"embedding", "embedding_bag", "one_hot"})


def infer_input_dtypes(module, shapes: Sequence[Sequence[int]], dtype: str) -> list[str]:
    """Per input, ``long`` or ``float`` from the first operation consuming it (module docstring).

    Runs the module (on meta tensors) at most once per input plus once; an input nothing
    consumes keeps ``long``.
    """
    torch = require_torch()
    from torch.overrides import TorchFunctionMode
    from torch.utils._pytree import tree_flatten

    kinds: list[str | None] = [None] * len(shapes)

    class _Decided(Exception):
        pass

    class Probe(TorchFunctionMode):
        def __init__(self, tracked: dict[int, int]) -> None:
            super().__init__()
            self.tracked = tracked  # id(tensor) -> input index

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            leaves, _ = tree_flatten((args, kwargs))
            hit = next((self.tracked[id(x)] for x in leaves if id(x) in self.tracked), None)
            if hit is None or kinds[hit] is not None:
                return func(*args, **kwargs)
            op = getattr(func, "__name__", str(func))
            if op in _NEUTRAL_OPS:
                out = func(*args, **kwargs)
                for x in tree_flatten(out)[0]:
                    if isinstance(x, torch.Tensor):
                        self.tracked[id(x)] = hit
                return out
            kinds[hit] = "long" if op in _ID_OPS else "float"
            if kinds[hit] == "float":
                raise _Decided  # rerun with this input as floats
            return func(*args, **kwargs)

    for _ in range(len(shapes) + 1):
        tensors = make_inputs(shapes, [k or "long" for k in kinds], dtype)
        keep = list(tensors)  # ids stay unique while the run lasts
        try:
            with Probe({id(t): i for i, t in enumerate(keep)}):
                module(*tensors)
        except _Decided:
            continue
        except Exception:  # the measured run says what fails, with the chosen dtypes
            break
        break
    return [k or "long" for k in kinds]


def make_inputs(shapes: Sequence[Sequence[int]], kinds: Sequence[str], dtype: str) -> list:
    """Meta tensors for one micro-batch: ``long`` (token ids, zeros) or ``float`` (``dtype``)."""
    torch = require_torch()
    if len(kinds) == 1 and len(shapes) > 1:
        kinds = list(kinds) * len(shapes)
    if len(kinds) != len(shapes):
        raise HulkInputError(
            f"{len(shapes)} input shapes but {len(kinds)} input dtypes; give one dtype or one per input",
            field="input_dtype",
        )
    tensors = []
    for shape, kind in zip(shapes, kinds, strict=True):
        if kind not in INPUT_DTYPES:
            raise HulkInputError(
                f"unknown input dtype {kind!r}; choose one of {', '.join(INPUT_DTYPES)}",
                field="input_dtype",
            )
        tdtype = torch.long if kind == "long" else getattr(torch, dtype)
        tensors.append(torch.zeros(tuple(shape), dtype=tdtype, device="meta"))
    return tensors


def import_torch_module(
    spec: str,
    input_shapes: Sequence[Sequence[int]],
    *,
    input_dtypes: Sequence[str] | None = None,
    dtype: str = "bfloat16",
    block_depth: int = 1,
    name: str | None = None,
) -> TorchImport:
    """Build, trace and measure ``spec``; see the module docstring.

    Args:
        spec: ``MODULE:FACTORY``.
        input_shapes: one shape per ``forward`` argument; the first dimension of the first is
            the micro-batch size (sequences or images).
        input_dtypes: ``long`` (token ids) or ``float``, one for all inputs or one per input;
            ``None``: each follows the first operation consuming it (:func:`infer_input_dtypes`).
        dtype: the training dtype of weights and activations.
        block_depth: which level of children forms the layers (1 = top-level).
        name: the workload's name (default: ``FACTORY``).

    Raises:
        HulkInputError: torch missing, a bad spec or factory, an untraceable module, a forward
            that fails on the given inputs, or blocks that cannot form a layer DAG.
    """
    require_torch()
    if isinstance(block_depth, bool) or int(block_depth) != block_depth or block_depth < 1:
        raise HulkInputError(f"block depth must be an integer >= 1, got {block_depth!r}", field="block_depth")
    if not input_shapes:
        raise HulkInputError("give at least one input shape, e.g. 2,64", field="input_shape")
    module = build_on_meta(spec, dtype)
    if not input_dtypes:
        input_dtypes = infer_input_dtypes(module, input_shapes, dtype)
    inputs = make_inputs(input_shapes, input_dtypes, dtype)
    blocks = block_names(module, block_depth)
    if not blocks:
        raise HulkInputError(
            f"'{spec}()' has no child modules to form layers; wrap its parts in submodules",
            field="module",
        )
    gm = trace_blocks(module, blocks, spec, block_depth)
    group, order = _assign_groups(gm, blocks)
    try:
        flops, stash, out_bytes = _run_measured(gm, group, inputs)
        counter_flops = _counter_total(module, inputs)
    except Exception as err:
        if _data_dependent(err):
            seen = next((hint for hint in DATA_DEPENDENT_HINTS if hint in str(err)), "a value")
            raise HulkInputError(
                f"'{spec}' has data-dependent control flow (it branches or indexes on {seen!r} "
                "while running: routing by torch.nonzero, boolean masks, topk indices or .item()); "
                f"{DATA_DEPENDENT_ADVICE}",
                field="module",
            ) from None
        shapes = " ".join(",".join(map(str, s)) for s in input_shapes)
        raise HulkInputError(
            f"'{spec}' forward failed on inputs {shapes} ({type(err).__name__}: {_first_line(err)}); "
            "check --input-shape and --input-dtype (and that forward creates tensors on the "
            "inputs' device)",
            field="input_shape",
        ) from None
    layers = _layers(module, gm, group, order, flops, stash)
    edges, act = _edges_and_activations(gm, group, layers, out_bytes, spec)
    total = int(sum(p.numel() for p in module.parameters()))
    factory = str(spec).partition(":")[2]
    kinds = _broadcast(input_dtypes, input_shapes)
    shapes = "; ".join(f"{k} {','.join(map(str, s))}" for s, k in zip(input_shapes, kinds, strict=True))
    data = {
        "name": name or factory,
        "description": (
            f"imported from {spec} with torch.fx (block depth {block_depth}, {dtype}); "
            f"one micro-batch = inputs {shapes}"
        ),
        "micro_batch_size": int(input_shapes[0][0]),
        "layers": [
            {
                "name": layer.name,
                "flops": layer.flops,
                "params": layer.params,
                "activation_bytes": act[layer.name],
                "stash_bytes": layer.stash_bytes,
            }
            for layer in layers
        ],
        "edges": [list(e) for e in edges],
    }
    return TorchImport(data, total, counter_flops)


def _broadcast(kinds: Sequence[str], shapes: Sequence[Any]) -> list[str]:
    return list(kinds) * len(shapes) if len(kinds) == 1 else list(kinds)


def _layers(module, gm, group: dict, order: list[str], flops: dict, stash: dict) -> list[_Layer]:
    """Layers in run order, with their parameters."""
    layers = {name: _Layer(name, flops.get(name, 0.0), 0, stash.get(name, 0.0)) for name in order}
    # get_attr nodes say which block reads a parameter that no block owns (a root parameter).
    readers = {str(n.target): group[n] for n in gm.graph.nodes if n.op == "get_attr" and n in group}
    for pname, param in module.named_parameters():
        owner = _owner(pname, order) or next(
            (g for target, g in readers.items() if pname == target or pname.startswith(target + ".")),
            order[0],
        )
        layers[owner].params += int(param.numel())
    return [layers[name] for name in order]


def _edges_and_activations(gm, group: dict, layers: list[_Layer], out_bytes: dict, spec: str):
    """Block edges ``(from, to)`` by name, and each block's bytes to its largest consumer."""
    rank = {layer.name: i for i, layer in enumerate(layers)}
    sent: dict[tuple[str, str], dict[Any, float]] = {}
    for node in gm.graph.nodes:
        if node not in group:
            continue
        for src in node.all_input_nodes:
            if src in group and group[src] != group[node]:
                sent.setdefault((group[src], group[node]), {})[src] = out_bytes.get(src, 0.0)
    act = {layer.name: 0.0 for layer in layers}
    for (u, v), tensors in sent.items():
        if rank[u] > rank[v]:
            raise HulkInputError(
                f"block '{v}' of '{spec}' runs again after '{u}' and reads its output (a block "
                "with parameters called twice: shared weights, whose layer cannot live on two "
                "machines); group differently: one module holding every call of it (parameter-"
                "free modules may be reused freely)",
                field="module",
            )
        act[u] = max(act[u], float(sum(tensors.values())))
    return sorted(sent, key=lambda e: (rank[e[0]], rank[e[1]])), act
