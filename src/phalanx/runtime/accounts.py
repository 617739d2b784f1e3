"""Whose Unix account a job of the local runtime runs as.

A server that runs as root behaves as Slurm does: root's own jobs (those of
the admin token and of a token whose user is ``root``) run as root, and every
other phalanx user's jobs run as the Unix account of the same name, with its
primary and supplementary groups. A user with no such account is refused at
submission, with one error that says so. One that runs unprivileged, or with
``phalanx up --single-user`` (``PHALANX_SINGLE_USER=1``), runs every job as
its own user.

Jobs of other accounts must be able to enter the state directory (their job
directories and default output files are in it): the default for root,
``/var/lib/phalanx``, is made so. Where another account cannot enter it (a
``--state-dir`` under ``/root``, say), root's jobs still run and other users'
submissions are refused, naming the folder.
"""

from __future__ import annotations

import os
import pwd
from pathlib import Path

from phalanx.auth import ADMIN
from phalanx.errors import Forbidden
from phalanx.runtime.spec import Account

__all__ = [
    "ROOT_USERS",
    "SINGLE_USER_ENV",
    "Account",
    "Accounts",
    "multi_user",
    "reachable",
    "single_user_requested",
]

SINGLE_USER_ENV = "PHALANX_SINGLE_USER"
ROOT_USERS = frozenset({"root", ADMIN.user})
"""The phalanx users whose jobs run as root: root, and the admin token's user."""


def single_user_requested(flag: bool = False) -> bool:
    """``--single-user``, or ``PHALANX_SINGLE_USER`` set to 1/true/yes."""
    value = os.environ.get(SINGLE_USER_ENV, "").strip().lower()
    return flag or value in ("1", "true", "yes", "on")


def multi_user(single_user: bool = False) -> bool:
    """Jobs run as their users' accounts: the server is root and not single-user."""
    return os.geteuid() == 0 and not single_user_requested(single_user)


def _account(entry: pwd.struct_passwd) -> Account:
    groups = tuple(os.getgrouplist(entry.pw_name, entry.pw_gid))
    return Account(entry.pw_name, entry.pw_uid, entry.pw_gid, groups, entry.pw_dir)


class Accounts:
    """The account each phalanx user's jobs run as, on a server that runs as root.

    ``state_dir`` is where the job directories live: an account other than root
    must be able to enter it.
    """

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.closed = reachable(str(state_dir))
        """The first folder of the state directory other accounts cannot enter (or None)."""

    def __call__(self, user: str) -> Account:
        """The account; :class:`Forbidden` when there is none, or it cannot run here."""
        if user in ROOT_USERS:
            return _account(pwd.getpwuid(0))
        try:
            entry = pwd.getpwnam(user)
        except (KeyError, ValueError):
            raise Forbidden(
                f"user {user!r} has no Unix account on this machine: jobs of the server's "
                "users run as the Unix account of the same name (create it with useradd, "
                "or start the server with --single-user to run every job as its own user)"
            ) from None
        if entry.pw_uid != 0 and self.closed is not None:
            raise Forbidden(
                f"user {user!r}: jobs run as Unix account {entry.pw_name!r}, which cannot "
                f"enter {self.closed} (it lacks o+x) on the way to the state dir "
                f"{self.state_dir}: start the server with a --state-dir every account can "
                "enter (root's default, /var/lib/phalanx, is one), or with --single-user"
            )
        return _account(entry)


def reachable(path: str) -> str | None:
    """The first folder of ``path`` (or itself) that other users cannot enter; None if none.

    Folders of ``path`` that do not exist yet are not counted.
    """
    current = os.path.abspath(path)
    folders = []
    while True:
        folders.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    for folder in reversed(folders):
        try:
            mode = os.stat(folder).st_mode
        except FileNotFoundError:
            return None
        if not mode & 0o001:
            return folder
    return None
