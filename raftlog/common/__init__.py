"""The small pieces every layer of raftlog shares: Kafka's error codes (errors), time as a
seam tests move by hand (clock), the hot paths' plain counters (counters), the heap freezer
(heap), the node's request memory (memory_budget), calls between nodes over the mesh
(mesh_calls) and the bounded HTTP listener (http_listener)."""
