"""Bearer tokens: who a token is, and the admin's creating and revoking of them.

Lookups are cached for a few seconds (never past a token's expiry); a
revocation empties the cache at once, and a lookup that raced one is not
cached. Token writes are their own small transactions, outside the loop.
"""

from __future__ import annotations

import hmac
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from phalanx.auth import Principal, hash_token, new_token
from phalanx.errors import Conflict, Forbidden, Invalid, NotFound, Unauthorized
from phalanx.store import Store, TokenRow

__all__ = ["Tokens"]

_TOKEN_CACHE_S = 5.0
_MAX_TOKEN_LIFE_S = 100 * 365 * 86400.0


class Tokens:
    """Authenticates bearer tokens against the store; creates and revokes them."""

    def __init__(
        self, store: Store, clock: Callable[[], float], require_leader: Callable[[], None]
    ) -> None:
        self.store = store
        self.clock = clock
        self.require_leader = require_leader
        """Raises on a standby: token writes go to the leader."""
        self._cache: dict[str, tuple[float, float | None, Principal]] = {}
        """Token hash -> (when looked up, its expiry, its principal)."""
        self._lock = threading.Lock()
        self._generation = 0
        """Bumped by every revocation: a lookup that raced one is not cached."""

    def forget_cached(self) -> None:
        """Drop every cached answer: the next lookups go to the store."""
        with self._lock:
            self._generation += 1
            self._cache.clear()

    def authenticate(self, token: str) -> Principal:
        """The principal of a bearer token; :class:`Unauthorized` for an unknown, revoked
        or expired one. Answers are cached for a few seconds, never past the token's
        expiry, and :meth:`revoke` empties the cache."""
        digest = hash_token(token)
        now = time.monotonic()
        cached = self._cache.get(digest)
        if (
            cached is not None
            and now - cached[0] < _TOKEN_CACHE_S
            and (cached[1] is None or cached[1] > self.clock())
        ):
            return cached[2]
        generation = self._generation
        row = self.store.find_token(digest)
        # The lookup is by the hash's index; the comparison that decides is constant-time.
        if (
            row is None
            or not hmac.compare_digest(row.token_hash.encode(), digest.encode())
            or row.revoked
            or (row.expires is not None and row.expires <= self.clock())
        ):
            self._cache.pop(digest, None)
            raise Unauthorized("invalid or expired token")
        principal = Principal(user=row.user, tenants=frozenset(row.tenants), admin=row.admin)
        with self._lock:
            # A revocation that committed since the lookup must not be undone by caching.
            if generation == self._generation:
                self._cache[digest] = (now, row.expires, principal)
        return principal

    def cached(self, token: str) -> Principal | None:
        """The principal of a token :meth:`authenticate` answered for lately; None when it
        is not in the cache (the caller authenticates it). Never reads the store."""
        cached = self._cache.get(hash_token(token))
        if (
            cached is None
            or time.monotonic() - cached[0] >= _TOKEN_CACHE_S
            or (cached[1] is not None and cached[1] <= self.clock())
        ):
            return None
        return cached[2]

    def create(
        self,
        principal: Principal,
        *,
        user: str,
        tenants: Sequence[str],
        admin: bool = False,
        name: str = "",
        expires: float | None = None,
    ) -> tuple[str, TokenRow]:
        """A new bearer token for ``user`` acting for ``tenants``; its plaintext is shown once."""
        if not principal.admin:
            raise Forbidden("only the admin creates tokens")
        self.require_leader()
        if not user:
            raise Invalid("user: required")
        if not admin and not tenants:
            raise Invalid("tenants: a user token needs at least one tenant")
        if expires is not None:
            now = self.clock()
            if not expires > now:  # NaN too
                raise Invalid("expires: the time is already past (epoch seconds in the future)")
            if not expires <= now + _MAX_TOKEN_LIFE_S:
                raise Invalid(
                    "expires: at most 100 years ahead (omit it for a token that never expires)"
                )
        token = new_token()
        with self.store.begin() as tx:
            row = tx.create_token(
                name=name or user,
                user=user,
                tenants=list(tenants),
                admin=admin,
                token_hash=hash_token(token),
                created=self.clock(),
                expires=expires,
            )
        return token, row

    def revoke(self, principal: Principal, name: str) -> list[TokenRow]:
        """Revoke every token named ``name`` (admin only); they stop working at once.

        Refused (409) when it would leave no working admin token: make another admin
        token first. Revoking a revoked token again is fine."""
        if not principal.admin:
            raise Forbidden("only the admin revokes tokens")
        self.require_leader()
        rows = self.store.tokens()
        named = [row for row in rows if row.name == name]
        if not named:
            raise NotFound(f"no token named {name!r}")
        now = self.clock()
        ids = {row.id for row in named}
        live_admins = [
            row
            for row in rows
            if row.admin and not row.revoked and (row.expires is None or row.expires > now)
        ]
        if live_admins and all(row.id in ids for row in live_admins):
            raise Conflict(
                f"revoking {name!r} would leave no working admin token: create another "
                "admin token first (phalanx token create --admin --user NAME --name NAME)"
            )
        with self.store.begin() as tx:
            for row in named:
                if not row.revoked:
                    tx.revoke_token(row.id)
        self.forget_cached()
        return [replace(row, revoked=True) for row in named]
