"""How the API reads a request body: its length known first, its nesting bounded before parsing.

DRF reads a body only as far as CONTENT_LENGTH says, and a body sent with
`Transfer-Encoding: chunked` has none: it would be read as empty and answered with a
misleading "kind: This field is required". Under ASGI the server has handed Django the
whole body already (a spooled file), so its length is measured there; under WSGI it cannot
be known before reading the stream, so the answer is 411.
"""

from __future__ import annotations

import codecs
import os
from collections.abc import Mapping
from typing import IO, Any

from django.conf import settings
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser
from rest_framework.utils import json

from jobs.conf import jobs_settings
from jobs.nesting import json_depth_over

from .errors import LengthRequired, NestingTooDeep

# A submission's `input` sits one level inside the body's object.
ENVELOPE_DEPTH = 1


def body_depth_limit() -> int:
    return int(jobs_settings.MAX_INPUT_DEPTH) + ENVELOPE_DEPTH


class DepthLimitedJSONParser(JSONParser):
    """DRF's JSONParser behind a linear scan of the body's nesting (jobs.nesting): a body
    nested deeper than body_depth_limit() is a 400 before anything recursive reads it."""

    def parse(
        self,
        stream: IO[Any],
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        raw = stream.read()
        try:
            text = raw.decode(encoding)  # refuses bytes-to-bytes codecs (bz2_codec...) too
        except LookupError:
            raise ParseError(f'Unsupported charset "{encoding}" in Content-Type') from None
        except UnicodeDecodeError as exc:
            raise ParseError(f"JSON parse error - {exc}") from None
        # The scan needs ASCII brackets and quotes as single bytes, as UTF-8 has them.
        utf8 = raw if codecs.lookup(encoding).name == "utf-8" else text.encode("utf-8", "replace")
        limit = body_depth_limit()
        depth = json_depth_over(utf8, limit)
        if depth is not None:
            raise NestingTooDeep(
                f"the JSON body nests {depth} levels deep, over the limit of {limit} "
                f"(JOBS_MAX_INPUT_DEPTH={jobs_settings.MAX_INPUT_DEPTH} for a job's input, "
                f"{ENVELOPE_DEPTH} more for the request around it)"
            )
        try:
            return json.loads(text, parse_constant=json.strict_constant if self.strict else None)
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {exc}") from None


def body_length(request: HttpRequest) -> int:
    """The body's length in bytes, set as CONTENT_LENGTH when the client sent none (chunked)
    so that DRF reads the body and the size limit sees it; 411 where it cannot be known."""
    declared = request.META.get("CONTENT_LENGTH") or ""
    if declared:
        try:
            return int(declared)
        except ValueError:
            raise ParseError("Content-Length is not a number") from None
    length = _received_length(request)
    if length is None:
        if "HTTP_TRANSFER_ENCODING" in request.META:
            raise LengthRequired(
                "this server cannot read a request body sent without Content-Length "
                "(Transfer-Encoding: chunked): send Content-Length"
            )
        return 0  # no body at all
    if length:
        request.META["CONTENT_LENGTH"] = str(length)
    return length


def _received_length(request: HttpRequest) -> int | None:
    """What an ASGI server handed over of the body, measured without reading it into memory;
    None under WSGI, where a body without Content-Length is still on the socket."""
    if not isinstance(request, ASGIRequest):
        return None
    if hasattr(request, "_body"):  # read already (by a middleware): DRF reads it from there
        return len(request._body)
    stream = request._stream  # Django's spooled copy of the whole body
    start = stream.tell()
    end = stream.seek(0, os.SEEK_END)
    stream.seek(start)
    return int(end - start)
