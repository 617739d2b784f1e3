"""Job arrays and holds: array_job_id, array_task_id, hold on jobs.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add the array and hold columns, and the index to find an array's tasks."""
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("array_job_id", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("array_task_id", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("hold", sa.Boolean(), server_default=sa.false(), nullable=False))
    op.create_index("ix_jobs_array_job_id", "jobs", ["array_job_id"])


def downgrade() -> None:
    """Drop them again."""
    op.drop_index("ix_jobs_array_job_id", table_name="jobs")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("hold")
        batch.drop_column("array_task_id")
        batch.drop_column("array_job_id")
