"""``srun`` from a login shell: allocate and run one step, or run a step in a job.

Outside a job, ``srun [options] command`` makes an allocation (a job with
sbatch's resource, queue, account, QOS, time and dependency options, but no
batch script), waits while it is pending (``srun: job N queued and waiting for
resources``), runs the step on it exactly as ``srun`` inside a batch script does
(the job's own ``srun``, through the job's step socket,
:mod:`phalanx.runtime.stepd`), streams its output, and ends the job with the
step, with its exit status. ``srun --jobid=N`` (or ``SLURM_JOB_ID`` from a
``salloc`` shell) runs a step in a running job of the caller's.

The command line is split here: the allocation's options go to sbatch's parser
(:mod:`phalanx.dialects.slurm.sbatch`), the step's to the job's srun, options
for both (``-N``, ``-n``, ``-c``, ...) to both.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["SrunArgs", "run", "split_args"]

ALLOCATION_SCRIPT = "#!/bin/sh\n# An allocation made by srun or salloc: it has no batch script.\n"

# Options of srun's step (not the allocation's); value-taking ones first.
STEP_VALUE = frozenset(
    {
        "output", "error", "input", "open-mode", "export", "chdir", "mpi", "cpu-bind",
        "cpu_bind", "mem-bind", "wait", "distribution", "slurmd-debug", "epilog",
        "prolog", "task-epilog", "task-prolog", "multi-prog",
        "het-group", "container-image", "container-mounts", "container-workdir",
        "container-name", "container-env", "container-save", "container-unshare",
        "network", "propagate", "gpu-bind", "tres-per-task", "jobid",
    }
)  # fmt: skip
STEP_FLAGS = frozenset(
    {
        "label", "pty", "unbuffered", "overlap", "exact", "whole", "disable-status",
        "preserve-env", "quit-on-interrupt", "verbose", "quiet", "no-kill",
        "container-mount-home", "no-container-mount-home", "container-remap-root",
        "no-container-remap-root", "container-writable", "container-readonly",
        "container-entrypoint", "no-container-entrypoint", "container-entrypoint-log",
        "overcommit", "immediate",
    }
)  # fmt: skip
STEP_OPTIONAL = frozenset({"kill-on-bad-exit", "immediate"})
"""Long options whose value is optional (``--kill-on-bad-exit[=0|1]``)."""
BOTH_VALUE = frozenset(
    {"nodes", "ntasks", "ntasks-per-node", "cpus-per-task", "gpus-per-task", "job-name"}
)
SHORT_STEP_VALUE = {"o": "output", "e": "error", "i": "input", "D": "chdir", "W": "wait"}
SHORT_STEP_VALUE.update({"m": "distribution"})
SHORT_BOTH_VALUE = {"N": "nodes", "n": "ntasks", "c": "cpus-per-task", "J": "job-name"}
SHORT_STEP_FLAGS = {"l": "label", "u": "unbuffered", "X": "disable-status", "E": "preserve-env"}
SHORT_STEP_FLAGS.update({"q": "quit-on-interrupt", "v": "verbose", "Q": "quiet", "k": "no-kill"})
SHORT_STEP_FLAGS.update({"O": "overcommit"})
TRY_HELP = 'Try "srun --help" for more information'
# Steps' options the job's srun does not know: taken here, not passed on.
CLIENT_ONLY = frozenset({"jobid", "immediate", "quit-on-interrupt", "disable-status"})


class SrunUsage(Exception):
    """A command line srun refuses (the message without ``srun: ``)."""


@dataclass
class SrunArgs:
    """srun's command line, split: the allocation's words (sbatch's syntax), the step's
    words (the job's srun's), the command, and what this client acts on itself."""

    allocation: list[str] = field(default_factory=list)
    step: list[str] = field(default_factory=list)
    command: list[str] = field(default_factory=list)
    jobid: str | None = None
    pty: bool = False
    job_name: str | None = None
    immediate: float | None = None
    help: bool = False
    components: list[SrunArgs] = field(default_factory=list)
    """A heterogeneous step's components after the first (``srun A : B``)."""

    @property
    def het(self) -> bool:
        return bool(self.components)

    def allocation_words(self) -> list[str]:
        """sbatch's words for the allocation: one group per component, ``:`` between."""
        words = list(self.allocation)
        for part in self.components:
            words += [":", *part.allocation]
        return words

    def step_words(self) -> list[str]:
        """The job's srun's words: each component's options and command, ``:`` between."""
        pty = ["--pty"] if self.pty and "--pty" not in self.step else []
        if not self.components:
            return [*self.step, *pty, "--", *self.command]
        words = [*self.step, *pty, *self.command]
        for part in self.components:
            words += [":", *part.step, *part.command]
        return words


def _sbatch_arity() -> tuple[dict[str, str], dict[str, str]]:  # long -> arity, short -> long
    """sbatch's options: long name -> ``required|optional|none``, short letter -> long."""
    from phalanx.dialects.slurm.options import OPTIONS

    longs: dict[str, str] = {o.long: str(o.arg) for o in OPTIONS}
    shorts = {o.short: o.long for o in OPTIONS if o.short}
    return longs, shorts


def split_args(argv: Sequence[str]) -> SrunArgs:
    """Split srun's options (up to the command, getopt's ``+``) into allocation and step."""
    longs, shorts = _sbatch_arity()
    out = SrunArgs()
    i = 0
    args = list(argv)

    def value_of(name: str, has: bool, value: str) -> str:
        nonlocal i
        if has:
            return value
        if i + 1 >= len(args):
            raise SrunUsage(f"option '--{name}' requires an argument")
        i += 1
        return args[i]

    def take(name: str, value: str | None, spelled: list[str]) -> None:
        if name == "jobid":
            out.jobid = value
        elif name == "pty":
            out.pty = True
        elif name == "job-name":
            out.job_name = value
        elif name == "immediate":
            if value is not None and not value.isdigit():
                raise SrunUsage(f"Invalid --immediate argument: {value}")
            out.immediate = float(value) if value else 0.0
        elif name in ("help", "usage"):
            out.help = True
        step_option = name in STEP_VALUE | STEP_FLAGS
        if name in BOTH_VALUE or (name in longs and not step_option):
            out.allocation += spelled
        if (name in BOTH_VALUE or step_option) and name not in CLIENT_ONLY:
            out.step += spelled

    while i < len(args):
        word = args[i]
        if word == "--":
            i += 1
            break
        if not word.startswith("-") or word == "-":
            break
        if word.startswith("--"):
            name, eq, raw = word[2:].partition("=")
            if name in ("help", "usage"):
                out.help = True
                i += 1
                continue
            if name in STEP_OPTIONAL:
                take(name, raw if eq else None, [word])
            elif name in STEP_FLAGS:
                if eq:
                    raise SrunUsage(f"option '--{name}' doesn't allow an argument")
                take(name, None, [word])
            elif name in STEP_VALUE or name in BOTH_VALUE:
                value = value_of(name, bool(eq), raw)
                take(name, value, [f"--{name}={value}"])
            elif name in longs:
                arity = longs[name]
                if arity == "none":
                    take(name, None, [word])
                elif arity == "optional":
                    take(name, raw if eq else None, [word])
                else:
                    value = value_of(name, bool(eq), raw)
                    take(name, value, [f"--{name}={value}"])
            else:
                raise SrunUsage(f"unrecognized option '{word}'")
            i += 1
            continue
        j = 1
        while j < len(word):
            letter, rest = word[j], word[j + 1 :]
            if letter in SHORT_STEP_FLAGS:
                take(SHORT_STEP_FLAGS[letter], None, [f"-{letter}"])
                j += 1
                continue
            if letter == "K":
                take("kill-on-bad-exit", rest or None, [f"-K{rest}"])
                break
            known = SHORT_STEP_VALUE.get(letter) or SHORT_BOTH_VALUE.get(letter)
            if known is None and letter in shorts:
                known = shorts[letter]
                if longs[known] == "none":
                    take(known, None, [f"--{known}"])
                    j += 1
                    continue
            if known is None:
                raise SrunUsage(f"invalid option -- '{letter}'")
            if not rest:
                if i + 1 >= len(args):
                    raise SrunUsage(f"option requires an argument -- '{letter}'")
                i += 1
                rest = args[i]
            take(known, rest, [f"--{known}={rest}"])
            break
        i += 1
    out.command = args[i:]
    return out


def _say(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def allocation_submission(words: list[str], *, kind: str, name: str, tool: str) -> dict[str, Any]:
    """The submission of an allocation made by ``srun`` or ``salloc`` (``kind``): sbatch's
    options, no batch script, no output file."""
    import getpass
    import socket

    from phalanx.dialects.slurm.sbatch import build_request, submission_dict

    request = build_request(
        list(words),
        script_text=ALLOCATION_SCRIPT,
        script_path=None,
        env=dict(os.environ),
        cwd=os.getcwd(),
        now=time.time(),
        user=getpass.getuser(),
        submit_host=socket.gethostname(),
    )
    if request.options.array is not None:
        from phalanx.errors import Invalid

        raise Invalid(f"{tool}: error: --array is not valid for {tool}")
    submission = submission_dict(request, env=dict(os.environ))
    if not request.options.job_name:
        submission["name"] = name
        submission["slurm"]["jobName"] = name
    run = submission["run"]
    run["output"] = "/dev/null"
    run.pop("error", None)
    run["openMode"] = "append"
    # Everything the user's shell has goes to the steps from the client, not the job.
    run["env"] = {}
    submission["slurm"]["allocation"] = kind
    return submission


IMMEDIATE_S = 0.5
"""``--immediate`` without seconds: how long the scheduler gets to place the job (it
is placed in one cycle when it fits at all)."""
QUEUED_AFTER_S = 0.3
"""A job not running this long after submission was not allocated at once: srun and
salloc say it waits (Slurm says so when the controller could not allocate it)."""


def wait_for_allocation(
    client: Any,
    job_id: int,
    tool: str,
    *,
    immediate: float | None = None,
    pending_line: bool = False,
    het: bool = False,
) -> dict[str, Any] | None:
    """Wait until the job runs, saying so as Slurm does (``pending_line``: salloc's
    ``Pending job allocation N`` first); None when it never will: it ended, or
    ``--immediate`` ran out (it is cancelled then). A heterogeneous job always waits
    for a scheduling pass in Slurm: ``het`` says it waits at once."""
    start = time.monotonic()
    queued = False
    delay = 0.02
    quiet = immediate == 0  # bare --immediate: no waiting, so no waiting lines
    while True:
        job: dict[str, Any] = client.get(job_id)
        state = job.get("state")
        if state == "RUNNING":
            if het and not queued and not quiet:
                queued = True
                if pending_line:
                    _say(f"{tool}: Pending job allocation {job_id}")
                _say(f"{tool}: job {job_id} queued and waiting for resources")
            if queued:
                _say(f"{tool}: job {job_id} has been allocated resources")
            return job
        if state not in ("PENDING", "ADMITTED"):
            _say(f"{tool}: error: Job allocation {job_id} has been revoked.")
            return None
        waited = time.monotonic() - start
        if immediate is not None and waited >= (immediate or IMMEDIATE_S):
            client.cancel(job_id)
            why = (
                "Connection timed out"
                if tool == "salloc" and immediate
                else "Requested nodes are busy"
            )
            _say(f"{tool}: error: Unable to allocate resources: {why}")
            if tool == "salloc":
                _say(f"salloc: Job allocation {job_id} has been revoked.")
            return None
        if not queued and not quiet and (het or (state == "PENDING" and waited > QUEUED_AFTER_S)):
            queued = True
            if pending_line:
                _say(f"{tool}: Pending job allocation {job_id}")
            _say(f"{tool}: job {job_id} queued and waiting for resources")
        time.sleep(delay)
        delay = min(0.25, delay * 1.5)


def split_components(argv: Sequence[str]) -> SrunArgs:
    """:func:`split_args` of each component of ``srun A : B`` (a heterogeneous job and
    step); a component without a command runs the next one's, as srun's."""
    segments: list[list[str]] = [[]]
    for word in argv:
        if word == ":":
            segments.append([])
        else:
            segments[-1].append(word)
    parts = [split_args(segment) for segment in segments]
    for index in range(len(parts) - 2, -1, -1):
        if not parts[index].command:
            parts[index].command = list(parts[index + 1].command)
    first = parts[0]
    first.components = parts[1:]
    return first


def run(argv: Sequence[str]) -> int:
    """The srun command; returns its exit status."""
    if os.environ.get("PHALANX_SLURM_CONTEXT"):
        # Inside a job's task: the job's own srun (its PATH normally finds it first).
        from phalanx.runtime.srun import main

        return main(list(argv))
    try:
        args = split_components(argv)
    except SrunUsage as exc:
        _say(f"srun: {exc}")
        _say(TRY_HELP)
        return 1
    if args.help:
        from phalanx.runtime.srun import USAGE

        sys.stdout.write(USAGE)
        return 0
    if not args.command:
        _say("srun: fatal: No command given to execute.")
        return 1
    jobid = args.jobid or os.environ.get("SLURM_JOB_ID") or os.environ.get("SLURM_JOBID")
    from phalanx.client import Client
    from phalanx.errors import PhalanxError

    try:
        with Client() as client:
            if jobid is not None:
                return _in_job(client, jobid, args)
            return _allocate_and_run(client, args)
    except PhalanxError as exc:
        for line in exc.detail.splitlines() or [exc.error]:
            _say(line if line.startswith("srun:") else f"srun: error: {line}")
        return 1
    except KeyboardInterrupt:
        return 130


def _in_job(client: Any, jobid: str, args: SrunArgs) -> int:
    """A step in a running job (``--jobid``, or the ``salloc`` shell's job)."""
    from phalanx.cli.slurm.stepclient import StepAnswer, connect_step, run_step
    from phalanx.errors import NotFound

    if not jobid.isdigit():
        _say(f'srun: error: Invalid numeric value "{jobid}" for --jobid.')
        return 1
    job_id = int(jobid)
    try:
        job = client.get(job_id)
    except NotFound:
        _say(
            f"srun: error: Unable to confirm allocation for job {job_id}: Invalid job id specified"
        )
        _say(f"srun: Check SLURM_JOB_ID environment variable. Expired or invalid job {job_id}")
        return 1
    state = job.get("state")
    if state in ("PENDING", "ADMITTED"):
        _say(
            f"srun: error: Unable to confirm allocation for job {job_id}: Job is pending execution"
        )
        _say(f"srun: Check SLURM_JOB_ID environment variable. Expired or invalid job {job_id}")
        return 1
    if state != "RUNNING":
        _say(f"srun: error: Slurm job {job_id} has expired")
        _say(f"srun: Check SLURM_JOB_ID environment variable. Expired or invalid job {job_id}")
        return 1
    try:
        channel, _ = connect_step(client, job_id)
        return run_step(channel, job_id, args.step_words(), pty=args.pty, release=False)
    except StepAnswer as exc:
        _say(f"srun: {exc.message}")
        return exc.code


def _allocate_and_run(client: Any, args: SrunArgs) -> int:
    """Make the allocation, run the step on it, end the job with the step."""
    import signal

    from phalanx.cli.slurm.stepclient import StepAnswer, connect_step, run_step

    name = args.job_name or os.path.basename(args.command[0])
    submission = allocation_submission(args.allocation_words(), kind="srun", name=name, tool="srun")
    job_id = client.submit(submission)
    cancelled: list[int] = []

    def cancel(signum: int = 0, frame: Any = None) -> None:
        if not cancelled:
            cancelled.append(signum)
            # Leaving anyway: the job's holder (this srun's connection) goes too.
            with contextlib.suppress(Exception):
                client.cancel(job_id)

    def revoke(signum: int, frame: Any) -> None:
        cancel(signum)
        raise KeyboardInterrupt

    # Interrupted while pending: the allocation is given up, as srun does.
    previous = {s: signal.signal(s, revoke) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        job = wait_for_allocation(client, job_id, "srun", immediate=args.immediate, het=args.het)
    except KeyboardInterrupt:
        _say(f"srun: Job allocation {job_id} has been revoked")
        _say(f"srun: Force Terminated JobId={job_id}")
        return 1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if job is None:
        return 1
    try:
        channel, _ = connect_step(client, job_id)
        code = run_step(
            channel, job_id, args.step_words(), pty=args.pty, release=True, on_hangup=cancel
        )
    except StepAnswer as exc:
        cancel()
        _say(f"srun: {exc.message}")
        return exc.code
    wait_ended(client, job_id)
    return code


def wait_ended(client: Any, job_id: int, timeout: float = 10.0) -> None:
    """Slurm's srun and salloc exit once their allocation is released (a synchronous
    call to the controller), so the job has ended when the shell gets its prompt back
    (``sacct`` right after says COMPLETED): wait, up to ``timeout`` seconds, for the
    server to end the job the step released."""
    from phalanx.cli.slurm.common import FINISHED
    from phalanx.errors import PhalanxError

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if str(client.get(job_id).get("state")) in FINISHED:
                return
        except PhalanxError:
            return
        time.sleep(0.02)
