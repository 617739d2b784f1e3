"""Queueing: pending jobs in their ClusterQueues.

``queues`` keeps a heap per ClusterQueue split by job shape, with parking and
waking; ``shapes`` interns what a job asks for; ``namespaces`` matches a
ClusterQueue's ``namespaceSelector``.
"""
