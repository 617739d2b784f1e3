"""Front ends that turn users' existing inputs into phalanx model objects.

``kueue`` reads Kubernetes / Kueue manifests (``phalanx apply -f``, ``phalanx up
--config``); ``slurm`` reads sbatch scripts and options.
"""
