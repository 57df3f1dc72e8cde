"""Versions Kafka 3.9 and Redpanda still serve, Kafka 4 dropped (KIP-896), and clients in
use still send: kio, generated from Kafka 4's schemas, has no model of them, so each module
here holds one version's models in kio's form (fields as in Kafka's JSON schemas at that
version, entity.py sets what kio reads of a model) and names them REQUEST and RESPONSE.
kafka_api.codec looks here before kio."""

from types import ModuleType

from kafka_api.legacy import (
    create_acls_v0,
    delete_acls_v0,
    describe_acls_v0,
    describe_configs_v0,
    list_offsets_v0,
    offset_commit_v1,
)

MODULES: dict[tuple[int, int], ModuleType] = {
    (m.API_KEY, m.VERSION): m
    for m in (
        list_offsets_v0,
        offset_commit_v1,
        describe_configs_v0,
        create_acls_v0,
        describe_acls_v0,
        delete_acls_v0,
    )
}
