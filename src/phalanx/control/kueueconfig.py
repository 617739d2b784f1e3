"""Kueue's ``Configuration`` object: stored under its own kind, it overrides parts of the
engine's configuration (the last one applied wins, and a restart reads it back).
"""

from __future__ import annotations

from typing import Any

from phalanx.engine import EngineConfig

__all__ = ["CONFIGURATION", "engine_config", "is_configuration", "stored_configuration"]

CONFIGURATION = "Configuration"
"""The stored kind of Kueue's ``Configuration`` (one object; the last applied wins)."""


def is_configuration(obj: Any) -> bool:
    from phalanx.dialects.kueue.configuration import KueueConfiguration

    return isinstance(obj, KueueConfiguration)


def engine_config(base: EngineConfig, configuration: Any) -> EngineConfig:
    import dataclasses

    overrides: dict[str, Any] = configuration.engine_overrides()
    return dataclasses.replace(base, **overrides)


def stored_configuration(manifest: dict[str, Any]) -> Any:
    from phalanx.dialects.kueue.configuration import convert_configuration

    config, problems = convert_configuration(str(manifest.get("apiVersion")), manifest)
    if config is None:  # pragma: no cover - it was valid when it was applied
        raise RuntimeError(f"the stored Kueue Configuration is no longer valid: {problems}")
    return config
