"""Reading a job's output back through the server: the API's log and the dashboard's tail.

When jobs run as their users' accounts the server (root) must not be the one
to follow a path a job controls: only a regular file of the job's account is
read, and never through a last symbolic link.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["ForeignOutput", "read_output"]


class ForeignOutput(Exception):
    """The output path is not a regular file of the job's account."""


def read_output(path: Path, owner: int | None, offset: int, limit: int) -> tuple[bytes, int, int]:
    """``(data, start, size)``: up to ``limit`` bytes from ``offset`` (negative: the last
    ``limit`` bytes), where they start, and the file's size; ``(b"", 0, 0)`` while the
    file does not exist. With ``owner`` (the uid of the job's account), anything but a
    regular file of that uid raises :class:`ForeignOutput`, and a last symbolic link
    is not followed (``OSError`` ``ELOOP``); other read errors are ``OSError`` too."""
    flags = os.O_RDONLY | os.O_NONBLOCK | (os.O_NOFOLLOW if owner is not None else 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return b"", 0, 0
    with open(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if owner is not None and (st.st_uid != owner or not stat.S_ISREG(st.st_mode)):
            raise ForeignOutput(str(path))
        size = st.st_size
        start = max(0, size - limit) if offset < 0 else min(offset, size)
        f.seek(start)
        return f.read(limit), start, size
