"""The cluster cache: what the engine knows of the cluster, kept incrementally.

``cluster`` holds the configuration objects, builds the cohort tree and the node
slots and flavor indexes (Kueue's cache); ``quota`` is the quota tree and
Kueue's quota arithmetic; ``capacity`` the free capacity of each node, down to
GPU devices; ``runlimits`` the QOS and tenant limits' running usage and the jobs
they hold.
"""
