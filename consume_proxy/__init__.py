"""The HTTP consume proxy: Kafka consumption over HTTP, fanned out beyond the partition count,
on share groups (docs/consume_proxy.md)."""
