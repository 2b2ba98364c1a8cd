"""The admin API: status, services, explain, the active policy, drains, chaos, metrics.

A FastAPI app (``app.build_api``) served by uvicorn (``server.serve``), with bearer tokens
(``auth``), an audit log of every change (``audit``), the policy kept in Redis and followed
from there (``policy_store``, ``policy_follow``) and a status page (``static/``).

Exception tree (``errors``; each one is answered as {"error": message, ...})::

    ApiError                 400 unless a subclass says otherwise
    ├── NotFound             404: no such region, GPU server or service
    ├── Unauthorized         401: no token or an unknown one (``deps``)
    ├── Forbidden            403: the token lacks the scope (``deps``)
    ├── PolicyRejected       422: a policy that failed to load; carries its diagnostics
    ├── BadQuery, BadTtl     422: an explain query or a ttl that makes no sense
    ├── PersistError         500: the policy store directory cannot be written
    ├── BadGateway           502: a GPU server or the control socket cannot be reached
    └── Unavailable          503: the feature behind the route is not configured

State errors (``state.StateError``) are answered 503 with the same shape.
"""

from director.api.app import build_api
from director.api.config import ApiConfig, PolicyDocument

__all__ = ["ApiConfig", "PolicyDocument", "build_api"]
