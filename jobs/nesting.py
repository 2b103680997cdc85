"""How deeply a JSON text nests arrays and objects, found without parsing it.

Python's json module, the serializers and jsonschema all recurse once per level, so a deep
enough body is a RecursionError (a 500) wherever it is first read. This scan is linear and
never recurses: the API's parser and `jobs.submit` (JOBS_MAX_INPUT_DEPTH) use it first.
"""

from __future__ import annotations

import itertools
import re

from .conf import jobs_settings
from .exceptions import ValidationFailed

# A JSON string, or an unterminated one up to the end (possessive: no backtracking, so the
# scan stays linear on any input). Brackets inside strings are not nesting.
_STRING = re.compile(rb'"(?:[^"\\]++|\\.)*+(?:"|\\?\Z)', re.DOTALL)
_NOT_BRACKETS = bytes(set(range(256)) - set(b"[]{}"))
_STEP = tuple(1 if byte in b"[{" else -1 for byte in range(256))


def json_depth(text: bytes) -> int:
    """Levels of `[` / `{` open at once at the deepest point: 0 for a scalar, 1 for `{}`.

    Any encoding that keeps ASCII as ASCII (UTF-8, Latin-1...). Malformed text gets a
    number too (the parser refuses it afterwards): what matters is how deep a recursive
    parser would go before it found out.
    """
    brackets = _STRING.sub(b"", text).translate(None, _NOT_BRACKETS)
    return max(itertools.accumulate(map(_STEP.__getitem__, brackets), initial=0))


def json_depth_over(text: bytes, limit: int) -> int | None:
    """`text`'s depth if it nests deeper than `limit`, else None (cheaply, for most texts)."""
    if text.count(b"[") + text.count(b"{") <= limit:
        return None  # too few openings, even counting those inside strings
    depth = json_depth(text)
    return depth if depth > limit else None


def input_depth_check(encoded: bytes | None) -> bytes:
    """`encoded`, a job input's JSON (None: too deep for json to encode), if it nests at most
    JOBS_MAX_INPUT_DEPTH levels; ValidationFailed otherwise."""
    limit = jobs_settings.MAX_INPUT_DEPTH
    depth = json_depth_over(encoded, limit) if encoded is not None else None
    if encoded is not None and depth is None:
        return encoded
    deep = f"{depth} levels deep" if depth else "too deeply to encode"
    raise ValidationFailed(
        f"input nests {deep}, over JOBS_MAX_INPUT_DEPTH={limit}",
        summary=f"input nests over JOBS_MAX_INPUT_DEPTH={limit}",
    )
