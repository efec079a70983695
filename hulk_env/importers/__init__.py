"""Importers: turn what users have into hulk workload files.

* :mod:`.hf_config` -- a Hugging Face ``config.json`` (Llama, Mistral, Qwen2, Falcon, GPT-NeoX,
  GPT-2, OPT, BLOOM, T5) to the ``transformer:`` form, offline, numpy only;
* :mod:`.torch_module` -- a ``torch.nn.Module`` built on the meta device, traced with
  ``torch.fx`` into the explicit ``layers:`` form. It imports torch lazily, inside its
  functions, so that ``hulk_env`` stays torch-free at import time.

Both return a plain dict in the workload file format of :mod:`hulk_env.workload`;
:func:`write_workload_file` saves it as YAML or JSON.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from hulk_env.errors import HulkInputError
from hulk_env.files import atomic_write_text

OUT_SUFFIXES = (".yaml", ".yml", ".json")


def write_workload_file(data: dict, path: str | Path) -> Path:
    """Write ``data`` as YAML (``.yaml``/``.yml``) or JSON (``.json``), atomically.

    The file appears complete or not at all: an existing file is replaced only once the new
    one is written.

    Raises:
        HulkInputError: another suffix, or a directory that cannot be written.
    """
    path = Path(path)
    if path.suffix.lower() not in OUT_SUFFIXES:
        raise HulkInputError(
            f"unknown output type; use one of {', '.join(OUT_SUFFIXES)}", source=str(path)
        )
    if path.suffix.lower() == ".json":
        text = json.dumps(data, indent=2) + "\n"
    else:
        text = yaml.safe_dump(data, sort_keys=False, width=100)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, text)
    except OSError as err:
        raise HulkInputError(f"cannot write the file ({err.strerror or err})", source=str(path)) from None
    return path
