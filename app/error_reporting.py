"""What a client is told when something fails: our own errors as they are, a dependency outage
as a 503, anything else as "internal error" with the request id (the details go to the log,
never to the client: an exception's text can hold SQL and its parameters)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from anyio.abc import TaskGroup
from redis.exceptions import RedisError
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.types import Scope

from app import errors

log = logging.getLogger(__name__)

REQUEST_ID = "request_id"  # the key of the request's id in its ASGI scope's state


def request_id_of(scope: Scope) -> str:
    return str(scope.get("state", {}).get(REQUEST_ID, "unknown"))


def client_error(exc: BaseException, request_id: str) -> errors.APIError:
    exc = collapsed(exc)
    if isinstance(exc, errors.APIError):
        return exc
    if isinstance(exc, PoolTimeout):
        log.warning("no database connection was free in time (%s): %s", request_id, exc)
        return errors.ServiceUnavailable("The server is busy: no database connection was free in time; please retry.")
    if isinstance(exc, OperationalError | DBAPIError | RedisError | OSError):
        log.warning("dependency unavailable (%s): %s", request_id, exc)
        return errors.ServiceUnavailable()
    log.error("unhandled error (%s)", request_id, exc_info=exc)
    return errors.internal_error(request_id)


def collapsed(exc: BaseException) -> BaseException:
    """The one error inside nested single-error groups (what anyio's task groups raise), so that
    handlers matching its type see it; a group of several errors stays as it is."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


@asynccontextmanager
async def task_group() -> AsyncIterator[TaskGroup]:
    """anyio's task group, raising a lone error as itself rather than wrapped in a group."""
    try:
        async with anyio.create_task_group() as group:
            yield group
    except BaseExceptionGroup as group_error:
        lone = collapsed(group_error)
        if lone is group_error:
            raise
        raise lone from None
