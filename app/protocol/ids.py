"""Opaque object ids: a type prefix and 48 random hex digits, as OpenAI's look."""

from __future__ import annotations

import secrets
from typing import Literal

Prefix = Literal[
    "resp",
    "msg",
    "fc",
    "fco",
    "ctc",
    "ctco",
    "rs",
    "call",
    "req",
    "acct",
    "key",
    "conv",
    "cmp",
    "we",
    "evt",
    "mcp",
    "mcpl",
    "mcpr",
    "mcpa",
    "steer",
    "vs",
    "vsfb",
    "fs",
    "ws",
    "sh",
    "sho",
    "lsh",
    "lsho",
    "apc",
    "apco",
    "tsc",
    "tso",
    "adt",
    "opk",
]


def new_id(prefix: Prefix) -> str:
    return f"{prefix}_{secrets.token_hex(24)}"


def new_file_id() -> str:
    """A file's id: OpenAI's are `file-…`, with a hyphen, and clients match on it."""
    return f"file-{secrets.token_hex(24)}"
