"""Writing output files whole or not at all, with the permissions the user's umask gives.

Every file is first written to a temporary file beside its target, then renamed over it: a
reader never sees a partial file, and a failure leaves no file behind. A command that writes
several files stages all of them before renaming any (:func:`write_all_atomic`), so it writes
all or none. Temporary files are created with mode 0666 (0777 for scripts) and the kernel
applies the umask, as for any file a program creates: with the usual umask 022 a plan is
0644, so a team sharing a plan directory can read each other's plans.
"""
from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Mapping, Union

from planner.errors import SpecError

Content = Union[str, bytes]


def write_atomic_bytes(path: Path, data: bytes, mode: int | None = None) -> None:
    """Write ``data`` to ``path`` atomically (see the module docstring). ``mode``: exact
    permission bits (``None``: 0666 less the umask)."""
    write_all_atomic({Path(path): data}, {Path(path): mode} if mode is not None else None)


def write_atomic(path: Path, text: str, mode: int | None = None) -> None:
    """:func:`write_atomic_bytes` of UTF-8 text."""
    write_atomic_bytes(path, text.encode("utf-8"), mode)


def write_all_atomic(files: Mapping[Path, Content], modes: Mapping[Path, int] | None = None,
                     executable: frozenset[Path] | set[Path] = frozenset()) -> None:
    """Write every file of ``files`` (path -> text or bytes) or none of them.

    Each is staged in a temporary file beside its target; only when all are staged are they
    renamed over their targets. If staging fails (an unwritable folder, a target that is a
    directory, a full disk), the staged files and the folders made for them are removed and
    a :class:`SpecError` names the path. ``executable`` paths get 0777 less the umask;
    ``modes`` gives exact bits for some paths instead. (Should a rename itself fail, after
    every file was staged, the files renamed before it stay.)
    """
    staged: list[tuple[Path, Path]] = []  # (temporary file, target)
    made: list[Path] = []  # folders created for the targets, outermost first
    try:
        for path, content in files.items():
            path = Path(path)
            data = content.encode("utf-8") if isinstance(content, str) else content
            mode = (modes or {}).get(path)
            staged.append((_stage(path, data, path in executable, mode, made), path))
        for tmp, path in staged:
            try:
                os.replace(tmp, path)
            except OSError as err:
                raise SpecError(str(path), "", f"a writable file path ({err.strerror})") from None
    except BaseException:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
        for folder in reversed(made):
            try:
                folder.rmdir()
            except OSError:
                pass
        raise


def _stage(path: Path, data: bytes, executable: bool, mode: int | None,
           made: list[Path]) -> Path:
    """``data`` in a new temporary file beside ``path``; its folders are made if missing
    (appended to ``made``)."""
    if path.is_dir():
        raise SpecError(str(path), "", "a writable file path, not a directory")
    try:
        missing = [p for p in (path.parent, *path.parent.parents) if not p.exists()]
        for folder in reversed(missing):
            try:
                folder.mkdir()
            except FileExistsError:  # made meanwhile by someone else: not ours to remove
                continue
            made.append(folder)
        tmp, fd = _create_temp(path, 0o777 if executable else 0o666)
    except OSError as err:
        raise SpecError(str(path), "", f"a writable location ({err.strerror})") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        if mode is not None:
            os.chmod(tmp, mode)
    except BaseException as err:
        tmp.unlink(missing_ok=True)
        if isinstance(err, OSError):
            raise SpecError(str(path), "", f"a writable file path ({err.strerror})") from None
        raise
    return tmp


def _create_temp(path: Path, mode: int) -> tuple[Path, int]:
    """A new, exclusively created file ``.<name>.<random>.tmp`` beside ``path``, opened for
    writing with ``mode`` (the kernel applies the umask)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | \
        getattr(os, "O_BINARY", 0)
    for _ in range(100):
        tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
        try:
            return tmp, os.open(tmp, flags, mode)
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {path}")
