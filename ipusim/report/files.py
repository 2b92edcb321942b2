"""Writing a report's files whole: a reader never sees half a file, and a failure
(a full disk) leaves the old file, or none, and no temporary one behind."""
from __future__ import annotations

import itertools
import os
import stat
from collections.abc import Callable
from pathlib import Path

_temporary_names = itertools.count()


def write_atomically(path: str | Path, content: str | bytes | Callable[[Path], None]) -> Path:
    """Write ``content`` (text, bytes, or a function that writes the file it is
    given) to ``path``: into a temporary file in the same folder, renamed into
    place once whole, so that a reader never sees half a file and a failure
    (a full disk) leaves the old file, or none, and no temporary one. Parents
    are created. A path that exists and is no regular file (``/dev/stdout``,
    a pipe) is written directly: it cannot be replaced. Raises OSError."""
    path = Path(path)
    if path.exists() and not stat.S_ISREG(path.stat().st_mode):
        try:
            _write(path, content)
        except OSError as error:
            raise _naming(error, path) from error
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}-{next(_temporary_names)}.tmp")
    try:
        _write(temporary, content)
        os.replace(temporary, path)
    except BaseException as error:
        temporary.unlink(missing_ok=True)
        if isinstance(error, OSError):
            raise _naming(error, path) from error
        raise
    return path


def _naming(error: OSError, path: Path) -> OSError:
    """``error`` naming ``path``, the file meant, rather than its temporary one or none."""
    if error.errno is None or error.filename not in (None, str(path)) and \
            not str(error.filename).endswith(".tmp"):
        return error
    return type(error)(error.errno, error.strerror, str(path))


def _write(path: Path, content: str | bytes | Callable[[Path], None]) -> None:
    if callable(content):
        content(path)
    elif isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")


__all__ = ["write_atomically"]
