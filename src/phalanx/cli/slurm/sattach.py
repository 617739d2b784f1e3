"""``sattach JOB.STEP``: attach to a running step's output.

Connects to the step's srun (``JOBDIR/steps/S.sock``, see
:mod:`phalanx.runtime.stepd`): every running step, from a batch script or from
outside the job, has one. sattach prints what the step printed so far (its last
MiB, as slurmstepd replays it) and then what it prints, on standard output and
error as the tasks wrote them (``--label``: each line after its task's rank),
and exits as Slurm's does when the step ends: the highest exit code of its
tasks, with one ``sattach: error: task N exited with exit code C`` line per
failed task (a task a signal ended counts as 0). This terminal's input is not
sent to the step (Slurm's sattach sends it).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

__all__ = ["run"]

USAGE = "Usage: sattach [options] <jobid.stepid>\n"


def _say(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def run(argv: Sequence[str]) -> int:
    """The sattach command; returns its exit status."""
    target: str | None = None
    label = False
    for word in argv:
        if word in ("--help", "--usage", "-h"):
            sys.stdout.write(USAGE)
            return 0
        if word in ("-l", "--label"):
            label = True
        elif word in ("-Q", "--quiet", "-v", "--verbose"):
            continue
        elif word.startswith("-"):
            _say(f"sattach: unrecognized option '{word}'")
            _say('Try "sattach --help" for more information')
            return 1
        else:
            target = word
    job, dot, step = (target or "").partition(".")
    if not (job.isdigit() and dot and step.isdigit()):
        _say("sattach: error: Failed to parse stepid from command line options")
        sys.stdout.write(USAGE)
        return 1
    from phalanx.cli.slurm.stepclient import StepAnswer, attach
    from phalanx.client import Client
    from phalanx.errors import NotFound, PhalanxError
    from phalanx.runtime import stepd

    job_id, step_id = int(job), int(step)
    unknown = "sattach: error: Could not get job step info: Invalid job id specified"
    try:
        with Client() as client:
            try:
                answer = client._json("GET", f"/api/v1/jobs/{job_id}/steps")
            except NotFound:
                _say(unknown)
                return 1
    except PhalanxError as exc:
        _say(f"sattach: error: {exc.detail}")
        return 1
    state = answer.get("state")
    if state in ("PENDING", "ADMITTED"):
        _say("sattach: error: Could not get job step info: Job is pending execution")
        return 1
    if state != "RUNNING":
        _say(
            "sattach: error: Could not get job step info: Job/step already completing or completed"
        )
        return 1
    if not answer.get("owner", True):
        _say("sattach: error: Could not get job step info: Access/permission denied")
        return 1
    running = [s for s in answer.get("steps") or () if s.get("step") == step_id]
    socket = answer.get("socket")
    if not socket or not running or running[-1].get("state") != "RUNNING":
        _say(unknown)
        return 1
    path = os.path.join(os.path.dirname(str(socket)), "steps", f"{step_id}.sock")
    try:
        channel = stepd.connect(path)
    except OSError:
        _say(unknown)
        return 1
    try:
        return attach(channel, job_id, step_id, label=label)
    except StepAnswer as exc:
        _say(f"sattach: {exc.message}")
        return exc.code
