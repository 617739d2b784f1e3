"""The virtual cluster the control-plane benchmarks run on: one flavor, one queue, N nodes."""

from __future__ import annotations

__all__ = ["cluster_yaml"]


def cluster_yaml(nodes: int, gpus: int, cpus: int) -> str:
    """A ResourceFlavor ``gpu``, a ClusterQueue ``main`` whose quota is the whole
    cluster, a LocalQueue ``team-a/default`` into it, and ``nodes`` Nodes of ``gpus``
    GPUs and ``cpus`` CPUs each, as manifests for ``phalanx up --config``."""
    queues = f"""\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {{name: gpu}}
spec:
  nodeLabels: {{phalanx.io/flavor: gpu}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: main}}
spec:
  namespaceSelector: {{}}
  resourceGroups:
  - coveredResources: [cpu, nvidia.com/gpu]
    flavors:
    - name: gpu
      resources:
      - {{name: cpu, nominalQuota: {nodes * cpus}}}
      - {{name: nvidia.com/gpu, nominalQuota: {nodes * gpus}}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {{name: default, namespace: team-a}}
spec: {{clusterQueue: main}}
"""
    return queues + "".join(
        f"---\napiVersion: v1\nkind: Node\nmetadata:\n  name: node-{i}\n"
        f"  labels: {{phalanx.io/flavor: gpu}}\nstatus:\n"
        f'  capacity: {{nvidia.com/gpu: "{gpus}", cpu: "{cpus}", memory: 1000Gi}}\n'
        for i in range(nodes)
    )
