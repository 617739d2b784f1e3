"""``phalanx kubeconfig``: a kubeconfig for this server's Kubernetes API.

The server writes where its Kubernetes API is and the CA file clients check it
against into ``STATE/client.json`` at start; the kubeconfig carries the server's
URL, the CA's certificate (``certificate-authority-data``), a bearer token (the
admin's by default, or a user's) and a context whose namespace is the user's
tenant, so that ``KUBECONFIG=kc kubectl get clusterqueues`` works as it is.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

__all__ = ["kubeconfig"]


def kubeconfig(server: str, ca_file: Path, token: str, user: str, namespace: str) -> dict[str, Any]:
    """The kubeconfig document (``yaml.safe_dump`` it)."""
    ca = base64.b64encode(ca_file.read_bytes()).decode()
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "phalanx", "cluster": {"server": server, "certificate-authority-data": ca}}
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [
            {
                "name": "phalanx",
                "context": {"cluster": "phalanx", "user": user, "namespace": namespace},
            }
        ],
        "current-context": "phalanx",
        "preferences": {},
    }
