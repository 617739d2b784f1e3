"""Backfill: reservations for blocked jobs, and starting other jobs around them.

``plans`` holds the data and the planning functions (the timeline of running
jobs' ends, held nodes, quota plans); ``ends`` keeps the running jobs' ends up
to date; ``backfill`` is the owner the cycle calls (Slurm's ``sched/backfill``).
"""
