"""The Kueue dialect: Kubernetes and Kueue manifests to and from phalanx model objects.

>>> from phalanx.dialects.kueue import load_text
>>> [m.kind for m in load_text("apiVersion: kueue.x-k8s.io/v1beta2\\n"
...                             "kind: ResourceFlavor\\nmetadata: {name: h100}\\n")]
['ResourceFlavor']
"""

from phalanx.dialects.kueue.configuration import KueueConfiguration
from phalanx.dialects.kueue.immutable import check_update
from phalanx.dialects.kueue.manifests import (
    KIND_ALIASES,
    KINDS,
    Manifest,
    ManifestObject,
    load_documents,
    load_path,
    load_stream,
    load_text,
    resolve_kind,
    to_manifest,
)

__all__ = [
    "KINDS",
    "KIND_ALIASES",
    "KueueConfiguration",
    "Manifest",
    "ManifestObject",
    "check_update",
    "load_documents",
    "load_path",
    "load_stream",
    "load_text",
    "resolve_kind",
    "to_manifest",
]
