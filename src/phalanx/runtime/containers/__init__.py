"""phalanx's container runtime: images imported once per digest into the state
directory, and jobs' tasks run in them (pyxis/enroot semantics for Slurm steps,
Kubernetes' rules for pods). See docs/containers.md."""
