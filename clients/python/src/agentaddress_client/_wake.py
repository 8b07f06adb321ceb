"""Verifying a wake (docs/API.md §19): Standard Webhooks signatures."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from collections.abc import Mapping
from typing import Any

from ._errors import InvalidSignature


def _header(headers: Mapping[str, str], name: str) -> str:
    for k, v in headers.items():
        if k.lower() == name:
            return v
    raise InvalidSignature(f"the {name} header is missing")


def verify_wake(
    secret: str,
    headers: Mapping[str, str],
    body: bytes | str,
    *,
    tolerance_seconds: int = 300,
    now: float | None = None,
) -> dict[str, Any]:
    """Checks a wake's ``webhook-signature`` (HMAC-SHA256 of ``{id}.{timestamp}.{body}`` under
    the base64 key after ``whsec_`` of ``secret``) and that ``webhook-timestamp`` is within
    ``tolerance_seconds`` of now. Returns the wake's JSON body; raises :class:`InvalidSignature`.

    ``headers`` is any mapping of the request's headers (names compared without case); ``body``
    the raw body exactly as received."""
    raw = body.encode() if isinstance(body, str) else bytes(body)
    msg_id = _header(headers, "webhook-id")
    stamp = _header(headers, "webhook-timestamp")
    signatures = _header(headers, "webhook-signature")
    try:
        ts = int(stamp)
    except ValueError:
        raise InvalidSignature("webhook-timestamp is not a number of seconds") from None
    current = time.time() if now is None else now
    if abs(current - ts) > tolerance_seconds:
        raise InvalidSignature("webhook-timestamp is too far from now (a replay, or a clock off)")
    encoded = secret[len("whsec_") :] if secret.startswith("whsec_") else secret
    try:
        key = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidSignature("the signing secret is not whsec_ and base64") from None
    signed = msg_id.encode() + b"." + stamp.encode() + b"." + raw
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    for candidate in signatures.split():
        version, _, sig = candidate.partition(",")
        if version == "v1" and hmac.compare_digest(sig.encode(), expected.encode()):
            break
    else:
        raise InvalidSignature("no webhook-signature matches the body")
    try:
        parsed = json.loads(raw)
    except ValueError:
        raise InvalidSignature("the signed body is not JSON") from None
    if not isinstance(parsed, dict):
        raise InvalidSignature("the signed body is not a JSON object")
    return parsed
