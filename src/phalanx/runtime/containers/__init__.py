"""phalanx's container runtime: images imported once per digest into the state
directory, and jobs' tasks run in them (pyxis/enroot semantics for Slurm steps,
Kubernetes' rules for pods). See docs/containers.md."""

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
"""A container's ``PATH`` when neither its image nor its task gives one."""

# pyxis' option names, here so that srun's start-up needs no more than them.
OPTIONS = frozenset(
    {
        "--container-image",
        "--container-mounts",
        "--container-workdir",
        "--container-name",
        "--container-save",
        "--container-env",
        "--container-unshare",
    }
)
"""pyxis' options that take a value."""
FLAGS = {
    "--container-mount-home": ("mount_home", True),
    "--no-container-mount-home": ("mount_home", False),
    "--container-remap-root": ("remap_root", True),
    "--no-container-remap-root": ("remap_root", False),
    "--container-entrypoint": ("entrypoint", True),
    "--no-container-entrypoint": ("entrypoint", False),
    "--container-entrypoint-log": ("entrypoint_log", True),
    "--container-writable": ("writable", True),
    "--container-readonly": ("writable", False),
}
"""pyxis' flags: the setting each changes, and to what."""
