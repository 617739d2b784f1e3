"""The leader lease: which of several servers on one PostgreSQL leads, and its fencing token.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create the leader_lease table."""
    op.create_table(
        "leader_lease",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("holder", sa.String(), nullable=True),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("url", sa.String(), nullable=False),
        sa.Column("backend_pid", sa.Integer(), nullable=True),
        sa.Column("backend_start", sa.Float(), nullable=True),
        sa.Column("acquired", sa.Float(), nullable=True),
        sa.Column("renewed", sa.Float(), nullable=True),
        sa.Column("expires", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_leader_lease"),
    )


def downgrade() -> None:
    """Drop it again."""
    op.drop_table("leader_lease")
