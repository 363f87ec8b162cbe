"""Where the server is and which key to use: arguments first, then the environment, as the CLI does.

The key comes from `key=`, else $SMARTUNE_API_KEY, else the file named by $SMARTUNE_API_KEY_FILE; never
from a command line (the arguments of a process are visible to every user of the machine).
"""

from __future__ import annotations

import os
import stat
import warnings
from collections.abc import Callable
from pathlib import Path

URL_ENV, KEY_ENV, KEY_FILE_ENV = "SMARTUNE_URL", "SMARTUNE_API_KEY", "SMARTUNE_API_KEY_FILE"
DEFAULT_URL = "http://127.0.0.1:8000"

Warn = Callable[[str], None]


def _warn(message: str) -> None:
    warnings.warn(message, UserWarning, stacklevel=3)


def server_url(url: str | None = None) -> str:
    """`url`, else $SMARTUNE_URL, else http://127.0.0.1:8000."""
    return (url or os.environ.get(URL_ENV, "").strip() or DEFAULT_URL).rstrip("/")


def read_key_file(path: str | os.PathLike[str], warn: Warn = _warn) -> str:
    """The key in the file at `path` (its first line, stripped); `warn` is told if others may read it."""
    from smartune.errors import SmartuneError

    path = Path(path)
    try:
        mode = path.stat().st_mode
        text = path.read_text()
    except OSError as err:
        raise SmartuneError(None, f"cannot read the key file {path}: {err.strerror}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        warn(f"the key file {path} is readable by others; chmod 600 it")
    key = text.strip().splitlines()[0].strip() if text.strip() else ""
    if not key:
        raise SmartuneError(None, f"the key file {path} is empty")
    return key


def key_from_env(warn: Warn = _warn) -> str | None:
    """$SMARTUNE_API_KEY, else the key in the file $SMARTUNE_API_KEY_FILE names, else None."""
    if key := os.environ.get(KEY_ENV, "").strip():
        return key
    if path := os.environ.get(KEY_FILE_ENV, "").strip():
        return read_key_file(path, warn)
    return None
