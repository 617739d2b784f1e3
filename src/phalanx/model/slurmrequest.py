"""What an sbatch user asked for, kept with the job: :class:`SlurmRequest`.

``JobSubmission.slurm`` is a :class:`SlurmRequest` for a job that came in as a
batch script, ``None`` for any other. The scheduling part of the request has
already been turned into pod sets; this record keeps the options as given
(``--ntasks``, ``--cpus-per-task``, ``--gpus-per-node``, ...), from which the
control plane makes the job's Slurm context (and so its ``SLURM_*`` environment)
and the API shows the job's requested sizes.

Where it lives: here, in ``model``, next to :class:`~phalanx.model.JobSubmission`
that holds it, because ``model`` imports no other phalanx package (``dialects``
imports ``model``, never the reverse). ``dialects/slurm/sbatch.py`` produces it:
it writes the wire form (camelCase keys, without the unset options) and
:func:`~phalanx.dialects.slurm.sbatch.to_submission` validates it into this
model. Everything outside the dialects reads its attributes.

The wire form is what the store and the API have always kept under ``slurm``:
``to_dict()`` (``by_alias=True, exclude_none=True``) gives back the same keys in
the same order as the dict ``sbatch`` writes; as there, ``switches`` keeps its
``waitSeconds`` key when it is ``null`` (``--switches`` without a wait time).
"""

from __future__ import annotations

from typing import Any

from pydantic import SerializationInfo, SerializerFunctionWrapHandler, model_serializer

from phalanx.model.base import PhalanxModel

__all__ = ["SlurmRequest", "SlurmSwitches"]


class SlurmSwitches(PhalanxModel):
    """``--switches=count[@max-time]``: at most ``count`` leaf switches, waiting up to
    ``wait_seconds`` for them (``None``: the option gave no wait time)."""

    count: int
    wait_seconds: int | None = None

    @model_serializer(mode="wrap")
    def _keep_wait(
        self, handler: SerializerFunctionWrapHandler, info: SerializationInfo
    ) -> dict[str, Any]:
        # ``waitSeconds: null`` is part of the stored form: exclude_none must not drop it.
        out: dict[str, Any] = handler(self)
        out.setdefault("waitSeconds" if info.by_alias else "wait_seconds", self.wait_seconds)
        return out


class SlurmRequest(PhalanxModel):
    """The sbatch options of a batch job, as the user gave them (``None``: not given).

    The fields are in the order ``sbatch`` writes them (which is the order of the
    stored JSON).
    """

    job_name: str | None = None
    """The job's name (``--job-name``, else the script's file name, ``wrap`` or ``sbatch``)."""
    submit_dir: str | None = None
    """The directory sbatch ran in (``SLURM_SUBMIT_DIR``)."""
    submit_host: str | None = None
    """The host sbatch ran on (``SLURM_SUBMIT_HOST``)."""
    nodes: int | None = None
    """``--nodes``: the minimum node count."""
    nodes_max: int | None = None
    """``--nodes=min-max``: the maximum, when it differs from the minimum."""
    ntasks: int | None = None
    ntasks_per_node: int | None = None
    cpus_per_task: int | None = None
    gpus: int | None = None
    """``--gpus``: GPUs for the whole job."""
    gpus_per_node: int | None = None
    """``--gpus-per-node``, or the count of ``--gres=gpu[:type]:N``."""
    gpus_per_task: int | None = None
    gpu_type: str | None = None
    """The GPU type of the GPU option (``h100`` in ``--gpus-per-node=h100:8``)."""
    gres: str | None = None
    """``--gres`` as ``name[:type]:count`` items joined by commas."""
    mem_per_node_mb: int | None = None
    """``--mem`` in MB; ``mem_per_cpu_mb`` may also come from the partition's DefMemPerCPU."""
    mem_per_cpu_mb: int | None = None
    mem_per_gpu_mb: int | None = None
    exclusive: str | None = None
    """``node`` for a plain ``--exclusive``, else ``user``, ``mcs`` or ``topo``."""
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    export: str | None = None
    """``--export`` as written."""
    switches: SlurmSwitches | None = None
    kill_on_invalid_dep: bool | None = None
    """``--kill-on-invalid-dep=yes|no``."""
    constraint: str | None = None
    container: list[tuple[str, str | None]] | None = None
    """pyxis' options given to sbatch (``--container-image``, ...): the batch script
    runs in the image."""
    nodelist: str | None = None
    array_step: int | None = None
    """For a job array: ``SLURM_ARRAY_TASK_STEP`` (the step of ``--array``, else 1)."""
    allocation: str | None = None
    """A job without a batch script: ``srun`` (made by srun for its step), ``salloc``
    (a salloc shell's), ``noshell`` (``salloc --no-shell``)."""
