"""Reading back JSON files the tool wrote (``summary.json``, checkpoint ``meta.json``, ``origin.json``,
``study.json``, event lines), which a user, a full disk or another program may have changed: the one reader
for the simulator and for ``analysis/`` (which imports nothing of the simulator but ``iotfl_sim.core``).

Python's decoder follows nested lists and objects by recursion: a document nested a few thousand levels deep
(a few KB of ``[``) raises RecursionError, which is not a ValueError and would escape every handler of
malformed JSON. Here every malformed file is a ValueError (UnicodeDecodeError included), and so is a document
nested more than MAX_JSON_DEPTH levels, which whatever walks it later (YAML dumps, formatting) would recurse on.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

MAX_JSON_DEPTH = 100  # run and study files nest about 10 levels


def loads(text: str | bytes) -> Any:
    """``json.loads``, refusing (ValueError, like any malformed JSON) a document nested over MAX_JSON_DEPTH."""
    try:
        doc = json.loads(text)
    except RecursionError:
        doc = None
    else:
        level = [doc]
        for _ in range(MAX_JSON_DEPTH):
            level = [v for x in level for v in (x.values() if isinstance(x, dict) else x if isinstance(x, list) else ())]
            if not level:
                return doc
    raise ValueError(f"nested more than {MAX_JSON_DEPTH} levels deep")


def read(path: Path) -> Any:
    """The JSON document in file ``path`` (UTF-8); OSError if unreadable, ValueError if malformed."""
    return loads(Path(path).read_bytes())
