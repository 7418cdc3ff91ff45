"""Webhook signatures as the Standard Webhooks specification makes them, and as the OpenAI SDK's
`client.webhooks.unwrap` checks them: `webhook-signature: v1,<base64 HMAC-SHA256 of
"<webhook-id>.<webhook-timestamp>.<body>">`, keyed by the base64 after a secret's `whsec_`. A
header may carry several signatures, space-separated: one per secret while a rotation overlaps."""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Sequence


def signature_header(webhook_id: str, timestamp: int, body: str, secrets: Sequence[str]) -> str:
    signed = f"{webhook_id}.{timestamp}.{body}".encode()
    return " ".join(
        "v1," + base64.b64encode(hmac.new(_key(secret), signed, hashlib.sha256).digest()).decode() for secret in secrets
    )


def headers(webhook_id: str, timestamp: int, body: str, secrets: Sequence[str]) -> dict[str, str]:
    """The headers of one attempt: the same id on every attempt, the attempt's own time."""
    return {
        "content-type": "application/json",
        "user-agent": "responses-server",
        "webhook-id": webhook_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature_header(webhook_id, timestamp, body, secrets),
    }


def _key(secret: str) -> bytes:
    return base64.b64decode(secret.removeprefix("whsec_")) if secret.startswith("whsec_") else secret.encode()
