"""every running response's log in the live partition

Revision ID: 0023
Revises: 0022

The statements that store events read an active response's log in `event_log_live` alone
(app/storage/events.py): read through `event_log`, their one plan opened every day's partition
at each commit. A response that was running when migration 0021 came still has its log under a
key of its creation day: it moves here, with its templates, to a key of the live partition
(`new_log_key()`), and is folded into the day it ends as any other. Commits wait for the move
(the log's lock) and then write under the new key. Nothing is undone on downgrade: 0021's
downgrade moves every live log back to its creation day.
Create Date: 2026-12-07 07:00:00
"""

from __future__ import annotations

from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

LIVE_FROM = (2**31 - 1) << 32  # (migration 0021)


def upgrade() -> None:
    op.execute("LOCK TABLE event_log, event_templates IN EXCLUSIVE MODE")
    op.execute(f"""
        WITH moving AS (
            SELECT id, log_key FROM responses
            WHERE status IN ('queued', 'in_progress') AND log_key < {LIVE_FROM}
            FOR UPDATE
        ), rekeyed AS (
            UPDATE responses r SET log_key = new_log_key() FROM moving m WHERE r.id = m.id
            RETURNING m.log_key AS old, r.log_key AS new
        ), logs AS (
            UPDATE event_log e SET log_key = k.new FROM rekeyed k WHERE e.log_key = k.old
        )
        UPDATE event_templates t SET log_key = k.new FROM rekeyed k WHERE t.log_key = k.old
    """)


def downgrade() -> None:
    pass
