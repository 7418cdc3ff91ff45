"""The contexts a response continues and holds (app/queue/placement.py): what its placement and its
successors' go by. A `prompt_cache_key` is scoped to its account."""

from __future__ import annotations

from typing import Any

from app.protocol.response_object import ResponseRecord
from app.queue.placement import contexts_continued, contexts_held


def record(account: str, **settings: Any) -> ResponseRecord:
    previous = settings.pop("previous", None)
    return ResponseRecord(
        "resp_new", "m", "queued", 0.0, None, previous,
        {"requested": {"account_id": account}, **settings}, {}, store=True, background=False, stream=False,
    )  # fmt: skip


def test_a_response_continues_its_chain_then_its_conversation_then_its_cache_key() -> None:
    made = record("acct_a", previous="resp_old", conversation={"id": "conv_1"}, prompt_cache_key="k")
    continued = contexts_continued(made)
    assert continued[:2] == ("response:resp_old", "conversation:conv_1") and continued[2].startswith("key:")
    assert contexts_held(made) == ("response:resp_new", *continued[1:])
    assert contexts_continued(record("acct_a")) == ()


def test_one_accounts_cache_key_never_names_another_accounts_context() -> None:
    ours, theirs = record("acct_a", prompt_cache_key="k"), record("acct_b", prompt_cache_key="k")
    assert contexts_continued(ours) != contexts_continued(theirs)
    assert contexts_continued(ours) == contexts_continued(record("acct_a", prompt_cache_key="k"))
