"""The ten group API handlers at every advertised version: what each version carries (member id
round trip, top-level vs per-partition errors, batching), and that every answer encodes with
kio and reads back unchanged."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

from kio.index import load_payload_module
from kio.serial import entity_reader
from kio.static.constants import EntityType
from support.broker_stub import BrokerStub

from kafka_api.codec import build, encode_response
from kafka_api.context import RequestContext
from kafka_api.handlers import (
    HANDLERS,
    delete_groups,
    describe_groups,
    find_coordinator,
    heartbeat,
    join_group,
    leave_group,
    list_groups,
    offset_commit,
    offset_fetch,
    share_acknowledge,
    share_group_describe,
    share_group_heartbeat,
    sync_group,
)
from raftlog.api.values import Coordinator, PartitionInfo, TopicInfo
from raftlog.common.errors import ErrorCode
from raftlog.groups.coordinator import GroupConfig, GroupCoordinator
from raftlog.groups.results import CommitOffset
from raftlog.security.acl_index import AclIndex
from raftlog.security.authorizer import Authorizer

E = ErrorCode


class Log:
    """An OffsetsLog whose appends always succeed at once."""

    index = 0
    leader_epoch = 1

    def __init__(self) -> None:
        self.records: list = []

    async def append(self, records, producer=None):
        self.records += records
        return len(self.records)

    def read_committed(self):
        return iter(())


class Broker(BrokerStub):
    node_id = 1
    cluster_id = "c"

    def __init__(self, groups: GroupCoordinator) -> None:
        self.groups = groups

    def topic(self, name):
        if name != "t":
            return None
        parts = tuple(PartitionInfo("t", i, (1,), 1, 1, (1,)) for i in range(2))
        return TopicInfo("t", uuid.uuid4(), parts)

    async def find_coordinator(self, key, key_type):
        if key_type == 1:  # a transactional id's coordinator, elsewhere here
            return Coordinator(E.none, 2, "other", 9093)
        return Coordinator(E.none, 1, "localhost", 9092)

    def coordinator_partition(self, key, key_type):
        return self.groups.partition_for(key) if key and key_type in (0, 1) else None

    async def coordinators(self, key_type, partitions):
        return {i: await self.find_coordinator("", key_type) for i in partitions}


async def broker() -> Broker:
    groups = GroupCoordinator(
        1,
        GroupConfig(num_partitions=1, initial_rebalance_delay_ms=10, min_session_timeout_ms=10),
    )
    groups.attach(0, Log())
    for _ in range(5):
        await asyncio.sleep(0)
    return Broker(groups)


async def call(b: Broker, module, version: int, **fields):
    """Runs the handler on a request built from `fields` (nested entities by class name) and
    checks that the answer survives kio's encoding."""
    m = load_payload_module(module.API_KEY, version, EntityType.request)
    request_type = next(
        getattr(m, name) for name in dir(m) if name.endswith("Request") and name[0].isupper()
    )
    ctx = RequestContext(b, version, "client", "127.0.0.1")
    response = await module.handle(ctx, build(request_type, **fields))
    frame = b"".join(encode_response(7, response))
    header = 5 if type(response).__header_schema__.__flexible__ else 4
    decoded, _ = entity_reader(type(response))(frame[4:], header)
    assert decoded == response
    return response


def req(module, version):
    return load_payload_module(module.API_KEY, version, EntityType.request)


def test_advertised_ranges():
    ranges = {key: (h.MIN_VERSION, h.MAX_VERSION) for key, h in HANDLERS.items()}
    assert ranges[10] == (0, 6) and ranges[11] == (0, 9) and ranges[12] == (0, 4)
    assert ranges[13] == (0, 5) and ranges[14] == (0, 5) and ranges[15] == (0, 6)
    assert ranges[16] == (0, 5) and ranges[42] == (0, 2)
    assert ranges[8] == (1, 9) and ranges[9] == (1, 9)  # OffsetCommit v1: sarama < 1.40


async def test_find_coordinator_every_version():
    b = await broker()
    for v in range(0, 4):
        r = await call(b, find_coordinator, v, key="g", key_type=0)
        assert (r.error_code, r.node_id, r.host, r.port) == (E.none, 1, "localhost", 9092)
    for v in range(4, 7):
        r = await call(b, find_coordinator, v, key_type=0, coordinator_keys=("a", "b"))
        assert [(c.key, c.node_id, c.error_code) for c in r.coordinators] == [
            ("a", 1, E.none),
            ("b", 1, E.none),
        ]
    r = await call(b, find_coordinator, 3, key="tx", key_type=1)
    assert (r.error_code, r.node_id, r.port) == (E.none, 2, 9093)


async def join(b: Broker, version: int, group: str, member_id: str = "", instance=None):
    m = req(join_group, version)
    return await call(
        b,
        join_group,
        version,
        group_id=group,
        session_timeout=timedelta(seconds=10),
        rebalance_timeout=timedelta(seconds=1),
        member_id=member_id,
        group_instance_id=instance,
        protocol_type="consumer",
        protocols=(build(m.JoinGroupRequestProtocol, name="range", metadata=b"meta"),),
        reason=None,
    )


async def test_join_sync_heartbeat_leave_every_version():
    b = await broker()
    for v in range(0, 10):
        group = f"g{v}"
        first = await join(b, v, group)
        if v >= 4:  # the member comes back with the id it was given
            assert first.error_code is E.member_id_required and first.member_id.startswith(
                "client-"
            )
            first = await join(b, v, group, first.member_id)
        assert first.error_code is E.none and first.generation_id == 1
        assert first.leader == first.member_id and [m.member_id for m in first.members] == [
            first.member_id
        ]
        assert first.protocol_name == "range"
        if v >= 7:
            assert first.protocol_type == "consumer"
    # A static member at v5+ never gets MEMBER_ID_REQUIRED.
    static = await join(b, 5, "static", instance="i1")
    assert static.error_code is E.none and static.members[0].group_instance_id == "i1"

    for v in range(0, 6):
        m = req(sync_group, v)
        first = await join(b, 3, f"s{v}")
        r = await call(
            b,
            sync_group,
            v,
            group_id=f"s{v}",
            generation_id=first.generation_id,
            member_id=first.member_id,
            group_instance_id=None,
            protocol_type="consumer",
            protocol_name="range",
            assignments=(
                build(m.SyncGroupRequestAssignment, member_id=first.member_id, assignment=b"x"),
            ),
        )
        assert (r.error_code, r.assignment) == (E.none, b"x")
        for hv in range(0, 5):
            h = await call(
                b, heartbeat, hv, group_id=f"s{v}", generation_id=1, member_id=first.member_id
            )
            assert h.error_code is E.none
        h = await call(
            b, heartbeat, 0, group_id=f"s{v}", generation_id=5, member_id=first.member_id
        )
        assert h.error_code is E.illegal_generation

    # Join errors encode at every version (a null protocol name becomes "" before v7).
    for v in range(0, 10):
        r = await join(b, v, "g0", member_id="unknown")
        assert r.error_code is E.unknown_member_id and r.generation_id == -1

    for v in range(0, 6):
        first = await join(b, 3, f"l{v}")
        if v < 3:
            r = await call(b, leave_group, v, group_id=f"l{v}", member_id="nobody")
            assert r.error_code is E.unknown_member_id  # the member's error, at the top level
            r = await call(b, leave_group, v, group_id=f"l{v}", member_id=first.member_id)
            assert r.error_code is E.none
        else:
            m = req(leave_group, v)
            r = await call(
                b,
                leave_group,
                v,
                group_id=f"l{v}",
                members=(
                    build(
                        m.MemberIdentity,
                        member_id=first.member_id,
                        group_instance_id=None,
                        reason=None,
                    ),
                    build(
                        m.MemberIdentity, member_id="nobody", group_instance_id=None, reason=None
                    ),
                ),
            )
            assert r.error_code is E.none
            assert [x.error_code for x in r.members] == [E.none, E.unknown_member_id]


def commit_request(module, version, group, generation, member, partitions):
    m = req(module, version)
    return dict(
        group_id=group,
        generation_id_or_member_epoch=generation,
        member_id=member,
        group_instance_id=None,
        retention_time=timedelta(milliseconds=-1),
        topics=tuple(
            build(
                m.OffsetCommitRequestTopic,
                name=topic,
                partitions=tuple(
                    build(
                        m.OffsetCommitRequestPartition,
                        partition_index=p,
                        committed_offset=offset,
                        committed_leader_epoch=4,
                        committed_metadata=None,
                    )
                    for p, offset in parts
                ),
            )
            for topic, parts in partitions
        ),
    )


async def test_offset_commit_and_fetch_every_version():
    b = await broker()
    for v in range(2, 10):
        fields = commit_request(
            offset_commit, v, f"o{v}", -1, "", [("t", [(0, 10 + v), (5, 1)]), ("nope", [(0, 1)])]
        )
        r = await call(b, offset_commit, v, **fields)
        assert [[p.error_code for p in t.partitions] for t in r.topics] == [
            [E.none, E.unknown_topic_or_partition],
            [E.unknown_topic_or_partition],
        ]
        fields = commit_request(offset_commit, v, "missing", 3, "m", [("t", [(0, 1)])])
        r = await call(b, offset_commit, v, **fields)
        missing = E.group_id_not_found if v >= 9 else E.illegal_generation
        assert r.topics[0].partitions[0].error_code is missing

    for v in range(1, 8):
        m = req(offset_fetch, v)
        topics = (build(m.OffsetFetchRequestTopic, name="t", partition_indexes=(0, 1)),)
        r = await call(b, offset_fetch, v, group_id="o9", topics=topics, require_stable=True)
        parts = [
            (p.partition_index, p.committed_offset, p.metadata) for p in r.topics[0].partitions
        ]
        assert parts == [(0, 19, ""), (1, -1, "")]
        if v >= 5:
            assert [p.committed_leader_epoch for p in r.topics[0].partitions] == [4, -1]
        if v >= 2:
            r = await call(b, offset_fetch, v, group_id="o9", topics=None, require_stable=False)
            assert [(t.name, [p.partition_index for p in t.partitions]) for t in r.topics] == [
                ("t", [0])
            ]
            r = await call(b, offset_fetch, v, group_id="", topics=topics)
            assert r.error_code is E.none  # the empty group id is allowed for offsets
    for v in range(8, 10):
        m = req(offset_fetch, v)
        groups = (
            build(
                m.OffsetFetchRequestGroup,
                group_id="o8",
                member_id=None,
                member_epoch=-1,
                topics=None,
            ),
            build(
                m.OffsetFetchRequestGroup,
                group_id="o2",
                member_id=None,
                member_epoch=-1,
                topics=(build(m.OffsetFetchRequestTopics, name="t", partition_indexes=(0,)),),
            ),
        )
        r = await call(b, offset_fetch, v, groups=groups, require_stable=False)
        assert [(g.group_id, g.topics[0].partitions[0].committed_offset) for g in r.groups] == [
            ("o8", 18),
            ("o2", 12),
        ]


async def test_offset_fetch_errors_by_version():
    b = await broker()
    b.groups.detach(0)
    m = req(offset_fetch, 1)
    topics = (build(m.OffsetFetchRequestTopic, name="t", partition_indexes=(0, 1)),)
    r = await call(b, offset_fetch, 1, group_id="g", topics=topics)
    assert [p.error_code for p in r.topics[0].partitions] == [E.not_coordinator] * 2
    m = req(offset_fetch, 3)
    topics = (build(m.OffsetFetchRequestTopic, name="t", partition_indexes=(0,)),)
    r = await call(b, offset_fetch, 3, group_id="g", topics=topics)
    assert (r.error_code, r.topics) == (E.not_coordinator, ())


async def test_admin_apis_every_version():
    b = await broker()
    first = await join(b, 3, "busy")
    await b.groups.sync_group("busy", 1, first.member_id, assignments={first.member_id: b"a"})
    await b.groups.offset_commit("idle", -1, "", None, [CommitOffset("t", 0, 1)])
    for v in range(0, 6):
        r = await call(b, list_groups, v, states_filter=(), types_filter=())
        assert sorted(g.group_id for g in r.groups) == ["busy", "idle"]
        if v >= 4:
            assert {g.group_state for g in r.groups} == {"Stable", "Empty"}
    r = await call(b, list_groups, 4, states_filter=("Stable",))
    assert [g.group_id for g in r.groups] == ["busy"]
    r = await call(b, list_groups, 5, states_filter=(), types_filter=("classic",))
    assert {g.group_type for g in r.groups} == {"classic"}

    for v in range(0, 7):
        r = await call(
            b, describe_groups, v, groups=("busy", "missing"), include_authorized_operations=True
        )
        busy, missing = r.groups
        assert (busy.group_state, busy.protocol_data, busy.members[0].member_assignment) == (
            "Stable",
            "range",
            b"a",
        )
        assert busy.members[0].client_host == "/127.0.0.1" and busy.members[0].client_id == "client"
        assert missing.group_state == "Dead"
        assert missing.error_code is (E.group_id_not_found if v >= 6 else E.none)
        if v >= 3:  # asked for: without an authorizer, every group operation (as Kafka)
            assert busy.authorized_operations == sum(1 << op for op in (3, 6, 8, 10, 11))

    for v in range(0, 3):
        r = await call(b, delete_groups, v, groups_names=("busy", "idle", "missing"))
        expected = [
            E.non_empty_group,
            E.none if v == 0 else E.group_id_not_found,
            E.group_id_not_found,
        ]
        assert [x.error_code for x in r.results] == expected


async def test_a_group_named_twice_is_refused_each_time_and_read_never():
    """DescribeGroups, ShareGroupDescribe, DeleteGroups and OffsetFetch v8+ answer every copy
    of a group named twice INVALID_REQUEST and do nothing for it: one described group (its
    members' metadata and assignments, or all its offsets) named 20,000 times would otherwise
    be 20,000 answers. The other groups are answered as ever."""
    b = await broker()
    first = await join(b, 3, "busy")
    await b.groups.sync_group("busy", 1, first.member_id, assignments={first.member_id: b"a"})
    await b.groups.offset_commit("idle", -1, "", None, [CommitOffset("t", 0, 1)])
    twice = "The request names this group more than once"
    r = await call(
        b, describe_groups, 6, groups=("busy", "idle", "busy"), include_authorized_operations=False
    )
    assert [(g.group_id, g.error_code, g.error_message, g.members) for g in r.groups] == [
        ("busy", E.invalid_request, twice, ()),
        ("idle", E.none, None, ()),
        ("busy", E.invalid_request, twice, ()),
    ]
    r = await call(
        b, share_group_describe, 1, group_ids=("s", "s"), include_authorized_operations=False
    )
    assert [(g.group_id, g.error_code, g.error_message) for g in r.groups] == [
        ("s", E.invalid_request, twice)
    ] * 2
    m = req(offset_fetch, 9)
    groups = tuple(
        build(m.OffsetFetchRequestGroup, group_id=g, member_id=None, member_epoch=-1, topics=None)
        for g in ("idle", "busy", "idle")
    )
    r = await call(b, offset_fetch, 9, groups=groups, require_stable=False)
    assert [(g.group_id, g.error_code, g.topics) for g in r.groups] == [
        ("idle", E.invalid_request, ()),
        ("busy", E.none, ()),
        ("idle", E.invalid_request, ()),
    ]
    r = await call(b, delete_groups, 2, groups_names=("idle", "missing", "idle"))
    assert [(x.group_id, x.error_code) for x in r.results] == [
        ("idle", E.invalid_request),
        ("missing", E.group_id_not_found),
        ("idle", E.invalid_request),
    ]
    assert sorted(g.group_id for g in (await b.groups.list_groups()).groups) == ["busy", "idle"]


# --------------------------------------------------------------------------- Authorization


def secure(b: Broker, *grants: tuple) -> None:
    """grants: (resource type, name, operation) allowed to ANONYMOUS; nothing else is."""
    bindings = {(kind, name, 3, "User:ANONYMOUS", "*", op, 3): None for kind, name, op in grants}
    b.authorizer = Authorizer((), False, AclIndex(lambda: bindings).synced)


TOPIC, GROUP, CLUSTER = 2, 3, 4
READ, DESCRIBE, DELETE = 3, 8, 6
GAF, TAF = E.group_authorization_failed, E.topic_authorization_failed


async def test_membership_needs_read_on_the_group_at_every_version():
    b = await broker()
    secure(b, (GROUP, "open", READ))
    for v in range(0, 10):
        r = await join(b, v, "closed")
        assert (r.error_code, r.generation_id, r.member_id, r.members) == (GAF, -1, "", ())
    assert (await join(b, 5, "open", instance="i")).error_code is E.none
    for v in range(0, 6):
        r = await call(
            b,
            sync_group,
            v,
            group_id="closed",
            generation_id=1,
            member_id="m",
            group_instance_id=None,
            protocol_type="consumer",
            protocol_name="range",
            assignments=(),
        )
        assert (r.error_code, r.assignment) == (GAF, b"")
    # v5 without the protocol fields is refused as inconsistent before authorization
    r = await call(
        b,
        sync_group,
        5,
        group_id="closed",
        generation_id=1,
        member_id="m",
        group_instance_id=None,
        protocol_type=None,
        protocol_name=None,
        assignments=(),
    )
    assert r.error_code is E.inconsistent_group_protocol
    for v in range(0, 5):
        r = await call(b, heartbeat, v, group_id="closed", generation_id=1, member_id="m")
        assert r.error_code is GAF
    for v in range(0, 6):
        m = req(leave_group, v)
        r = await call(
            b,
            leave_group,
            v,
            group_id="closed",
            member_id="m",
            members=(
                (build(m.MemberIdentity, member_id="m", group_instance_id=None),) if v >= 3 else ()
            ),
        )
        assert r.error_code is GAF and getattr(r, "members", ()) == ()
    # nothing refused reached the coordinator: only the open group exists
    assert [g.group_id for g in (await b.groups.list_groups()).groups] == ["open"]


async def test_find_coordinator_needs_describe_on_the_key():
    b = await broker()
    secure(b, (GROUP, "mine", DESCRIBE))
    r = await call(b, find_coordinator, 3, key="theirs", key_type=0)
    assert (r.error_code, r.node_id, r.error_message) == (GAF, -1, "Group authorization failed.")
    r = await call(b, find_coordinator, 3, key="tx", key_type=1)
    assert r.error_code is E.transactional_id_authorization_failed
    r = await call(b, find_coordinator, 6, key_type=0, coordinator_keys=("mine", "theirs"))
    assert [(c.key, c.error_code) for c in r.coordinators] == [("mine", E.none), ("theirs", GAF)]


async def test_offsets_need_the_group_and_each_topic():
    b = await broker()
    secure(b, (GROUP, "g", READ), (TOPIC, "t", READ))
    m = req(offset_commit, 8)

    async def commit(group: str, topic: str) -> list:
        r = await call(
            b,
            offset_commit,
            8,
            group_id=group,
            generation_id_or_member_epoch=-1,
            member_id="",
            group_instance_id=None,
            topics=(
                build(
                    m.OffsetCommitRequestTopic,
                    name=topic,
                    partitions=(
                        build(
                            m.OffsetCommitRequestPartition,
                            partition_index=0,
                            committed_offset=5,
                            committed_leader_epoch=-1,
                            committed_metadata=None,
                        ),
                    ),
                ),
            ),
        )
        return [p.error_code for t in r.topics for p in t.partitions]

    assert await commit("other", "t") == [GAF]
    assert await commit("g", "u") == [TAF]  # before "it does not exist"
    assert await commit("g", "t") == [E.none]

    async def fetch(version: int, group: str, topics) -> tuple:
        fm = req(offset_fetch, version)
        if version >= 8:
            wanted = (
                None
                if topics is None
                else tuple(
                    build(fm.OffsetFetchRequestTopics, name=n, partition_indexes=(0,))
                    for n in topics
                )
            )
            r = await call(
                b,
                offset_fetch,
                version,
                groups=(build(fm.OffsetFetchRequestGroup, group_id=group, topics=wanted),),
                require_stable=False,
            )
            (answer,) = r.groups
        else:
            wanted = (
                None
                if topics is None
                else tuple(
                    build(fm.OffsetFetchRequestTopic, name=n, partition_indexes=(0,))
                    for n in topics
                )
            )
            answer = await call(
                b, offset_fetch, version, group_id=group, topics=wanted, require_stable=False
            )
        return getattr(answer, "error_code", E.none), [
            (t.name, p.committed_offset, p.error_code) for t in answer.topics for p in t.partitions
        ]

    secure(b, (GROUP, "g", DESCRIBE), (TOPIC, "t", DESCRIBE))
    for version in (2, 7, 8):
        assert await fetch(version, "other", None) == (GAF, [])
        assert await fetch(version, "g", ["t", "u"]) == (
            E.none,
            [("t", 5, E.none), ("u", -1, TAF)],
        )
    secure(b, (GROUP, "g", DESCRIBE))  # t's offsets are left out of "every topic"
    assert await fetch(8, "g", None) == (E.none, [])
    # v1 has no group error: every requested partition carries it
    assert await fetch(1, "other", ["t"]) == (E.none, [("t", -1, GAF)])


async def test_describe_list_and_delete_groups():
    b = await broker()
    for group in ("a", "b"):
        await b.groups.offset_commit(group, -1, "", None, [CommitOffset("t", 0, 1)])
    secure(b, (GROUP, "a", DELETE))  # DELETE implies DESCRIBE
    r = await call(b, describe_groups, 5, groups=("b", "a"), include_authorized_operations=True)
    assert [(g.group_id, g.error_code, g.group_state) for g in r.groups] == [
        ("b", GAF, ""),
        ("a", E.none, "Empty"),
    ]
    assert r.groups[1].authorized_operations == (1 << DELETE) | (1 << DESCRIBE)
    r = await call(b, list_groups, 4, states_filter=())
    assert [g.group_id for g in r.groups] == ["a"]
    secure(b, (GROUP, "a", DELETE), (CLUSTER, "kafka-cluster", DESCRIBE))
    r = await call(b, list_groups, 4, states_filter=())
    assert sorted(g.group_id for g in r.groups) == ["a", "b"]
    r = await call(b, delete_groups, 2, groups_names=("b", "a"))
    assert [(x.group_id, x.error_code) for x in r.results] == [("b", GAF), ("a", E.none)]
    assert [g.group_id for g in (await b.groups.list_groups()).groups] == ["b"]


async def test_share_group_apis_need_the_group_and_its_topics():
    b = await broker()

    async def heartbeat_error() -> ErrorCode:
        r = await call(
            b,
            share_group_heartbeat,
            1,
            group_id="s",
            member_id="m",
            member_epoch=0,
            rack_id=None,
            subscribed_topic_names=("t",),
        )
        assert r.error_code is not E.none or r.member_id is not None
        return r.error_code

    assert await heartbeat_error() is E.none  # joins, without an authorizer
    secure(b)
    assert await heartbeat_error() is GAF
    secure(b, (GROUP, "s", READ))
    assert await heartbeat_error() is TAF  # it subscribes to t, which it may not describe
    r = await call(b, share_group_describe, 1, group_ids=("s",), include_authorized_operations=True)
    assert [(g.group_id, g.error_code, g.members) for g in r.groups] == [("s", TAF, ())]
    secure(b, (GROUP, "s", READ), (TOPIC, "t", DESCRIBE))
    r = await call(b, share_group_describe, 1, group_ids=("s",), include_authorized_operations=True)
    assert [(g.error_code, len(g.members)) for g in r.groups] == [(E.none, 1)]
    assert r.groups[0].authorized_operations == (1 << READ) | (1 << DESCRIBE)
    secure(b)
    r = await call(b, share_group_describe, 1, group_ids=("s",), include_authorized_operations=True)
    assert [(g.group_id, g.error_code, g.members) for g in r.groups] == [("s", GAF, ())]
    for group_id in ("s", None):
        r = await call(
            b,
            share_acknowledge,
            1,
            group_id=group_id,
            member_id="m",
            share_session_epoch=1,
            topics=(),
        )
        assert r.error_code is GAF
