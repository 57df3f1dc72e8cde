"""`make bench`: raftlog (one node RF1, three nodes RF3) side by side with the peer broker
Tansu, driven by the same confluent-kafka workloads. Entry point: `python -m bench.run`."""
