"""The small pieces every layer of raftlog shares: Kafka's error codes and ConfigError
(errors), time as a seam tests move by hand (clock), what one node and one request may hold
(limits), the hot paths' plain counters (counters), the heap freezer (heap), the node's
request memory (memory_budget), calls between nodes over the mesh (mesh_calls) and the
bounded HTTP listener (http_listener)."""
