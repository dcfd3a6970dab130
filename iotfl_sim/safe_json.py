"""Reading back JSON files the tool wrote (``summary.json``, checkpoint ``meta.json``, ``origin.json``), which
a user, a full disk or another program may have changed.

Python's decoder follows nested lists and objects by recursion: a document nested a few thousand levels
deep (a few KB of ``[``) raises RecursionError, which is not a ValueError and would escape every handler of
malformed JSON. Here it is one: every malformed file is a ValueError (UnicodeDecodeError included).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def loads(text: str | bytes) -> Any:
    """``json.loads``; a document nested deeper than the decoder can follow raises ValueError."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply (thousands of levels of lists or objects)") from None


def read(path: Path) -> Any:
    """The JSON document in file ``path`` (UTF-8); OSError if unreadable, ValueError if malformed."""
    return loads(Path(path).read_bytes())
