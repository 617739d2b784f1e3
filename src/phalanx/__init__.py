"""phalanx: a GPU workload orchestrator that speaks Slurm and Kueue and schedules gangs."""

__version__ = "0.1.0"
