"""Errors: every failure of the client is an :class:`AgentAddressError` (docs/API.md §0, §9)."""

from __future__ import annotations

from typing import Any


class AgentAddressError(Exception):
    """An error answered by the server (its ``code`` and message), or found by the client.

    ``code`` is the API's error code (docs/API.md §9) or one of the client's own:
    ``bad_response`` (the answer is not what the API returns: not JSON, a redirect, a missing
    field), ``unreachable`` (no answer), ``credentials_error``, ``credentials_insecure``,
    ``invalid_task``, ``unknown_task``, ``task_exists``, ``file_exists``, ``timed_out``.
    ``status`` is the HTTP status (``None`` when there was no answer), ``retry_after`` the
    seconds the server asked to wait (``Retry-After`` or ``retry_after_seconds``), ``body`` the
    error object as sent. Messages never carry the read token.
    """

    def __init__(
        self,
        message: str,
        *,
        code: str,
        status: int | None = None,
        retry_after: float | None = None,
        body: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status
        self.retry_after = retry_after
        self.body: dict[str, Any] = body or {}

    def __str__(self) -> str:
        where = f" (HTTP {self.status})" if self.status is not None else ""
        return f"{self.code}{where}: {self.message}"

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(code={self.code!r}, status={self.status!r}, "
            f"message={self.message!r})"
        )


class Unauthorized(AgentAddressError):
    """401 ``unauthorized``: a wrong read token, or an address this server does not know."""


class AddressGone(AgentAddressError):
    """410 ``address_gone``: the address was deleted or has expired."""


class RateLimited(AgentAddressError):
    """429 ``rate_limited`` after the client's retries: see ``retry_after``."""


class RevisionConflict(AgentAddressError):
    """409 ``revision_conflict``: ``current_revision`` is the key's revision (``None``: absent)."""

    def __init__(self, message: str, *, current_revision: int | None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.current_revision = current_revision


class InvalidSignature(AgentAddressError):
    """A wake (docs/API.md §19) whose signature or timestamp does not verify."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="invalid_signature")


def from_answer(status: int, body: dict[str, Any], retry_after: float | None) -> AgentAddressError:
    """The exception for an error answer whose body is the API's ``{"error": {...}}``."""
    detail = body.get("error")
    if not isinstance(detail, dict):
        return AgentAddressError(
            f"HTTP {status} without the API's error object",
            code="bad_response",
            status=status,
            retry_after=retry_after,
        )
    code = detail.get("code")
    code = code if isinstance(code, str) else "bad_response"
    message = detail.get("message")
    message = message if isinstance(message, str) else f"HTTP {status}"
    seconds = detail.get("retry_after_seconds")
    if isinstance(seconds, (int, float)) and not isinstance(seconds, bool):
        retry_after = float(seconds) if retry_after is None else max(retry_after, float(seconds))
    kw: dict[str, Any] = {
        "code": code,
        "status": status,
        "retry_after": retry_after,
        "body": detail,
    }
    if code == "revision_conflict":
        current = detail.get("current_revision")
        return RevisionConflict(
            message, current_revision=current if isinstance(current, int) else None, **kw
        )
    if code == "unauthorized":
        return Unauthorized(message, **kw)
    if code == "address_gone":
        return AddressGone(message, **kw)
    if code == "rate_limited" or status == 429:
        return RateLimited(message, **kw)
    return AgentAddressError(message, **kw)
