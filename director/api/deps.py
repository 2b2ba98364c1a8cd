"""FastAPI dependencies: the runtime of the app, and bearer-token authentication."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from director.api.auth import Principal
from director.api.errors import ApiError
from director.api.runtime import ApiRuntime

bearer = HTTPBearer(auto_error=False, description="Authorization: Bearer <token>")


class Unauthorized(ApiError):
    status = 401


class Forbidden(ApiError):
    status = 403


def get_runtime(request: Request) -> ApiRuntime:
    return request.app.state.runtime


Runtime = Annotated[ApiRuntime, Depends(get_runtime)]


def require(scope: str) -> Callable[..., Any]:
    """A dependency that authenticates the bearer token and checks it grants ``scope``."""

    def check(runtime: Runtime, credentials: Annotated[
            HTTPAuthorizationCredentials | None, Depends(bearer)]) -> Principal:
        if credentials is None or credentials.scheme.lower() != "bearer":
            raise Unauthorized("missing bearer token (Authorization: Bearer <token>)")
        principal = runtime.tokens.authenticate(credentials.credentials)
        if principal is None:
            raise Unauthorized("unknown token")
        if not principal.allows(scope):
            raise Forbidden(f"token '{principal.name}' lacks the '{scope}' scope")
        return principal

    return check


Reader = Annotated[Principal, Depends(require("read"))]
Admin = Annotated[Principal, Depends(require("admin"))]
