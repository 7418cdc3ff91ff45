"""What the server seals for its clients: reasoning (`include: ["reasoning.encrypted_content"]`)
and compaction summaries (a `compaction` item's `encrypted_content`).

A `store: false` client keeps nothing here, yet its next turn should let the model see its own
reasoning, or the summary of what came before, again: the text goes to the client encrypted and
authenticated with a server key (Fernet: AES-128-CBC with an HMAC-SHA256) and comes back as the
item's `encrypted_content`; a token that was altered or sealed with another key is a 400. Keys
come from RESPONSES_ENCRYPTION_KEYS (comma-separated) or a file named by
RESPONSES_ENCRYPTION_KEY_FILE (one per line). The first key seals; every key opens, so a new key
is put first and an old one removed once nothing it sealed is still in use.
"""

from __future__ import annotations

from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from app import errors
from app.protocol.shapes import Item


class SealError(ValueError):
    """A token this deployment's keys did not seal, or that was altered."""


class Seal:
    def __init__(self, keys: list[str]) -> None:
        if not keys:
            raise ValueError("no encryption key")
        try:
            self._fernet = MultiFernet([Fernet(key.encode()) for key in keys])
        except ValueError as exc:  # a key that is not 32 url-safe base64-encoded bytes
            raise ValueError(f"an encryption key is malformed: {exc}") from None

    @classmethod
    def from_config(cls, keys: str | None, key_file: Path | None) -> Seal | None:
        """The deployment's seal, or None when it has no key (encrypted_content stays null)."""
        listed = [key.strip() for key in (keys or "").split(",") if key.strip()]
        if key_file is not None:
            listed += [line.strip() for line in key_file.read_text().splitlines() if line.strip()]
        return cls(listed) if listed else None

    def seal(self, text: str) -> str:
        return self._fernet.encrypt(text.encode()).decode()

    def open(self, token: str) -> str:
        try:
            return self._fernet.decrypt(token.encode()).decode()
        except (InvalidToken, UnicodeError):
            raise SealError(token) from None


def new_key() -> str:
    return Fernet.generate_key().decode()


def open_sealed_items(items: list[Item], seal: Seal | None) -> None:
    """Sealed content a client sends back is checked before anything is stored: reasoning is
    opened (the model sees it again as the item's reasoning text, and it is stored so); a
    compaction item stays sealed, opened when the model is sent it. A token this deployment did
    not seal, or one that was altered, is a 400 naming it."""
    for index, item in enumerate(items):
        if item["type"] == "reasoning" and "encrypted_content" in item:
            text = _opened(item.pop("encrypted_content"), seal, f"input[{index}].encrypted_content")
            item["content"] = [{"type": "reasoning_text", "text": text}]
        elif item["type"] == "compaction":
            _opened(item["encrypted_content"], seal, f"input[{index}].encrypted_content")


def _opened(token: str, seal: Seal | None, param: str) -> str:
    if seal is None:
        raise errors.InvalidRequest(
            f"Invalid '{param}': this server has no encryption key, so it sealed nothing.",
            param=param,
            code="invalid_encrypted_content",
        )
    try:
        return seal.open(token)
    except SealError:
        raise errors.InvalidRequest(
            f"Invalid '{param}': the encrypted content was not made by this server, or was altered.",
            param=param,
            code="invalid_encrypted_content",
        ) from None
