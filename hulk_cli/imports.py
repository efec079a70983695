"""``hulk import hf|torch``: a model users have -> a workload file every command takes.

``hulk import hf CONFIG.json --out FILE.yaml`` reads a Hugging Face ``config.json`` offline
(:mod:`hulk_env.importers.hf_config`); ``hulk import torch MODULE:FACTORY --input-shape 2,64
--out FILE.yaml`` builds a ``torch.nn.Module`` on the meta device and traces it
(:mod:`hulk_env.importers.torch_module`; torch comes with ``pip install 'hulk-env[agent]'``).
The written file is loaded back before the command reports success, so what it prints is what
``hulk show model FILE`` and ``hulk place --model FILE`` will use.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from hulk_cli.output import clean_errors, console, print_json

app = typer.Typer(no_args_is_help=True, help="Import a model as a workload file (Hugging Face config, PyTorch module).")

OutOpt = Annotated[Path, typer.Option("--out", "-o", help="The workload file to write (.yaml, .yml or .json).")]
NameOpt = Annotated[str | None, typer.Option("--name", help="The model's name in the file.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a summary line.")]


def _scaled(value: float, unit: str) -> str:
    """``8.3e5, "params"`` -> ``"830.5 k params"``: three significant digits, SI prefix."""
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:,.4g} {prefix}{unit}"
    return f"{value:,.4g} {unit}"


def write_checked(data: dict, out: Path, source: str) -> Path:
    """Check ``data`` as the workload file it becomes, then write it to ``out`` atomically.

    The mapping is written to a private temporary directory and loaded back there first, so an
    invalid model (kv heads not dividing heads, 10^9 layers) is an error naming the *input*
    (``source``) and ``out`` is never created or touched; a valid one appears complete or not at
    all (:func:`hulk_env.importers.write_workload_file`).
    """
    import tempfile

    from hulk_env.errors import HulkInputError
    from hulk_env.importers import OUT_SUFFIXES, write_workload_file
    from hulk_env.workload import load_workload_file

    suffix = out.suffix.lower()
    if suffix not in OUT_SUFFIXES:
        return write_workload_file(data, out)  # its one-line error about the output type
    with tempfile.TemporaryDirectory(prefix="hulk-import-") as tmp:
        trial = write_workload_file(data, Path(tmp) / f"model{suffix}")
        try:
            load_workload_file(trial)
        except HulkInputError as err:
            where = ".".join(str(x) for x in (err.row, err.field) if x is not None and x != "")
            raise HulkInputError(
                f"describes an invalid model{f' ({where})' if where else ''}: {err.message}", source=source
            ) from None
    return write_workload_file(data, out)


def _report(path: Path, extra: dict, as_json: bool) -> None:
    """Load the written file back and print what it holds."""
    from hulk_env.workload import load_workload_file

    workload = load_workload_file(path)
    summary = {"file": str(path), **workload.summary(), **extra}
    if as_json:
        print_json(summary)
        return
    notes = "".join(f", {k.replace('_', ' ')} {v}" for k, v in extra.items())
    console.print(
        f"wrote {path}: model '{workload.name}', {workload.num_layers} layers, "
        f"{workload.total_params:,.0f} parameters, {_scaled(workload.total_flops, 'FLOP')} forward "
        f"and {_scaled(float(workload.stash_bytes.sum()), 'B')} stashed per micro-batch{notes}"
    )


@app.command("hf")
@clean_errors
def import_hf(
    config: Annotated[Path, typer.Argument(help="A Hugging Face config.json.")],
    out: OutOpt,
    name: NameOpt = None,
    seq_len: Annotated[int | None, typer.Option("--seq-len", min=1, help="Tokens per sequence (default: the context length, at most 4096).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """A Hugging Face config.json (Llama, Mistral, Qwen2, Falcon, GPT-NeoX, GPT-2, OPT, BLOOM, T5) to a workload file."""
    from hulk_env.importers.hf_config import import_hf_config

    data = import_hf_config(config, name=name, seq_len=seq_len)
    path = write_checked(data, out, str(config))
    _report(path, {"seq_len": data["transformer"]["seq_len"]}, as_json)


@app.command("torch")
@clean_errors
def import_torch(
    spec: Annotated[str, typer.Argument(metavar="MODULE:FACTORY", help="A callable returning the nn.Module (importable from here or PYTHONPATH).")],
    out: OutOpt,
    input_shape: Annotated[list[str], typer.Option("--input-shape", help="One micro-batch's shape per forward argument, e.g. 2,64 (repeatable).")],
    input_dtype: Annotated[list[str] | None, typer.Option("--input-dtype", help="long (token ids) or float, one for all inputs or one per input.")] = None,
    dtype: Annotated[str, typer.Option("--dtype", help="Training dtype of weights and activations: bfloat16, float16 or float32.")] = "bfloat16",
    block_depth: Annotated[int, typer.Option("--block-depth", min=1, help="Which level of child modules forms the layers (1 = top-level).")] = 1,
    name: NameOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """A PyTorch module (built on the meta device, traced with torch.fx) to a workload file."""
    from hulk_env.importers import write_workload_file
    from hulk_env.importers.torch_module import import_torch_module, parse_shape

    shapes = [parse_shape(text) for text in input_shape]
    result = import_torch_module(
        spec, shapes, input_dtypes=input_dtype or ["long"], dtype=dtype, block_depth=block_depth, name=name
    )
    path = write_workload_file(result.workload, out)
    _report(path, {"flops_vs_flop_counter": f"{result.flops_error:+.2%}"}, as_json)
