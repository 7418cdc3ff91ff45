"""What the tool loop asks of each kind of call the server makes for a response (an MCP tool's,
a file search): what it makes ready before the model is asked, the events that open a call (the
call is known to be in flight once they are committed), the call made, and what becomes of a
call that was in flight when the worker making it stopped."""

from __future__ import annotations

from typing import Protocol

from app.protocol.shapes import Event, Item
from workers.translation.output_items import HostedCallOutput


class HostedKind(Protocol):
    def handles(self, call: HostedCallOutput) -> bool:
        """Whether the call is of this kind."""
        ...

    async def prepare(self, context: list[Item]) -> None:
        """Before the model is first asked: what the model is offered is ready (an MCP server's
        tools listed), from the context where it already holds it."""
        ...

    def opening(self, call: HostedCallOutput) -> list[Event]:
        """The events that open the call, once the model's arguments are whole."""
        ...

    async def make(self, call: HostedCallOutput) -> list[Event]:
        """Makes the call; the events that close it."""
        ...

    async def make_interrupted(self, call: HostedCallOutput) -> list[Event]:
        """A call that was in flight when the worker making it stopped: made again if that is
        safe, else ended failed (design invariant 4); the events that close it."""
        ...
