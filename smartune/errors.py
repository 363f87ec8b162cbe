"""The one error the SDK raises for the server's refusals: `SmartuneError(status, detail, field)`; its
subclass `ServerUnreachable` when no answer came at all."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import httpx


class SmartuneError(Exception):
    """The server refused a request (`status` is its HTTP status, `detail` its reason, `field` the dotted
    path of the field at fault when one is), or no answer came (`status` is None: the server could not be
    reached, or no API key was found)."""

    def __init__(
        self,
        status: int | None,
        detail: str,
        field: str | None = None,
        *,
        errors: list[dict[str, Any]] | None = None,
    ) -> None:
        super().__init__(status, detail, field)
        self.status = status
        self.detail = detail
        self.field = field
        self.errors = errors or []  # a 422 lists every mistake found: [{"field", "msg", "type"}, ...]

    def __str__(self) -> str:
        return f"{self.status}: {self.detail}" if self.status is not None else self.detail

    def __repr__(self) -> str:
        return f"SmartuneError(status={self.status!r}, detail={self.detail!r}, field={self.field!r})"

    @classmethod
    def from_response(cls, response: httpx.Response) -> SmartuneError:
        """From the API's error body `{"detail", "field"[, "errors"]}`; any other body as plain text."""
        try:
            body = response.json()
        except ValueError:
            body = None
        if not isinstance(body, dict) or "detail" not in body:
            return cls(response.status_code, response.text.strip() or response.reason_phrase)
        detail = body["detail"]
        errors = body.get("errors")
        return cls(
            response.status_code,
            detail if isinstance(detail, str) else str(detail),
            body.get("field") if isinstance(body.get("field"), str) else None,
            errors=errors if isinstance(errors, list) else None,
        )


class ServerUnreachable(SmartuneError):
    """No answer came from the server (refused connection, unknown host, timeout): `status` is None."""

    def __init__(self, detail: str) -> None:
        super().__init__(None, detail)
