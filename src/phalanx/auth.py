"""Who is calling: the principal a bearer token stands for, and token hashing."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, field

__all__ = ["ADMIN", "Principal", "hash_token", "new_token"]


@dataclass(frozen=True, slots=True)
class Principal:
    """A user, the tenants it acts for, and whether it is the cluster admin.

    A user sees and acts on the jobs of its own tenants only; the admin sees
    and acts on everything and alone changes cluster configuration.
    """

    user: str
    tenants: frozenset[str] = field(default_factory=frozenset)
    admin: bool = False

    def may_act_for(self, tenant: str) -> bool:
        return self.admin or tenant in self.tenants

    @property
    def default_tenant(self) -> str | None:
        """The tenant a submission without one goes to: the only tenant, or none."""
        if len(self.tenants) == 1:
            return next(iter(self.tenants))
        return "default" if self.admin and not self.tenants else None


ADMIN = Principal(user="admin", admin=True)


def new_token() -> str:
    """A fresh bearer token (URL-safe, 256 bits)."""
    return "phx_" + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    """Tokens are stored hashed: a leaked database does not leak credentials."""
    return hashlib.sha256(token.encode()).hexdigest()
