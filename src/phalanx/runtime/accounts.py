"""Whose Unix account a job of the local runtime runs as.

A server that runs as root runs every job as the account of its phalanx user
(the account of the same name, with its primary and supplementary groups);
one that runs unprivileged, or with ``phalanx up --single-user``
(``PHALANX_SINGLE_USER=1``), runs every job as its own user. Root (uid 0) is
never a job's account.
"""

from __future__ import annotations

import os
import pwd

from phalanx.errors import Forbidden
from phalanx.runtime.spec import Account

__all__ = ["SINGLE_USER_ENV", "Account", "account_for", "multi_user", "reachable"]

SINGLE_USER_ENV = "PHALANX_SINGLE_USER"


def single_user_requested(flag: bool = False) -> bool:
    """``--single-user``, or ``PHALANX_SINGLE_USER`` set to 1/true/yes."""
    value = os.environ.get(SINGLE_USER_ENV, "").strip().lower()
    return flag or value in ("1", "true", "yes", "on")


def multi_user(single_user: bool = False) -> bool:
    """Jobs run as their users' accounts: the server is root and not single-user."""
    return os.geteuid() == 0 and not single_user_requested(single_user)


def account_for(user: str) -> Account:
    """The account jobs of phalanx user ``user`` run as; :class:`Forbidden` when there is none."""
    try:
        entry = pwd.getpwnam(user)
    except (KeyError, ValueError):
        raise Forbidden(
            f"user {user!r} has no Unix account on this machine: jobs run as the account "
            "of their user's name (create it, or start the server with --single-user)"
        ) from None
    if entry.pw_uid == 0:
        raise Forbidden(f"user {user!r} is the Unix account root (uid 0): jobs never run as root")
    groups = tuple(os.getgrouplist(entry.pw_name, entry.pw_gid))
    return Account(entry.pw_name, entry.pw_uid, entry.pw_gid, groups, entry.pw_dir)


def reachable(path: str) -> str | None:
    """The first folder of ``path`` (or itself) that other users cannot enter; None if none."""
    current = os.path.abspath(path)
    folders = []
    while True:
        folders.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    for folder in reversed(folders):
        if not os.stat(folder).st_mode & 0o001:
            return folder
    return None
