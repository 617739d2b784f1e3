"""``phalanx sbatch``: parse a batch script client-side and submit it.

The script and its ``#SBATCH`` directives are parsed by
:mod:`phalanx.dialects.slurm` (which loads pydantic; only sbatch pays for
that). Prints ``Submitted batch job N`` (``N`` with ``--parsable``);
``--wait`` blocks until the job ends and exits with its exit code;
``--test-only`` asks the server for a start estimate and submits nothing.
``--strict`` (default) / ``--lenient`` are phalanx additions: lenient
accepts options phalanx cannot honour, with a warning.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from phalanx.cli.slurm.common import tool_error

__all__ = ["find_script", "run"]

_SHORT_VALUE = set("AabcDdeGiJLMmNnopqSstwxCFk")
_SHORT_FLAGS = set("HhIOQvVWs")
_LONG_FLAGS = {
    "--parsable",
    "--wait",
    "--test-only",
    "--hold",
    "--exclusive",
    "--requeue",
    "--no-requeue",
    "--overcommit",
    "--quiet",
    "--verbose",
    "--help",
    "--usage",
    "--contiguous",
    "--spread-job",
    "--use-min-nodes",
    "--ignore-pbs",
    "--oversubscribe",
    "--no-kill",
    "--get-user-env",
    "--export-file",
    "--version",
}


def find_script(argv: Sequence[str]) -> int | None:
    """Index of the script argument (the first operand, ``:`` between the components of a
    heterogeneous job aside), or ``None`` (stdin / ``--wrap``)."""
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            return i + 1 if i + 1 < len(argv) else None
        if arg == ":":
            i += 1
            continue
        if arg.startswith("--"):
            if "=" not in arg and arg not in _LONG_FLAGS:
                i += 1
            i += 1
            continue
        if arg.startswith("-") and len(arg) > 1:
            if arg[1] in _SHORT_VALUE and len(arg) == 2:
                i += 1
            i += 1
            continue
        return i
    return None


def run(argv: Sequence[str]) -> int:
    """The sbatch command; returns the exit status."""
    from phalanx.dialects.slurm.script import MAX_SCRIPT_BYTES
    from phalanx.errors import PhalanxError

    args = [a for a in argv if a not in ("--strict", "--lenient")]
    lenient = "--lenient" in argv and "--strict" not in argv[argv.index("--lenient") :]
    parsable = "--parsable" in args
    wait = "--wait" in args or "-W" in args
    test_only = "--test-only" in args
    index = find_script(args)
    wrapped = any(a == "--wrap" or a.startswith("--wrap=") for a in args)
    script_path: str | None = None
    if index is not None and not wrapped:
        script_path = args[index]
        try:
            # A byte over the 4 MiB limit is enough for build_request to refuse it.
            with open(script_path, "rb") as fh:
                script_text = fh.read(MAX_SCRIPT_BYTES + 1).decode("utf-8", errors="replace")
        except OSError as exc:
            tool_error("sbatch", f"Unable to open file {script_path}: {exc.strerror or exc}")
            return 1
    elif wrapped:
        script_text = ""
    else:
        if sys.stdin.isatty():
            sys.stderr.write("sbatch: Reading batch script from stdin (end with Ctrl-D)\n")
        # As bytes, one byte past the 4 MiB limit at most (check_script refuses it), decoded
        # as a script file is (DOS line breaks stay, for check_script to refuse).
        stdin = getattr(sys.stdin, "buffer", None)
        if stdin is None:  # a text stream stands in for stdin (tests)
            script_text = sys.stdin.read(MAX_SCRIPT_BYTES + 1)
        else:
            script_text = stdin.read(MAX_SCRIPT_BYTES + 1).decode("utf-8", errors="replace")
    import getpass
    import socket

    from phalanx.dialects.slurm.sbatch import build_request, submission_dict

    try:
        request = build_request(
            args,
            script_text=script_text,
            script_path=script_path,
            env=dict(os.environ),
            cwd=os.getcwd(),
            now=time.time(),
            user=getpass.getuser(),
            lenient=lenient,
            submit_host=socket.gethostname(),
        )
        submission = submission_dict(request, env=dict(os.environ))
    except PhalanxError as exc:
        for line in exc.detail.splitlines() or [exc.error]:
            sys.stderr.write(
                line + "\n" if line.startswith("sbatch:") else f"sbatch: error: {line}\n"
            )
        return 1
    for warning in request.warnings:
        sys.stderr.write(f"sbatch: warning: {warning}\n")
    parsable = parsable or bool(request.options.parsable)
    wait = wait or bool(request.options.wait)
    test_only = test_only or bool(request.options.test_only)
    from phalanx.client import Client

    try:
        with Client() as client:
            data = submission
            if test_only:
                return _test_only(client, data)
            job_id = client.submit(data)
            sys.stdout.write(f"{job_id}\n" if parsable else f"Submitted batch job {job_id}\n")
            sys.stdout.flush()
            if not wait:
                return 0
            job = client.wait(job_id, interval=1.0)
    except PhalanxError as exc:
        tool_error("sbatch", f"Batch job submission failed: {exc.detail}")
        return 1
    return _exit_status(job)


def _exit_status(job: dict[str, Any]) -> int:
    """``sbatch --wait``: the job's exit code (128+signal when killed, as a shell reports it)."""
    if job.get("signal"):
        return 128 + int(job["signal"])
    code = job.get("exit_code")
    if code is None:
        return 0 if job.get("state") == "COMPLETED" else 1
    return int(code) & 0xFF


def _test_only(client: Any, submission: dict[str, Any]) -> int:
    from phalanx.cli.slurm.common import slurm_time

    estimate = client.estimate(submission)
    if estimate is None:
        tool_error(
            "sbatch",
            "--test-only: this phalanx server cannot estimate a start time "
            "(no POST /api/v1/jobs/estimate); nothing was submitted",
        )
        return 1
    when = slurm_time(estimate.get("start_time"), "Unknown")
    procs = estimate.get("num_cpus") or ""
    nodes = ",".join(estimate.get("nodes") or []) or "(null)"
    partition = estimate.get("partition") or ""
    job_id = estimate.get("id") or 0
    sys.stderr.write(
        f"sbatch: Job {job_id} to start at {when} using {procs} processors on nodes "
        f"{nodes} in partition {partition}\n"
    )
    if estimate.get("why"):
        sys.stderr.write(f"sbatch: no start time: {estimate['why']}\n")
    return 0
