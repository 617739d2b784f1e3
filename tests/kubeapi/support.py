"""What the Kubernetes API's tests share: the kubectl binaries installed here, a small
cluster, and an HTTPS client of a running server's Kubernetes API."""

from __future__ import annotations

import json
import os
import re
import shutil
import ssl
from pathlib import Path

import httpx

from phalanx.server import RunningServer

FLAVOR_AND_QUEUE = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: any}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: cq}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{name: any, resources: [{name: cpu, nominalQuota: 8}]}]
"""


def kubectl_on_path() -> str | None:
    return shutil.which("kubectl")


def versioned_kubectls() -> list[Path]:
    """The ``kubectl.1.NN`` binaries beside the kubectl on PATH (the Google Cloud SDK
    ships them), oldest first."""
    found = kubectl_on_path()
    if found is None:
        return []
    here = Path(os.path.realpath(found)).parent
    return sorted(
        (p for p in here.glob("kubectl.1.*") if re.fullmatch(r"kubectl\.1\.\d+", p.name)),
        key=lambda p: int(p.name.rsplit(".", 1)[1]),
    )


def ca_of(server: RunningServer) -> str:
    """The CA file a server's Kubernetes API is checked against."""
    return str(json.loads((server.state_dir / "client.json").read_text())["kube_ca"])


def kube_http(server: RunningServer, token: str | None = None) -> httpx.Client:
    """An HTTPS client of the server's Kubernetes API, with the admin's (or ``token``)."""
    return httpx.Client(
        base_url=server.kube_url,
        verify=ssl.create_default_context(cafile=ca_of(server)),
        headers={"Authorization": f"Bearer {token or server.admin_token}"},
        timeout=20,
    )
