"""Postgres tells the API processes when a key or an account changes

Revision ID: 0022
Revises: 0021

Each API process keeps the callers of the keys it saw lately (app/service/known_keys.py), so that a
client's next request costs no statement. A statement that revokes a key, or disables, removes or
limits an account, sends a notification from its commit (`responses_keys_changed`), and every
API process listening forgets the keys it kept. A new key needs none: only keys found are kept.
Create Date: 2026-12-05 18:00:00
"""

from __future__ import annotations

from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""
        CREATE FUNCTION keys_changed() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_notify('responses_keys_changed', '');
            RETURN NULL;
        END $$
    """)
    op.execute("""
        CREATE TRIGGER api_keys_changed AFTER UPDATE OF revoked_at, key_hash, account_id OR DELETE OR TRUNCATE
        ON api_keys FOR EACH STATEMENT EXECUTE FUNCTION keys_changed()
    """)
    op.execute("""
        CREATE TRIGGER accounts_changed
        AFTER UPDATE OF disabled_at, requests_per_minute, tokens_per_minute, max_concurrent OR DELETE OR TRUNCATE
        ON accounts FOR EACH STATEMENT EXECUTE FUNCTION keys_changed()
    """)


def downgrade() -> None:
    op.execute("DROP TRIGGER accounts_changed ON accounts")
    op.execute("DROP TRIGGER api_keys_changed ON api_keys")
    op.execute("DROP FUNCTION keys_changed()")
