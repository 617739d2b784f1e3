"""The click definitions of the Slurm-compatible commands; each imports its tool when it runs.

Slurm's flags are kept (``-h`` is ``--noheader`` for squeue and sinfo, so
help is ``--help`` only). Every command returns its exit status. The options
are spelled again in :data:`phalanx.cli.fast.OPTIONS` (kept equal by a test),
whose parser runs the same :func:`phalanx.cli.fast.call` without click.
"""

from __future__ import annotations

from typing import Any

import click

__all__ = ["register"]

_SLURM = {"help_option_names": ["--help"], "max_content_width": 100}


@click.command(context_settings=_SLURM)
@click.option("--format", "-o", "fmt", help="output format (%.18i %.9P ...)")
@click.option("--Format", "-O", "long_fmt", help="long output format (JobID,Name:20,...)")
@click.option("--user", "-u", "users", multiple=True, help="users (a,b)")
@click.option("--jobs", "-j", "jobs", multiple=True, help="job ids (12, 12_3, 12_[1-3])")
@click.option("--partition", "-p", "partitions", multiple=True, help="partitions")
@click.option("--states", "-t", "states", multiple=True, help="states (PD,R, names, all)")
@click.option("--account", "-A", "accounts", multiple=True, help="accounts (tenants)")
@click.option("--name", "-n", "names", multiple=True, help="job names")
@click.option("--noheader", "-h", is_flag=True, help="no header line")
@click.option("--long", "-l", "long", is_flag=True, help="long format")
@click.option("--start", is_flag=True, help="expected start times of pending jobs")
@click.option("--array", "-r", is_flag=True, help="one line per array element")
@click.option("--me", is_flag=True, help="only my jobs")
@click.option("--all", "-a", "all_", is_flag=True, help="every partition (the default here)")
@click.option("--iterate", "-i", type=float, help="repeat every SECONDS")
@click.option("--json", "as_json", is_flag=True, help="job views as JSON")
def squeue(**opts: Any) -> int:
    """View the job queue (Slurm's squeue)."""
    from phalanx.cli.fast import call

    return call("squeue", opts)


@click.command(context_settings=_SLURM)
@click.argument("ids", nargs=-1)
@click.option("--user", "-u", "users", multiple=True, help="users")
@click.option("--name", "-n", "names", multiple=True, help="job names")
@click.option("--state", "-t", "states", multiple=True, help="PENDING, RUNNING, SUSPENDED")
@click.option("--partition", "-p", "partitions", multiple=True, help="partitions")
@click.option("--account", "-A", "accounts", multiple=True, help="accounts")
@click.option("--signal", "-s", help="send this signal instead of cancelling")
@click.option("--batch", "-b", is_flag=True, help="signal only the batch shell")
@click.option("--full", "-f", is_flag=True, help="signal the batch shell, its children and steps")
@click.option("--me", is_flag=True, help="only my jobs")
@click.option("--quiet", "-Q", is_flag=True, help="no error for finished jobs")
@click.option("--verbose", "-v", is_flag=True, help="say what is done")
def scancel(ids: tuple[str, ...], **opts: Any) -> int:
    """Cancel or signal jobs (Slurm's scancel)."""
    from phalanx.cli.fast import call

    return call("scancel", {"ids": ids, **opts})


@click.command(context_settings=_SLURM)
@click.option("--format", "-o", "fmt", help="output format (%P %a %l %D %t %N ...)")
@click.option("--Node", "-N", "node_oriented", is_flag=True, help="one line per node")
@click.option("--partition", "-p", "partitions", multiple=True, help="partitions")
@click.option("--noheader", "-h", is_flag=True, help="no header line")
@click.option("--long", "-l", "long", is_flag=True, help="long format")
@click.option("--summarize", "-s", is_flag=True, help="node counts per partition")
@click.option("--states", "-t", "states", multiple=True, help="node states")
@click.option(
    "--list-reasons", "-R", "reasons", is_flag=True, help="why nodes are down, drained, draining"
)
def sinfo(**opts: Any) -> int:
    """View partitions and nodes (Slurm's sinfo)."""
    from phalanx.cli.fast import call

    return call("sinfo", opts)


@click.command(context_settings=_SLURM)
@click.option("--jobs", "-j", "jobs", multiple=True, help="job ids")
@click.option("--format", "-o", "fields", help="fields (JobID,JobName%30,...)")
@click.option("--brief", "-b", is_flag=True, help="JobID, State, ExitCode")
@click.option("--allocations", "-X", is_flag=True, help="jobs only, without their steps")
@click.option("--noheader", "-n", is_flag=True, help="no header lines")
@click.option("--parsable", "-p", is_flag=True, help="'|'-separated, trailing '|'")
@click.option("--parsable2", "-P", is_flag=True, help="'|'-separated")
@click.option("--starttime", "-S", help="jobs since this time")
@click.option("--endtime", "-E", help="jobs until this time")
@click.option("--state", "-s", "states", multiple=True, help="states")
@click.option("--user", "-u", "users", multiple=True, help="users")
@click.option("--allusers", "-a", is_flag=True, help="every user")
@click.option("--account", "-A", "accounts", multiple=True, help="accounts")
@click.option("--partition", "-r", "partitions", multiple=True, help="partitions")
@click.option("--name", "names", multiple=True, help="job names")
@click.option("--json", "as_json", is_flag=True, help="job views as JSON")
@click.option("--duplicates", "-D", is_flag=True, help="earlier runs of requeued jobs too")
def sacct(**opts: Any) -> int:
    """Accounting data of jobs (Slurm's sacct)."""
    from phalanx.cli.fast import call

    return call("sacct", opts)


@click.command(context_settings=_SLURM)
@click.argument("args", nargs=-1)
@click.option("--oneliner", "-o", is_flag=True, help="one line per record")
@click.option("--details", "-d", is_flag=True, help="more details")
def scontrol(args: tuple[str, ...], oneliner: bool, details: bool) -> int:
    """show job|node|partition|hostnames|hostlist, hold, release, requeue, update."""
    from phalanx.cli.fast import call

    return call("scontrol", {"args": args, "oneliner": oneliner, "details": details})


@click.command(context_settings=_SLURM)
@click.option("--jobs", "-j", "jobs", multiple=True, help="job ids")
@click.option("--user", "-u", "users", multiple=True, help="users")
@click.option("--noheader", "-h", is_flag=True, help="no header line")
@click.option("--long", "-l", "long", is_flag=True, help="USER and NICE too")
@click.option("--norm", "-n", "norm", is_flag=True, help="factors before their weights")
@click.option("--weights", "-w", "weights", is_flag=True, help="print the weights")
def sprio(**opts: Any) -> int:
    """Priorities of pending jobs and their factors (Slurm's sprio)."""
    from phalanx.cli.fast import call

    return call("sprio", opts)


@click.command(context_settings=_SLURM)
@click.option("--noheader", "-n", is_flag=True, help="no header lines")
@click.option("--parsable", "-p", is_flag=True, help="'|' after every field")
@click.option("--parsable2", "-P", is_flag=True, help="'|' between fields")
@click.option("--accounts", "-A", "accounts", multiple=True, help="accounts")
@click.option("--users", "-u", "users", multiple=True, help="users")
@click.option("--all", "-a", "all_users", is_flag=True, help="every user's rows")
@click.option("--long", "-l", "long", is_flag=True, help="NormUsage, LevelFS, ...")
def sshare(**opts: Any) -> int:
    """Fair-share tree of tenants and users with their decayed usage (Slurm's sshare)."""
    from phalanx.cli.fast import call

    return call("sshare", opts)


@click.command(
    context_settings={
        "ignore_unknown_options": True,
        "allow_extra_args": True,
        "allow_interspersed_args": False,
        "help_option_names": [],
    }
)
@click.argument("argv", nargs=-1, type=click.UNPROCESSED)
def sbatch(argv: tuple[str, ...]) -> int:
    """Submit a batch script (Slurm's sbatch; --strict/--lenient are phalanx additions)."""
    from phalanx.cli.slurm import sbatch as tool

    return tool.run(list(argv))


@click.command(context_settings=_SLURM)
@click.argument("directory")
def shims(directory: str) -> int:
    """Write sbatch, squeue, ... wrappers into DIRECTORY (put it on PATH)."""
    from phalanx.cli.slurm import shims as tool

    return tool.run(directory)


def register(group: click.Group) -> None:
    """Add the Slurm-compatible commands to the ``phalanx`` group."""
    for command in (squeue, scancel, sinfo, sacct, scontrol, sprio, sshare, sbatch, shims):
        group.add_command(command)
