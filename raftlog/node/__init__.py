"""One raftlog node and its services: the Node (node; its replicas made from the controller's
state in replicas, its transaction calls between nodes in transactions), what it can tell of
the cluster (cluster_view), its admin HTTP listener (admin) and Prometheus metrics (metrics,
listener_metrics), the loop-stall monitor, the producer ids it hands out, and the failure
streaks of its timed work."""
