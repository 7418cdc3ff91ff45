"""Child processes that do not outlive their parent, and the local ports their servers take.

`die_with_parent` runs in the child between fork and exec (Popen's preexec_fn): on Linux the
kernel sends the child SIGTERM when its parent dies, however it dies, so a parent killed with
SIGKILL leaves no model server holding a GPU and no orphaned API or database behind.
"""

from __future__ import annotations

import ctypes
import signal
import socket
import sys

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def free_local_port() -> int:
    """A port on 127.0.0.1 that nothing listens on now, for a child server to take."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port
