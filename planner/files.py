"""Writing output files whole or not at all."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from planner.errors import SpecError


def write_atomic_bytes(path: Path, data: bytes, mode: int | None = None) -> None:
    """Write ``data`` to a temporary file beside ``path``, then rename it over ``path``: a
    reader never sees a partial file, and a failure leaves no file behind."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as err:
        raise SpecError(str(path), "", f"a writable location ({err.strerror})") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except OSError as err:
        Path(tmp).unlink(missing_ok=True)
        raise SpecError(str(path), "", f"a writable file path ({err.strerror})") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_atomic(path: Path, text: str, mode: int | None = None) -> None:
    """:func:`write_atomic_bytes` of UTF-8 text."""
    write_atomic_bytes(path, text.encode("utf-8"), mode)
