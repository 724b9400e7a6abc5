"""SimPy serving-cluster model: requests, replicas, router, policies, metrics, replay."""
