"""torch files that hold tensors only, never half written.

Written atomically (:func:`hulk_env.files.atomic_write_bytes`: a temporary file, then
``os.replace``), read with ``torch.load(weights_only=True)``, which unpickles tensors and plain
containers only (no classes, no code). torch is imported inside the functions.
"""

from __future__ import annotations

import hashlib
import io
from pathlib import Path
from typing import Any

from hulk_env.errors import HulkInputError
from hulk_env.files import atomic_write_bytes


def torch_bytes(obj: Any) -> bytes:
    """``obj`` serialised by ``torch.save`` (tensors and plain containers)."""
    import torch

    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def atomic_torch_save(obj: Any, path: Path) -> str:
    """``torch.save`` ``obj`` to ``path`` atomically; returns the file's SHA-256 (hex)."""
    data = torch_bytes(obj)
    atomic_write_bytes(path, data)
    return hashlib.sha256(data).hexdigest()


def safe_torch_load(path: Path, what: str) -> Any:
    """``torch.load(weights_only=True)``; a missing or corrupt file is one clear HulkInputError.

    Args:
        path: the file.
        what: what it is, for the message (``"checkpoint"``, ``"policy weights"``).
    """
    import torch

    from hulk_env.validation import limits
    from hulk_env.validation.reading import read_bytes

    if not path.exists() and not path.is_symlink():
        raise HulkInputError(f"{what} not found", source=str(path))
    data = read_bytes(path, limits.MAX_WEIGHTS_BYTES, what=what)  # a regular file, bounded
    try:
        return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:  # zip/pickle/EOF errors all mean the same thing to a user
        raise HulkInputError(
            f"{what} is corrupt or not a weights-only torch file ({type(exc).__name__}); "
            "delete it and retrain (or resume from an earlier checkpoint)",
            source=str(path),
        ) from None
