"""The usage ledger: decayed usage per association, and what each job was charged.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create the usage and job_charges tables."""
    op.create_table(
        "usage",
        sa.Column("tenant", sa.String(), nullable=False),
        sa.Column("user", sa.String(), nullable=False),
        sa.Column("gpu_seconds", sa.Float(), nullable=False),
        sa.Column("billing_seconds", sa.Float(), nullable=False),
        sa.Column("last_decay", sa.Float(), nullable=False),
        sa.Column("last_reset", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("tenant", "user", name="pk_usage"),
    )
    op.create_table(
        "job_charges",
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("tenant", sa.String(), nullable=False),
        sa.Column("user", sa.String(), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("billing", sa.Float(), nullable=False),
        sa.Column("alloc_tres", sa.JSON(), nullable=False),
        sa.Column("gpu_seconds", sa.Float(), nullable=False),
        sa.Column("billing_seconds", sa.Float(), nullable=False),
        sa.Column("charged_until", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name="fk_job_charges_job_id_jobs", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("job_id", name="pk_job_charges"),
    )


def downgrade() -> None:
    """Drop them again."""
    op.drop_table("job_charges")
    op.drop_table("usage")
