"""A Kubernetes API server for phalanx: what kubectl and the Python client talk to."""
