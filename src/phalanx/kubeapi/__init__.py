"""The Kubernetes API: what ``kubectl`` and Kubernetes clients talk to.

``phalanx up`` serves it over HTTPS on ``--kube-port`` (default 6443), at the
root path as a real API server does: discovery, OpenAPI v3, the Kueue kinds,
Kubernetes' job kinds, Workloads (every phalanx job has one), Nodes,
Namespaces (phalanx's tenants), read-only Pods with their logs, and Events.
Objects read and written here are the ones the REST API, the CLI, the dashboard
and the Slurm tools see: this package is a second face on the same control plane.

The layout follows the apiserver's: :mod:`.resources` (what is served),
:mod:`.app` (routing, authentication, content negotiation), :mod:`.handlers`
(the verbs: get, list, create, update, patch, delete, watch), one storage module
per kind of backing (:mod:`.objects`, :mod:`.jobs`, :mod:`.pods`, :mod:`.events`,
:mod:`.namespaces`, :mod:`.reviews`), :mod:`.watch` (the change feed, from the
store's revisions), and the pure parts (:mod:`.patch`, :mod:`.managedfields`,
:mod:`.openapi`, :mod:`.tables`, :mod:`.fieldvalidation`, :mod:`.selectors`).
"""
