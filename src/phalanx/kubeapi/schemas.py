"""The OpenAPI v3 schema of every served kind, as :mod:`.openapi` publishes them.

Kueue's kinds are converted from phalanx's own description of them
(:data:`phalanx.dialects.kueue.validation.SCHEMAS`, v1beta1 shapes from
:func:`~phalanx.dialects.kueue.validation.schema_for`), with the list markers
(``x-kubernetes-list-type`` / ``-list-map-keys``) Kueue's CRDs declare. The
built-in and job kinds are written here at the level of detail phalanx uses:
what is not modelled field by field is an object with
``x-kubernetes-preserve-unknown-fields: true`` (any field accepted).

Schemas refer to the shared metadata types by ``$ref``
(``#/components/schemas/<name>``); :func:`component_name` gives the component
name of a kind (reversed group, as the API server names them:
``io.x-k8s.kueue.v1beta2.ClusterQueue``, ``io.k8s.api.batch.v1.Job``).
"""

from __future__ import annotations

from typing import Any

from phalanx.dialects.kueue.validation import INT32, QUANTITY, Field, schema_for
from phalanx.kubeapi.resources import KUEUE_GROUP, Resource

__all__ = [
    "LIST_META",
    "OBJECT_META",
    "STATUS",
    "component_name",
    "field_schema",
    "kind_schema",
    "meta_schemas",
]

Schema = dict[str, Any]

_META = "io.k8s.apimachinery.pkg.apis.meta.v1"
OBJECT_META = f"{_META}.ObjectMeta"
LIST_META = f"{_META}.ListMeta"
STATUS = f"{_META}.Status"
DELETE_OPTIONS = f"{_META}.DeleteOptions"
PATCH = f"{_META}.Patch"

_BUILTIN_GROUPS = {
    "": "core",
    "batch": "batch",
    "events.k8s.io": "events",
    "authentication.k8s.io": "authentication",
    "authorization.k8s.io": "authorization",
    "scheduling.k8s.io": "scheduling",
}


def component_name(group: str, version: str, kind: str) -> str:
    """The ``components.schemas`` name of a kind."""
    if group in _BUILTIN_GROUPS:
        return f"io.k8s.api.{_BUILTIN_GROUPS[group]}.{version}.{kind}"
    reversed_group = ".".join(reversed(group.split(".")))
    return f"{reversed_group}.{version}.{kind}"


def ref(name: str, description: str = "") -> Schema:
    """A property of a shared type (``allOf`` keeps a description beside the ``$ref``)."""
    out: Schema = {"allOf": [{"$ref": f"#/components/schemas/{name}"}], "default": {}}
    if description:
        out["description"] = description
    return out


# --------------------------------------------------------------------------- small builders


def _s(description: str = "", enum: tuple[str, ...] = (), fmt: str = "") -> Schema:
    out: Schema = {"type": "string"}
    if fmt:
        out["format"] = fmt
    if enum:
        out["enum"] = list(enum)
    if description:
        out["description"] = description
    return out


def _i(description: str = "", fmt: str = "int32") -> Schema:
    out: Schema = {"type": "integer", "format": fmt}
    if description:
        out["description"] = description
    return out


def _b(description: str = "") -> Schema:
    out: Schema = {"type": "boolean"}
    if description:
        out["description"] = description
    return out


def _time(description: str = "") -> Schema:
    return _s(description, fmt="date-time")


def _obj(props: dict[str, Schema], *required: str, description: str = "", **ext: Any) -> Schema:
    out: Schema = {"type": "object", "properties": props}
    if required:
        out["required"] = list(required)
    if description:
        out["description"] = description
    out.update({k.replace("_", "-"): v for k, v in ext.items()})
    return out


def _any(description: str = "") -> Schema:
    """An object phalanx does not model: any field is accepted."""
    out: Schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    if description:
        out["description"] = description
    return out


def _arr(items: Schema, description: str = "", **ext: Any) -> Schema:
    out: Schema = {"type": "array", "items": items}
    if description:
        out["description"] = description
    for key, value in ext.items():
        out[key.replace("_", "-")] = value
    return out


def _strs(description: str = "") -> Schema:
    return _arr(_s(), description, x_kubernetes_list_type="atomic")


def _smap(description: str = "") -> Schema:
    out: Schema = {"type": "object", "additionalProperties": {"type": "string", "default": ""}}
    if description:
        out["description"] = description
    return out


def _quantity(description: str = "") -> Schema:
    out: Schema = {
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "pattern": QUANTITY.pattern,
        "x-kubernetes-int-or-string": True,
    }
    if description:
        out["description"] = description
    return out


def _qmap(description: str = "") -> Schema:
    out: Schema = {"type": "object", "additionalProperties": _quantity()}
    if description:
        out["description"] = description
    return out


def _merge_list(items: Schema, key: str, description: str = "", *keys: str) -> Schema:
    """A list merged by ``key`` (strategic merge patch) and a map-list for server-side apply."""
    return _arr(
        items,
        description,
        x_kubernetes_list_type="map",
        x_kubernetes_list_map_keys=[key, *keys],
        x_kubernetes_patch_strategy="merge",
        x_kubernetes_patch_merge_key=key,
    )


def _conditions(description: str = "Conditions of the object.") -> Schema:
    condition = _obj(
        {
            "type": _s("Type of the condition."),
            "status": _s("True, False or Unknown.", ("True", "False", "Unknown")),
            "reason": _s("A machine-readable reason for the last transition."),
            "message": _s("A human-readable message about the last transition."),
            "lastTransitionTime": _time("When the condition last changed status."),
            "lastProbeTime": _time(),
            "lastHeartbeatTime": _time(),
            "observedGeneration": _i(fmt="int64"),
        },
        "type",
        "status",
    )
    return _merge_list(condition, "type", description)


# --------------------------------------------------------------------------- meta


def meta_schemas() -> dict[str, Schema]:
    """ObjectMeta, ListMeta, Status, DeleteOptions and Patch."""
    owner = _obj(
        {
            "apiVersion": _s("API version of the owner."),
            "kind": _s("Kind of the owner."),
            "name": _s("Name of the owner."),
            "uid": _s("UID of the owner."),
            "controller": _b("True if the owner is the managing controller."),
            "blockOwnerDeletion": _b(),
        },
        "apiVersion",
        "kind",
        "name",
        "uid",
        x_kubernetes_map_type="atomic",
    )
    object_meta = _obj(
        {
            "name": _s("Name of the object, unique within its namespace (or the cluster)."),
            "generateName": _s("A prefix the server completes into a unique name."),
            "namespace": _s("The namespace of a namespaced object."),
            "uid": _s("The object's unique ID, set by the server."),
            "resourceVersion": _s("The object's version, for optimistic concurrency."),
            "generation": _i("The spec's generation, set by the server.", "int64"),
            "creationTimestamp": _time("When the object was created."),
            "deletionTimestamp": _time("When the object will be deleted."),
            "deletionGracePeriodSeconds": _i(fmt="int64"),
            "labels": _smap("Labels: string keys and values, for selection."),
            "annotations": _smap("Annotations: arbitrary string metadata."),
            "ownerReferences": _merge_list(owner, "uid", "Objects this one depends on."),
            "finalizers": _arr(
                _s(),
                "Finalizers that must be removed before the object is deleted.",
                x_kubernetes_list_type="set",
                x_kubernetes_patch_strategy="merge",
            ),
            "managedFields": _arr(_any(), "Server-side apply's field ownership."),
            "selfLink": _s("Deprecated; not set."),
        },
        description="Standard object metadata.",
    )
    list_meta = _obj(
        {
            "resourceVersion": _s("The list's version, to watch from."),
            "continue": _s("A token to fetch the next page."),
            "remainingItemCount": _i(fmt="int64"),
            "selfLink": _s("Deprecated; not set."),
        },
        description="Standard list metadata.",
    )
    status = _obj(
        {
            "apiVersion": _s(),
            "kind": _s(),
            "metadata": ref(LIST_META),
            "status": _s("Success or Failure."),
            "message": _s("A human-readable description of the status."),
            "reason": _s("A machine-readable reason."),
            "details": _any("More about the reason."),
            "code": _i("The HTTP status code."),
        },
        description="The result of an operation that returns no object.",
        x_kubernetes_group_version_kind=[{"group": "", "kind": "Status", "version": "v1"}],
    )
    delete_options = _obj(
        {
            "apiVersion": _s(),
            "kind": _s(),
            "dryRun": _strs(),
            "gracePeriodSeconds": _i(fmt="int64"),
            "propagationPolicy": _s("Orphan, Background or Foreground."),
            "orphanDependents": _b(),
            "preconditions": _any(),
        },
        description="Options of a delete.",
    )
    patch: Schema = {"type": "object", "description": "The body of a PATCH request."}
    return {
        OBJECT_META: object_meta,
        LIST_META: list_meta,
        STATUS: status,
        DELETE_OPTIONS: delete_options,
        PATCH: patch,
    }


# --------------------------------------------------------------------------- pods


def _label_selector(description: str = "") -> Schema:
    return _obj(
        {
            "matchLabels": _smap(),
            "matchExpressions": _arr(
                _obj(
                    {"key": _s(), "operator": _s(), "values": _strs()},
                    "key",
                    "operator",
                ),
                x_kubernetes_list_type="atomic",
            ),
        },
        description=description,
        x_kubernetes_map_type="atomic",
    )


def _container() -> Schema:
    env = _obj(
        {"name": _s("The variable's name."), "value": _s(), "valueFrom": _any()},
        "name",
    )
    port = _obj(
        {
            "containerPort": _i("The port number."),
            "name": _s(),
            "protocol": {"type": "string", "default": "TCP"},
            "hostPort": _i(),
            "hostIP": _s(),
        },
        "containerPort",
    )
    mount = _obj(
        {
            "name": _s("The volume's name."),
            "mountPath": _s("Where it is mounted in the container."),
            "readOnly": _b(),
            "subPath": _s(),
            "subPathExpr": _s(),
            "mountPropagation": _s(),
            "recursiveReadOnly": _s(),
        },
        "name",
        "mountPath",
    )
    return _obj(
        {
            "name": _s("The container's name (a DNS label), unique in the pod."),
            "image": _s("The container image."),
            "command": _strs("The entrypoint, not run in a shell."),
            "args": _strs("Arguments to the entrypoint."),
            "workingDir": _s("The working directory."),
            "env": _merge_list(env, "name", "Environment variables."),
            "envFrom": _arr(_any(), x_kubernetes_list_type="atomic"),
            "ports": _merge_list(port, "containerPort", "Ports to expose.", "protocol"),
            "resources": _obj(
                {
                    "limits": _qmap("The most of each resource the container may use."),
                    "requests": _qmap("The resources the container needs; the scheduler "
                                      "reserves them."),
                    "claims": _arr(_any()),
                },
                description="The container's compute resources.",
            ),
            "resizePolicy": _arr(_any(), x_kubernetes_list_type="atomic"),
            "restartPolicy": _s(),
            "volumeMounts": _merge_list(mount, "mountPath", "Volumes mounted in the container."),
            "volumeDevices": _arr(_any()),
            "livenessProbe": _any(),
            "readinessProbe": _any(),
            "startupProbe": _any(),
            "lifecycle": _any(),
            "terminationMessagePath": _s(),
            "terminationMessagePolicy": _s(),
            "imagePullPolicy": _s("Always, Never or IfNotPresent."),
            "securityContext": _any(),
            "stdin": _b(),
            "stdinOnce": _b(),
            "tty": _b(),
        },
        "name",
        description="A container of the pod.",
    )  # fmt: skip


def _toleration() -> Schema:
    return _obj(
        {
            "key": _s(),
            "operator": _s(enum=("Equal", "Exists")),
            "value": _s(),
            "effect": _s(enum=("NoSchedule", "PreferNoSchedule", "NoExecute")),
            "tolerationSeconds": _i(fmt="int64"),
        }
    )


def _pod_spec() -> Schema:
    volume = _obj({"name": _s("The volume's name.")}, "name",
                  x_kubernetes_preserve_unknown_fields=True)  # fmt: skip
    return _obj(
        {
            "containers": _merge_list(_container(), "name", "The pod's containers."),
            "initContainers": _merge_list(_container(), "name", "Containers run first, in order."),
            "ephemeralContainers": _arr(_any()),
            "volumes": _merge_list(volume, "name", "Volumes the containers can mount."),
            "restartPolicy": _s("Always, OnFailure or Never.", ("Always", "OnFailure", "Never")),
            "terminationGracePeriodSeconds": _i(fmt="int64"),
            "activeDeadlineSeconds": _i(fmt="int64"),
            "dnsPolicy": _s(),
            "dnsConfig": _any(),
            "nodeSelector": _smap("Labels a node must have to run the pod."),
            "nodeName": _s("The node the pod is bound to."),
            "serviceAccountName": _s(),
            "serviceAccount": _s(),
            "automountServiceAccountToken": _b(),
            "hostNetwork": _b(),
            "hostPID": _b(),
            "hostIPC": _b(),
            "hostUsers": _b(),
            "shareProcessNamespace": _b(),
            "securityContext": _any(),
            "imagePullSecrets": _merge_list(_obj({"name": _s()}), "name"),
            "hostname": _s(),
            "subdomain": _s(),
            "setHostnameAsFQDN": _b(),
            "affinity": _any(),
            "schedulerName": _s(),
            "tolerations": _arr(_toleration(), "Taints the pod tolerates.",
                                x_kubernetes_list_type="atomic"),
            "hostAliases": _arr(_any()),
            "priorityClassName": _s(),
            "priority": _i(),
            "preemptionPolicy": _s(),
            "readinessGates": _arr(_obj({"conditionType": _s()}, "conditionType")),
            "runtimeClassName": _s(),
            "enableServiceLinks": _b(),
            "overhead": _qmap(),
            "topologySpreadConstraints": _arr(_any()),
            "os": _any(),
            "schedulingGates": _arr(_obj({"name": _s()}, "name")),
            "resourceClaims": _arr(_any()),
            "resources": _any(),
        },
        "containers",
        description="The pod's desired behaviour.",
    )  # fmt: skip


def _pod_template(description: str = "The pods to create.") -> Schema:
    return _obj(
        {"metadata": ref(OBJECT_META, "The pods' metadata."), "spec": _pod_spec()},
        description=description,
    )


# --------------------------------------------------------------------------- built-in kinds


def _job_spec() -> Schema:
    return _obj(
        {
            "parallelism": _i("The most pods running at once."),
            "completions": _i("Successful pods needed for the job to complete."),
            "completionMode": _s("NonIndexed or Indexed.", ("NonIndexed", "Indexed")),
            "activeDeadlineSeconds": _i("How long the job may be active.", "int64"),
            "backoffLimit": _i("Retries before the job is failed."),
            "backoffLimitPerIndex": _i(),
            "maxFailedIndexes": _i(),
            "podFailurePolicy": _any(),
            "successPolicy": _any(),
            "selector": _label_selector("Pods of the job (set by the server)."),
            "manualSelector": _b(),
            "template": _pod_template("The job's pods."),
            "ttlSecondsAfterFinished": _i(),
            "suspend": _b("Whether the job's pods may be created (Kueue's admission)."),
            "podReplacementPolicy": _s(),
            "managedBy": _s(),
        },
        "template",
        description="What the job runs.",
    )


def _job_status() -> Schema:
    return _obj(
        {
            "conditions": _conditions("Complete, Failed, Suspended, ..."),
            "startTime": _time(),
            "completionTime": _time(),
            "active": _i(),
            "succeeded": _i(),
            "failed": _i(),
            "terminating": _i(),
            "ready": _i(),
            "completedIndexes": _s(),
            "failedIndexes": _s(),
            "uncountedTerminatedPods": _any(),
        },
        description="The job's state.",
    )


def _node() -> tuple[Schema, Schema]:
    taint = _obj(
        {
            "key": _s(),
            "value": _s(),
            "effect": _s(enum=("NoSchedule", "PreferNoSchedule", "NoExecute")),
            "timeAdded": _time(),
        },
        "key",
        "effect",
    )
    spec = _obj(
        {
            "unschedulable": _b("Cordoned: no new pods are scheduled on the node."),
            "taints": _arr(taint, "The node's taints.", x_kubernetes_list_type="atomic"),
            "podCIDR": _s(),
            "podCIDRs": _arr(_s(), x_kubernetes_list_type="set"),
            "providerID": _s(),
            "configSource": _any(),
            "externalID": _s(),
        },
        description="The node's desired state.",
    )
    info = _obj(
        {
            k: _s()
            for k in (
                "machineID",
                "systemUUID",
                "bootID",
                "kernelVersion",
                "osImage",
                "containerRuntimeVersion",
                "kubeletVersion",
                "kubeProxyVersion",
                "operatingSystem",
                "architecture",
            )
        }
    )
    status = _obj(
        {
            "capacity": _qmap("The node's resources."),
            "allocatable": _qmap("The resources pods may use."),
            "conditions": _conditions("Ready, MemoryPressure, ..."),
            "addresses": _merge_list(_obj({"type": _s(), "address": _s()}, "type", "address"),
                                     "type", "The node's addresses."),
            "nodeInfo": info,
            "phase": _s(),
            "daemonEndpoints": _any(),
            "images": _arr(_any()),
            "volumesInUse": _strs(),
            "volumesAttached": _arr(_any()),
            "config": _any(),
            "runtimeHandlers": _arr(_any()),
            "features": _any(),
        },
        description="The node's observed state.",
    )  # fmt: skip
    return spec, status


def _pod_status() -> Schema:
    return _obj(
        {
            "phase": _s("Pending, Running, Succeeded, Failed or Unknown."),
            "conditions": _conditions(),
            "message": _s(),
            "reason": _s(),
            "nominatedNodeName": _s(),
            "hostIP": _s(),
            "hostIPs": _arr(_any()),
            "podIP": _s(),
            "podIPs": _arr(_any()),
            "startTime": _time(),
            "containerStatuses": _arr(_any()),
            "initContainerStatuses": _arr(_any()),
            "ephemeralContainerStatuses": _arr(_any()),
            "qosClass": _s(),
            "resize": _s(),
            "resourceClaimStatuses": _arr(_any()),
        },
        description="The pod's observed state.",
    )


def _object_reference() -> Schema:
    return _obj(
        {
            k: _s()
            for k in ("apiVersion", "kind", "name", "namespace", "uid", "fieldPath",
                      "resourceVersion")
        },
        x_kubernetes_map_type="atomic",
    )  # fmt: skip


def _core_event() -> dict[str, Schema]:
    return {
        "involvedObject": _object_reference(),
        "reason": _s("Why the event happened (a short CamelCase word)."),
        "message": _s("A human-readable description."),
        "source": _obj({"component": _s(), "host": _s()}),
        "firstTimestamp": _time(),
        "lastTimestamp": _time(),
        "count": _i(),
        "type": _s("Normal or Warning."),
        "eventTime": _s(fmt="date-time"),
        "series": _any(),
        "action": _s(),
        "related": _object_reference(),
        "reportingComponent": _s(),
        "reportingInstance": _s(),
    }


def _events_v1_event() -> dict[str, Schema]:
    return {
        "eventTime": _s(fmt="date-time"),
        "series": _any(),
        "reportingController": _s(),
        "reportingInstance": _s(),
        "action": _s(),
        "reason": _s(),
        "regarding": _object_reference(),
        "related": _object_reference(),
        "note": _s(),
        "type": _s(),
        "deprecatedSource": _any(),
        "deprecatedFirstTimestamp": _time(),
        "deprecatedLastTimestamp": _time(),
        "deprecatedCount": _i(),
    }


def _jobset_spec() -> Schema:
    replicated = _obj(
        {
            "name": _s("The replicated job's name."),
            "groupName": _s(),
            "replicas": _i("How many Jobs of this template."),
            "template": _obj(
                {"metadata": ref(OBJECT_META), "spec": _job_spec()},
                description="The Job template.",
            ),
            "dependsOn": _arr(_any()),
        },
        "name",
        "template",
    )
    return _obj(
        {
            "replicatedJobs": _merge_list(replicated, "name", "The JobSet's groups of Jobs."),
            "network": _obj(
                {"enableDNSHostnames": _b(), "subdomain": _s(), "publishNotReadyAddresses": _b()}
            ),
            "successPolicy": _obj({"operator": _s(), "targetReplicatedJobs": _strs()}),
            "failurePolicy": _any(),
            "startupPolicy": _any(),
            "suspend": _b(),
            "coordinator": _any(),
            "managedBy": _s(),
            "ttlSecondsAfterFinished": _i(),
        },
        description="What the JobSet runs.",
    )


def _replica_spec() -> Schema:
    return _obj(
        {
            "replicas": _i("How many pods of this role."),
            "template": _pod_template(),
            "restartPolicy": _s(),
        }
    )


def _pytorch_spec() -> Schema:
    return _obj(
        {
            "pytorchReplicaSpecs": {
                "type": "object",
                "additionalProperties": _replica_spec(),
                "description": "Master and Worker replica specs.",
            },
            "runPolicy": _any(),
            "elasticPolicy": _any(),
            "nprocPerNode": _s(),
        },
        "pytorchReplicaSpecs",
        description="What the PyTorchJob runs.",
    )


def _rayjob_spec() -> Schema:
    group = {
        "rayStartParams": _smap(),
        "template": _pod_template(),
        "serviceType": _s(),
        "enableIngress": _b(),
        "headService": _any(),
        "suspend": _b(),
        "resources": _smap(),
        "labels": _smap(),
    }
    worker = _obj(
        {
            **group,
            "groupName": _s(),
            "replicas": _i(),
            "minReplicas": _i(),
            "maxReplicas": _i(),
            "numOfHosts": _i(),
            "idleTimeoutSeconds": _i(),
            "scaleStrategy": _any(),
        },
        "groupName",
    )
    cluster = _obj(
        {
            "headGroupSpec": _obj(group, description="The Ray head."),
            "workerGroupSpecs": _arr(worker, "Groups of Ray workers."),
            "rayVersion": _s(),
            "enableInTreeAutoscaling": _b(),
            "autoscalerOptions": _any(),
            "headServiceAnnotations": _smap(),
            "suspend": _b(),
            "gcsFaultToleranceOptions": _any(),
            "managedBy": _s(),
        }
    )
    return _obj(
        {
            "entrypoint": _s("The command the job runs on the cluster."),
            "rayClusterSpec": cluster,
            "clusterSelector": _smap(),
            "shutdownAfterJobFinishes": _b(),
            "ttlSecondsAfterFinished": _i(),
            "activeDeadlineSeconds": _i(),
            "backoffLimit": _i(),
            "runtimeEnvYAML": _s(),
            "jobId": _s(),
            "suspend": _b(),
            "submissionMode": _s(),
            "submitterPodTemplate": _pod_template(),
            "submitterConfig": _any(),
            "entrypointNumCpus": {"type": "number"},
            "entrypointNumGpus": {"type": "number"},
            "entrypointResources": _s(),
            "metadata": _smap(),
            "managedBy": _s(),
            "deletionStrategy": _any(),
        },
        description="What the RayJob runs.",
    )


# --------------------------------------------------------------------------- Kueue kinds

_LIST_MARKERS: dict[str, dict[str, Any]] = {
    "spec.namespaceSelector.matchExpressions": {"x-kubernetes-list-type": "atomic"},
    "spec.resourceGroups": {"x-kubernetes-list-type": "atomic"},
    "spec.resourceGroups[].coveredResources": {"x-kubernetes-list-type": "atomic"},
    "spec.resourceGroups[].flavors": {
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["name"],
    },
    "spec.resourceGroups[].flavors[].resources": {
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["name"],
    },
    "spec.nodeTaints": {"x-kubernetes-list-type": "atomic"},
    "spec.tolerations": {"x-kubernetes-list-type": "atomic"},
    "spec.levels": {"x-kubernetes-list-type": "atomic"},
}
"""The list markers of Kueue's CRDs on the fields phalanx's schemas describe."""

_MAP_ATOMIC = ("spec.namespaceSelector", "spec.nodeLabels")

_DESCRIPTIONS: dict[str, str] = {
    "ResourceFlavor": "ResourceFlavor is a kind of node resources: the labels, taints and "
    "tolerations that place a workload's pods on nodes of that kind.",
    "ClusterQueue": "ClusterQueue is a pool of quota, per resource flavor, that admits "
    "workloads queued in its LocalQueues.",
    "LocalQueue": "LocalQueue is a namespace's queue: it sends its workloads to a ClusterQueue.",
    "Cohort": "Cohort groups ClusterQueues (and Cohorts) that lend and borrow unused quota.",
    "Topology": "Topology is the ordered levels of node labels (block, rack, host) "
    "topology-aware scheduling places pods by.",
    "WorkloadPriorityClass": "WorkloadPriorityClass is a priority value for Kueue's workloads.",
    "Workload": "Workload is the unit of admission: a job's pod sets and their resources.",
    "spec.cohortName": "The Cohort this ClusterQueue belongs to.",
    "spec.cohort": "The cohort this ClusterQueue belongs to.",
    "spec.resourceGroups": "Groups of resources and the quota of each flavor for them.",
    "spec.queueingStrategy": "StrictFIFO or BestEffortFIFO: how pending workloads are ordered.",
    "spec.namespaceSelector": "The namespaces whose LocalQueues may use this ClusterQueue.",
    "spec.preemption": "When workloads may be preempted to admit a pending one.",
    "spec.flavorFungibility": "Whether to try the next flavor before borrowing or preempting.",
    "spec.stopPolicy": "None, Hold or HoldAndDrain: stop admitting (and evict) workloads.",
    "spec.fairSharing": "The weight of this queue in fair sharing.",
    "spec.clusterQueue": "The ClusterQueue this LocalQueue sends its workloads to.",
    "spec.nodeLabels": "Labels of the nodes of this flavor.",
    "spec.nodeTaints": "Taints of the nodes of this flavor.",
    "spec.tolerations": "Tolerations added to the pods admitted in this flavor.",
    "spec.topologyName": "The Topology of the nodes of this flavor.",
    "spec.levels": "The topology's levels, from the widest to the narrowest.",
    "spec.parentName": "The parent Cohort.",
    "spec.parent": "The parent Cohort.",
    "value": "The priority value.",
    "description": "A description of the priority class.",
    "spec": "The desired state.",
    "status": "The observed state.",
}


def field_schema(field: Field, path: str = "", kind: str = "") -> Schema:
    """The OpenAPI schema of one :class:`Field` node; ``path`` (``spec.resourceGroups[]``)
    picks the CRD's list markers and descriptions."""
    out: Schema
    t = field.type
    if t == "object":
        props = {
            key: field_schema(sub, f"{path}.{key}" if path else key, kind)
            for key, sub in field.props.items()
        }
        out = {"type": "object", "properties": props}
        if field.required:
            out["required"] = list(field.required)
    elif t == "array":
        assert field.items is not None
        out = {"type": "array", "items": field_schema(field.items, f"{path}[]", kind)}
        if field.min_items is not None:
            out["minItems"] = field.min_items
        if field.max_items is not None:
            out["maxItems"] = field.max_items
    elif t == "map":
        out = {"type": "object", "additionalProperties": {"type": "string"}}
        if field.max_props is not None:
            out["maxProperties"] = field.max_props
    elif t in ("string", "duration"):
        out = {"type": "string"}
        if field.enum:
            out["enum"] = list(field.enum)
        if field.pattern is not None:
            out["pattern"] = field.pattern.pattern
        if field.max_length is not None:
            out["maxLength"] = field.max_length
    elif t == "integer":
        int32 = field.minimum is not None and field.maximum == INT32[1]
        out = {"type": "integer", "format": "int32" if int32 else "int64"}
        if field.minimum is not None and field.minimum != INT32[0]:
            out["minimum"] = field.minimum
    elif t == "number":
        out = {"type": "number"}
    elif t == "boolean":
        out = {"type": "boolean"}
    elif t == "quantity":
        out = _quantity()
    else:
        out = {"x-kubernetes-preserve-unknown-fields": True}
    if field.default is not None:
        out["default"] = field.default
    out.update(_LIST_MARKERS.get(path, {}))
    if path in _MAP_ATOMIC:
        out["x-kubernetes-map-type"] = "atomic"
    description = _DESCRIPTIONS.get(path, "")
    if field.unsupported:
        description = f"Not supported by phalanx: {field.unsupported}."
    if description:
        out["description"] = description
    return out


def _flavor_usage() -> Schema:
    usage = _obj({"name": _s(), "total": _quantity(), "borrowed": _quantity()}, "name")
    flavor = _obj({"name": _s(), "resources": _merge_list(usage, "name")}, "name")
    return _merge_list(flavor, "name")


def _queue_status(cluster: bool) -> Schema:
    props: dict[str, Schema] = {
        "conditions": _conditions("Active, ..."),
        "pendingWorkloads": _i("Workloads waiting for admission."),
        "reservingWorkloads": _i("Workloads holding quota."),
        "admittedWorkloads": _i("Admitted workloads that have not finished."),
        "flavorsReservation": _flavor_usage(),
        "flavorsUsage": _flavor_usage(),
        "fairSharing": _any(),
    }
    if cluster:
        props["pendingWorkloadsStatus"] = _any()
    return _obj(props, description="The observed state.", x_kubernetes_preserve_unknown_fields=True)


def _workload_spec(version: str) -> Schema:
    pod_set = _obj(
        {
            "name": {**_s("The pod set's name."), "default": "main"},
            "count": _i("How many pods."),
            "minCount": _i("The fewest pods to admit the workload with (partial admission)."),
            "template": _pod_template("The pods' template."),
            "topologyRequest": _any("Where in a Topology the pods must or should go."),
        },
        *(("count", "template") if version == "v1beta1" else ("template",)),
    )
    pod_sets = _merge_list(pod_set, "name", "The workload's groups of identical pods.")
    pod_sets.update(minItems=1, maxItems=18)
    props: dict[str, Schema] = {
        "podSets": pod_sets,
        "queueName": _s("The LocalQueue the workload is submitted to."),
        "priority": _i("The workload's priority (from its priority class)."),
        "active": {**_b("False deactivates the workload (it is evicted)."), "default": True},
        "maximumExecutionTimeSeconds": _i("How long the workload may run once admitted."),
    }
    if version == "v1beta1":
        props["priorityClassName"] = _s("The priority class.")
        props["priorityClassSource"] = _s()
    else:
        props["priorityClassRef"] = _obj(
            {"group": _s(), "kind": _s(), "name": _s()}, description="The priority class."
        )
        props["preemptionGates"] = _arr(_any())
    return _obj(props, description="The desired state.")


def _workload_status() -> Schema:
    return _obj(
        {
            "conditions": _conditions("QuotaReserved, Admitted, PodsReady, Evicted, Finished, ..."),
            "admission": _any("Where the workload was admitted: ClusterQueue and flavors."),
            "requeueState": _any(),
            "reclaimablePods": _arr(_any()),
            "admissionChecks": _arr(_any()),
            "resourceRequests": _arr(_any()),
        },
        description="The observed state.",
        x_kubernetes_preserve_unknown_fields=True,
    )


def _kueue_kind(kind: str, version: str) -> Schema:
    if kind == "Workload":
        props: dict[str, Schema] = {
            "spec": _workload_spec(version),
            "status": _workload_status(),
        }
        return _obj(props)
    canonical = "PriorityClass" if kind == "WorkloadPriorityClass" else kind
    converted = field_schema(schema_for(canonical, f"{KUEUE_GROUP}/{version}"), "", kind)
    props = {
        k: v
        for k, v in converted["properties"].items()
        if k not in ("apiVersion", "kind", "metadata")
    }
    if kind in ("ClusterQueue", "LocalQueue"):
        props["status"] = _queue_status(kind == "ClusterQueue")
    elif kind == "Cohort":
        props["status"] = _obj({"fairSharing": _any()}, x_kubernetes_preserve_unknown_fields=True)
    else:
        props.pop("status", None)
    if "spec" in props:
        props["spec"]["description"] = "The desired state."
    out = _obj(props)
    if "required" in converted:
        out["required"] = converted["required"]
    return out


# --------------------------------------------------------------------------- every kind


def _tenant_spec() -> Schema:
    return _obj(
        {
            "parent": _s("The parent tenant (fair-share tree)."),
            "allocation": {"type": "number", "description": "The tenant's fair share."},
            "users": _strs("Users who may submit as this tenant."),
            "labels": _smap("The namespace's labels (for namespaceSelector)."),
            "limits": _any("Slurm's association limits."),
        },
        description="The tenant's settings.",
    )


def _kind_body(r: Resource) -> Schema:
    """The schema of one kind's objects, without the common top-level fields."""
    if r.group == KUEUE_GROUP:
        return _kueue_kind(r.kind, r.version)
    key = (r.group, r.kind)
    if key == ("batch", "Job"):
        return _obj({"spec": _job_spec(), "status": _job_status()})
    if key == ("", "Pod"):
        return _obj({"spec": _pod_spec(), "status": _pod_status()})
    if key == ("", "Node"):
        spec, status = _node()
        return _obj({"spec": spec, "status": status})
    if key == ("", "Namespace"):
        return _obj(
            {
                "spec": _obj({"finalizers": _strs()}),
                "status": _obj(
                    {"phase": _s("Active or Terminating."), "conditions": _conditions()}
                ),
            }
        )
    if key == ("", "Event"):
        return _obj(_core_event(), "involvedObject")
    if key == ("events.k8s.io", "Event"):
        return _obj(_events_v1_event(), "eventTime")
    if key == ("jobset.x-k8s.io", "JobSet"):
        return _obj({"spec": _jobset_spec(), "status": _any("The JobSet's state.")})
    if key == ("kubeflow.org", "PyTorchJob"):
        return _obj({"spec": _pytorch_spec(), "status": _any("The PyTorchJob's state.")})
    if key == ("ray.io", "RayJob"):
        return _obj({"spec": _rayjob_spec(), "status": _any("The RayJob's state.")})
    if key == ("phalanx.io", "Tenant"):
        return _obj({"spec": _tenant_spec(), "status": _any()})
    if key == ("phalanx.io", "PriorityClass"):
        return _obj(
            {
                "value": _i("The priority value."),
                "description": _s("A description of the class."),
                "limits": _any("Slurm's QOS limits on the class's jobs."),
                "spec": _obj(
                    {"value": _i(), "description": _s(), "limits": _any()},
                    description="The class (this spelling or the top-level fields).",
                ),
            }
        )
    if key == ("authentication.k8s.io", "SelfSubjectReview"):
        user = _obj(
            {"username": _s(), "uid": _s(), "groups": _strs(), "extra": _any()},
        )
        return _obj({"status": _obj({"userInfo": user}, description="Who the caller is.")})
    if key == ("authorization.k8s.io", "SelfSubjectAccessReview"):
        resource = _obj(
            {
                k: _s()
                for k in ("namespace", "verb", "group", "version", "resource", "subresource",
                          "name")
            }
        )  # fmt: skip
        resource["properties"]["fieldSelector"] = _any()
        resource["properties"]["labelSelector"] = _any()
        spec = _obj(
            {"resourceAttributes": resource, "nonResourceAttributes": _obj(
                {"path": _s(), "verb": _s()})},
            description="The action to check.",
        )  # fmt: skip
        status = _obj(
            {"allowed": _b(), "denied": _b(), "reason": _s(), "evaluationError": _s()},
            "allowed",
        )
        return _obj({"spec": spec, "status": status}, "spec")
    if key == ("scheduling.k8s.io", "Workload"):
        policy = _obj(
            {
                "basic": _obj({}, description="Pods are scheduled one by one."),
                "gang": _obj(
                    {"minCount": _i("Pods that must be schedulable together.")},
                    "minCount",
                    description="All-or-nothing scheduling.",
                ),
            },
            description="Exactly one of basic and gang.",
        )
        group = _obj({"name": _s("The pod group's name."), "policy": policy}, "name", "policy")
        groups = _arr(group, "The workload's pod groups.", x_kubernetes_list_type="map",
                      x_kubernetes_list_map_keys=["name"])  # fmt: skip
        groups["maxItems"] = 8
        ref_ = _obj({"apiGroup": _s(), "kind": _s(), "name": _s()}, "kind", "name")
        spec = _obj({"controllerRef": ref_, "podGroups": groups}, "podGroups")
        return _obj({"spec": spec}, "spec")
    raise KeyError(key)


_KIND_TEXT = {
    "Job": "Job runs pods until a number of them succeed.",
    "Pod": "Pod is a group of containers run on one node (phalanx's pods are its tasks).",
    "Node": "Node is a machine jobs run on.",
    "Namespace": "Namespace is a tenant's scope for names (a phalanx Tenant).",
    "Event": "Event is a report of something that happened to an object.",
    "JobSet": "JobSet runs a group of Jobs together.",
    "PyTorchJob": "PyTorchJob runs distributed PyTorch training.",
    "RayJob": "RayJob runs an entrypoint on a Ray cluster.",
    "Tenant": "Tenant is phalanx's fair-share entity (a namespace with users and limits).",
    "PriorityClass": "PriorityClass is a WorkloadPriorityClass with Slurm's QOS limits.",
    "SelfSubjectReview": "SelfSubjectReview returns who the caller is.",
    "SelfSubjectAccessReview": "SelfSubjectAccessReview says whether the caller may do an action.",
}


def kind_schema(r: Resource) -> Schema:
    """The full schema of ``r``'s objects, with ``x-kubernetes-group-version-kind``."""
    body = _kind_body(r)
    if r.group == "scheduling.k8s.io":
        description = "Workload (Kubernetes 1.35, alpha) groups a workload's pods into gangs."
    else:
        description = _DESCRIPTIONS.get(r.kind) or _KIND_TEXT.get(r.kind, "")
    props: dict[str, Schema] = {
        "apiVersion": _s("The object's versioned schema: group/version."),
        "kind": _s("The object's kind."),
        "metadata": ref(OBJECT_META, "Standard object metadata."),
        **body["properties"],
    }
    out: Schema = {"type": "object", "description": description, "properties": props}
    if body.get("required"):
        out["required"] = body["required"]
    out["x-kubernetes-group-version-kind"] = [
        {"group": r.group, "kind": r.kind, "version": r.version}
    ]
    return out


def list_schema(r: Resource, item: str) -> Schema:
    """The schema of a ``<Kind>List`` whose items are the component ``item``."""
    return {
        "type": "object",
        "description": f"A list of {r.kind} objects.",
        "properties": {
            "apiVersion": _s("The list's versioned schema."),
            "kind": _s("The list's kind."),
            "items": _arr({"$ref": f"#/components/schemas/{item}"}, f"The {r.plural}."),
            "metadata": ref(LIST_META, "Standard list metadata."),
        },
        "required": ["items"],
        "x-kubernetes-group-version-kind": [
            {"group": r.group, "kind": f"{r.kind}List", "version": r.version}
        ],
    }
