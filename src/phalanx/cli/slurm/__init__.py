"""Slurm-compatible commands: ``sbatch squeue scancel sinfo sacct scontrol sprio sshare``.

One module per tool; :mod:`phalanx.cli.slurm.commands` registers them with
the click app and imports a tool's module only when that tool runs. The
formatting functions are pure (job views in, text out) so tests can check them
byte for byte against Slurm's layouts. Only the standard library is used on
the ``squeue`` path (no pydantic, fastapi or sqlalchemy).
"""
