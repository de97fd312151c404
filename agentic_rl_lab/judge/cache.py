"""A disk cache of judge answers, so re-running a notebook cell or a script costs no second call.

The key is a SHA-256 content hash of everything that determines the answer: the backend's settings (kind,
model, endpoint, temperature, ...), the exact messages and the answer schema. Change any of them, such as the
rubric, one character of a trajectory or the model, and the key changes. The value is the reply as the backend
returned it, one small JSON file per key.

What is stored is the request body and the answer. Neither contains the API key: it travels in an HTTP header,
which is never recorded.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any


class JudgeCache:
    """Judge answers on disk under `directory`, one `<key>.json` per request, in subfolders by the key's first
    two characters. Safe for several threads or processes: each entry is written to a temporary file and renamed."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.hits = 0
        self.misses = 0

    @classmethod
    def default(cls) -> JudgeCache:
        """The lab's cache folder (`$AGENTIC_RL_LAB_CACHE`, else `~/.cache/agentic_rl_lab`), subfolder `judge`."""
        from agentic_rl_lab.tiny import cache_root

        return cls(cache_root() / "judge")

    @staticmethod
    def key(request: dict[str, Any]) -> str:
        """The content hash of a request: SHA-256 of its canonical JSON (sorted keys, no spaces)."""
        canonical = json.dumps(request, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
        return hashlib.sha256(canonical.encode()).hexdigest()

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored reply for `key`, or None. An entry that cannot be read is a miss, with a warning that names
        its file: `put` renames whole files into place, so a damaged entry is not a torn write, and the new answer
        will replace it."""
        path = self._path(key)
        try:
            value = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(value, dict):
                raise ValueError(f"a JSON {type(value).__name__}, not an object")
        except FileNotFoundError:
            self.misses += 1
            return None
        except (OSError, ValueError) as exc:
            warnings.warn(f"{path}: unreadable judge cache entry ({exc}); asking the judge again", stacklevel=2)
            self.misses += 1
            return None
        self.hits += 1
        return value

    def put(self, key: str, value: dict[str, Any]) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{key[:8]}-", suffix=".tmp")
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as file:
                json.dump(value, file, ensure_ascii=False)
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise

    def __len__(self) -> int:
        return sum(1 for _ in self.directory.glob("*/*.json"))

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def __repr__(self) -> str:
        return f"JudgeCache({str(self.directory)!r}, hits={self.hits}, misses={self.misses})"
