"""``salloc``: allocate, run the user's shell (or a command) with the allocation's
environment here, release the allocation when it exits.

The allocation is a job without a batch script (sbatch's resource, queue,
account, QOS, time and dependency options). While the command runs, salloc holds
the allocation through the job's step socket (:mod:`phalanx.runtime.stepd`);
``srun`` in the shell finds the job by ``SLURM_JOB_ID`` and runs its steps there.
When the command exits the allocation is released with its exit status (the
job ends COMPLETED, or FAILED with that exit code), and salloc exits with it.
If the job ends first (``scancel``, its time limit) the command gets SIGHUP.
``--no-shell`` only allocates (the job then lasts until cancelled or its time
limit); ``--immediate[=S]`` gives up when the job has not started within S
seconds (1 by default).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["ALLOCATION_VARIABLES", "run"]

ALLOCATION_VARIABLES = frozenset(
    {
        "SLURM_CONF",
        "SLURM_SUBMIT_DIR",
        "SLURM_SUBMIT_HOST",
        "SLURM_GPUS",
        "SLURM_GPUS_PER_NODE",
        "SLURM_GPUS_PER_TASK",
        "SLURM_JOB_ID",
        "SLURM_JOB_NAME",
        "SLURM_JOB_NUM_NODES",
        "SLURM_JOB_NODELIST",
        "SLURM_NODE_ALIASES",
        "SLURM_JOB_PARTITION",
        "SLURM_JOB_CPUS_PER_NODE",
        "SLURM_JOBID",
        "SLURM_NNODES",
        "SLURM_NODELIST",
        "SLURM_TASKS_PER_NODE",
        "SLURM_JOB_ACCOUNT",
        "SLURM_JOB_QOS",
        "SLURM_CLUSTER_NAME",
        "SLURM_CPUS_PER_TASK",
        "SLURM_MEM_PER_NODE",
        "SLURM_MEM_PER_GPU",
        "SLURM_NPROCS",
        "SLURM_NTASKS",
        "SLURM_NTASKS_PER_NODE",
        "SLURM_HET_SIZE",
        "SLURM_PACK_SIZE",
    }
)
"""The allocation's variables salloc gives its command (Slurm 22.05 sets these; the
batch shell's node-local ones, such as ``SLURM_NODEID`` or the GPU ids, are not
among them: the command runs here, on none of the allocation's nodes)."""
GROUP_VARIABLES = ("_HET_GROUP_", "_PACK_GROUP_")
HOLD_WAIT_S = 15.0


def _say(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def _split(argv: Sequence[str]) -> tuple[list[str], list[str], bool, float | None]:
    """salloc's options (sbatch's syntax), its command, ``--no-shell``, ``--immediate``."""
    from phalanx.cli.slurm.srun import SrunUsage
    from phalanx.dialects.slurm.options import OPTIONS

    longs = {o.long: o.arg for o in OPTIONS}
    shorts = {o.short: o.long for o in OPTIONS if o.short}
    words: list[str] = []
    no_shell = False
    immediate: float | None = None
    i = 0
    args = list(argv)
    while i < len(args):
        word = args[i]
        if word == "--":
            i += 1
            break
        if word == ":":
            # The next component of a heterogeneous allocation (sbatch's groups).
            words.append(word)
            i += 1
            continue
        if not word.startswith("-") or word == "-":
            break
        if word.startswith("--"):
            name, eq, raw = word[2:].partition("=")
            if name == "no-shell":
                no_shell = True
            elif name == "immediate":
                immediate = _seconds(raw) if eq else 0.0
            elif name in longs:
                words.append(word)
                if longs[name] == "required" and not eq:
                    if i + 1 >= len(args):
                        raise SrunUsage(f"option '--{name}' requires an argument")
                    i += 1
                    words.append(args[i])
            else:
                raise SrunUsage(f"unrecognized option '{word}'")
            i += 1
            continue
        j = 1
        while j < len(word):
            letter, rest = word[j], word[j + 1 :]
            if letter == "I":
                immediate = _seconds(rest) if rest else 0.0
                break
            long = shorts.get(letter)
            if long is None:
                raise SrunUsage(f"invalid option -- '{letter}'")
            if longs[long] == "none":
                words.append(f"--{long}")
                j += 1
                continue
            if not rest and longs[long] == "required":
                if i + 1 >= len(args):
                    raise SrunUsage(f"option requires an argument -- '{letter}'")
                i += 1
                rest = args[i]
            words.append(f"--{long}={rest}" if rest else f"--{long}")
            break
        i += 1
    return words, args[i:], no_shell, immediate


def _seconds(text: str) -> float:
    from phalanx.cli.slurm.srun import SrunUsage

    if not text.isdigit():
        raise SrunUsage(f"Invalid --immediate argument: {text}")
    return float(text)


HET_VARIABLES = (
    "SLURM_GPUS_PER_NODE",
    "SLURM_JOB_ACCOUNT",
    "SLURM_JOB_CPUS_PER_NODE",
    "SLURM_JOB_ID",
    "SLURM_JOB_NAME",
    "SLURM_JOB_NODELIST",
    "SLURM_JOB_NUM_NODES",
    "SLURM_JOB_PARTITION",
    "SLURM_JOB_QOS",
    "SLURM_TASKS_PER_NODE",
)
"""What a heterogeneous allocation's command gets per component (``_HET_GROUP_N`` and
``_PACK_GROUP_N``), Slurm 22.05's set."""
HET_SHARED = (
    "SLURM_JOB_ID",
    "SLURM_HET_SIZE",
    "SLURM_PACK_SIZE",
    "SLURM_CLUSTER_NAME",
    "SLURM_CONF",
    "SLURM_SUBMIT_DIR",
    "SLURM_SUBMIT_HOST",
)
HET_ALIASES = {
    "SLURM_JOBID": "SLURM_JOB_ID",
    "SLURM_NNODES": "SLURM_JOB_NUM_NODES",
    "SLURM_NODELIST": "SLURM_JOB_NODELIST",
}
"""Per-component names salloc adds for a heterogeneous allocation, and their sources."""


def allocation_env(environment: dict[str, str]) -> dict[str, str]:
    """The allocation's variables salloc's command gets (from the batch environment).

    A heterogeneous allocation's command gets, as Slurm 22.05's salloc gives it, only
    ``SLURM_JOB_ID``, the sizes and each component's variables (``_HET_GROUP_N``,
    ``_PACK_GROUP_N``): no component's values under the plain names."""
    size = environment.get("SLURM_HET_SIZE")
    if size is None or not size.isdigit():
        return {
            name: value
            for name, value in environment.items()
            if name in ALLOCATION_VARIABLES
            or (name.startswith("SLURM_") and any(g in name for g in GROUP_VARIABLES))
        }
    out = {name: environment[name] for name in HET_SHARED if name in environment}
    for n in range(int(size)):
        for group in GROUP_VARIABLES:
            for name in HET_VARIABLES:
                key = f"{name}{group}{n}"
                if key in environment:
                    out[key] = environment[key]
            for alias, source in HET_ALIASES.items():
                if f"{source}{group}{n}" in environment:
                    out[f"{alias}{group}{n}"] = environment[f"{source}{group}{n}"]
            out[f"SLURM_NODE_ALIASES{group}{n}"] = "(null)"
    return out


def run(argv: Sequence[str]) -> int:
    """The salloc command; returns its exit status (the command's)."""
    from phalanx.cli.slurm.srun import SrunUsage

    try:
        words, command, no_shell, immediate = _split(argv)
    except SrunUsage as exc:
        _say(f"salloc: {exc}")
        _say('Try "salloc --help" for more information')
        return 1
    if any(w in ("--help", "--usage") for w in words):
        sys.stdout.write(
            "Usage: salloc [sbatch's options] [--no-shell] [--immediate[=secs]] "
            "[command [args...]]\n"
        )
        return 0
    if not command and not no_shell:
        command = [os.environ.get("SHELL") or "/bin/sh"]
    from phalanx.client import Client
    from phalanx.errors import PhalanxError

    try:
        with Client() as client:
            return _salloc(client, words, command, no_shell, immediate)
    except PhalanxError as exc:
        for line in exc.detail.splitlines() or [exc.error]:
            line = line.replace("sbatch: error: ", "").replace("sbatch: ", "")
            _say(line if line.startswith("salloc:") else f"salloc: error: {line}")
        return 1


def _salloc(
    client: Any, words: list[str], command: list[str], no_shell: bool, immediate: float | None
) -> int:
    from phalanx.cli.slurm.srun import allocation_submission, wait_ended, wait_for_allocation
    from phalanx.cli.slurm.stepclient import StepAnswer, connect_step

    # Slurm names salloc's jobs so, whatever the command (-J names them otherwise).
    name = "no-shell" if no_shell else "interactive"
    kind = "noshell" if no_shell else "salloc"
    submission = allocation_submission(words, kind=kind, name=name, tool="salloc")
    job_id = client.submit(submission)
    het = ":" in words

    def revoke(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = {s: signal.signal(s, revoke) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        job = wait_for_allocation(
            client, job_id, "salloc", immediate=immediate, pending_line=True, het=het
        )
    except KeyboardInterrupt:
        client.cancel(job_id)
        _say(f"salloc: Job allocation {job_id} has been revoked.")
        _say("salloc: Job aborted due to signal")
        return 1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if job is None:
        return 1
    _say(f"salloc: Granted job allocation {job_id}")
    if no_shell:
        return 0
    try:
        holder, answer = connect_step(client, job_id, environment=True)
    except StepAnswer as exc:
        client.cancel(job_id)
        _say(f"salloc: {exc.message}")
        return 1
    holder.control({"op": "hold"})
    held = holder.read_control(HOLD_WAIT_S)
    if held is None or held.get("op") != "held":
        client.cancel(job_id)
        _say(f"salloc: error: Job {job_id}: the allocation could not be held")
        return 1
    env = {**os.environ, **allocation_env(answer.get("environment") or {})}
    status = _run_command(command, env, holder, job_id)
    if status is None:
        holder.control({"op": "release", "code": 1})
        code = 1
    elif status < 0:
        holder.control({"op": "release", "code": 0, "signal": -status})
        # Slurm's salloc: 0 after SIGHUP, SIGINT, SIGQUIT or SIGKILL, else 1.
        quiet = (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGKILL)
        code = 0 if -status in quiet else 1
    else:
        holder.control({"op": "release", "code": status})
        code = status
    holder.close()
    _say(f"salloc: Relinquishing job allocation {job_id}")
    wait_ended(client, job_id)
    return code


def _run_command(command: list[str], env: dict[str, str], holder: Any, job_id: int) -> int | None:
    """Run the command in the foreground; its exit status (minus the signal that ended
    it; None when it could not start). SIGHUP to it when the allocation is revoked."""
    import select

    try:
        proc = subprocess.Popen(command, env=env)
    except OSError:
        _say(f'salloc: error: _fork_command: Unable to find command "{command[0]}"')
        return None
    # As a shell running a foreground command: the terminal's Ctrl-C is the command's.
    ignored = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGQUIT)}
    revoked = False
    try:
        while proc.poll() is None:
            ready, _, _ = select.select([] if revoked else [holder.fileno()], [], [], 0.2)
            if ready and not revoked:
                frames = holder.receive()
                if frames is None:
                    revoked = True
                    _say(f"salloc: Job allocation {job_id} has been revoked.")
                    proc.send_signal(signal.SIGHUP)
        return proc.wait()
    finally:
        for sig, handler in ignored.items():
            signal.signal(sig, handler)
