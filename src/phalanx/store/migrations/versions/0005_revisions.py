"""Store revisions (the Kubernetes API's resourceVersion), Kubernetes metadata, tombstones.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add the revision columns, the counter (starting at 0), object_meta and tombstones."""
    for table in ("jobs", "objects"):
        op.add_column(
            table, sa.Column("revision", sa.Integer(), server_default=sa.text("0"), nullable=False)
        )
        op.create_index(f"ix_{table}_revision", table, ["revision"], unique=False)
        op.add_column(
            table,
            sa.Column(
                "created_revision", sa.Integer(), server_default=sa.text("0"), nullable=False
            ),
        )
    revisions = op.create_table(
        "revisions",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("value", sa.Integer(), nullable=False),
        sa.Column("compacted", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_revisions"),
    )
    op.bulk_insert(revisions, [{"id": 1, "value": 0, "compacted": 0}])
    op.create_table(
        "object_meta",
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("meta", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("kind", "name", name="pk_object_meta"),
    )
    op.create_table(
        "tombstones",
        sa.Column("revision", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("time", sa.Float(), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("meta", sa.JSON(), nullable=True),
        sa.Column("created", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("revision", name="pk_tombstones"),
    )


def downgrade() -> None:
    """Drop them again."""
    op.drop_table("tombstones")
    op.drop_table("object_meta")
    op.drop_table("revisions")
    for table in ("objects", "jobs"):
        op.drop_index(f"ix_{table}_revision", table_name=table)
        with op.batch_alter_table(table) as batch:
            batch.drop_column("created_revision")
            batch.drop_column("revision")
