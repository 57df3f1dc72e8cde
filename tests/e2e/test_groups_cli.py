"""`raftlog groups list|describe` and `raftlog offsets-topic dump`, run as programs.

A confluent-kafka member of `cli-group` owns the three partitions of `cli` (10 records
each) and has committed offset 4 on partition 0 and 10 on partition 1 (none on 2):
- `groups list` (with --bootstrap, and with --data finding the local cluster) shows the
  group as Stable;
- `groups describe` shows the member (client id, host, partitions) and per partition the
  committed offset, log end offset and lag ("-" where nothing was committed);
- `groups describe` of an unknown group fails;
- `offsets-topic dump` prints one JSON object per record; its keys and values agree with
  the test's own decoding (Kafka's schemas) of the same records, and show the commits.
"""

from __future__ import annotations

import json

import pytest
from support import groups as G
from support import offsets_decoder as D
from support import records as R

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

TOPIC = "cli"
GROUP = "cli-group"
CLIENT_ID = "cli-member"
COMMITS = {0: 4, 1: 10}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with G.running_cluster(
        tmp_path_factory.mktemp("groups_cli"), name="groups_cli", broker=G.FAST_GROUPS
    ) as c:
        yield c


@pytest.fixture(scope="module")
def member(cluster):
    cluster.create_topic(TOPIC, partitions=3, replication_factor=3)
    out = R.produce_confluent(cluster.bootstrap, TOPIC, R.make_records("cli", 30, 3), timeout=60)
    assert len(out.acked) == 30, out.failed[:3]
    members: list[G.Member] = []
    with G.members_stopped(members):
        members.append(
            G.start_member(
                "confluent-kafka",
                cluster.bootstrap,
                GROUP,
                TOPIC,
                CLIENT_ID,
                **{"partition.assignment.strategy": "range"},
            )
        )
        G.wait_assignment(members, 3, [3], timeout=60)
        members[0].commit(COMMITS)
        yield members[0]


def _run(cluster, *args: str, check: bool = True):
    proc = cluster.cli(*args, check=False, timeout=120)
    if check:
        assert proc.returncode == 0, (
            f"`raftlog {' '.join(args)}` exited {proc.returncode}\n"
            f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
        )
    return proc


def _rows(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines() if line.strip()]


@pytest.mark.parametrize("where", ["--bootstrap", "--data"])
def test_groups_list(cluster, member, where):
    target = cluster.bootstrap if where == "--bootstrap" else str(cluster.data_root)
    proc = _run(cluster, "groups", "list", where, target)
    rows = _rows(proc.stdout)
    assert rows[0][:2] == ["GROUP", "STATE"], proc.stdout
    mine = [r for r in rows[1:] if r[0] == GROUP]
    assert len(mine) == 1, proc.stdout
    assert mine[0][1] == "Stable", proc.stdout


def test_groups_describe(cluster, member):
    proc = _run(cluster, "groups", "describe", GROUP, "--bootstrap", cluster.bootstrap)
    rows = _rows(proc.stdout)
    header = rows[0]
    assert header[:2] == ["group", GROUP] and "Stable" in header, proc.stdout
    member_id = member.call(lambda c: c.memberid())
    members = [r for r in rows if r and r[0] == member_id]
    assert members and members[0][1] == CLIENT_ID, proc.stdout
    assert "127.0.0.1" in members[0][2], proc.stdout
    assert sorted(members[0][3].split(",")) == [f"{TOPIC}-{p}" for p in range(3)], proc.stdout
    offsets = {int(r[1]): r[2:] for r in rows if r[0] == TOPIC and len(r) == 6}
    assert offsets == {
        0: ["4", "10", "6", member_id],
        1: ["10", "10", "0", member_id],
        2: ["-", "10", "-", member_id],
    }, proc.stdout


def test_groups_describe_unknown_group_fails(cluster, member):
    proc = _run(
        cluster,
        "groups",
        "describe",
        "no-such-group",
        "--bootstrap",
        cluster.bootstrap,
        check=False,
    )
    assert proc.returncode != 0, proc.stdout
    assert "no-such-group" in proc.stderr, proc.stderr


def test_offsets_topic_dump(cluster, member):
    proc = _run(cluster, "offsets-topic", "dump", "--bootstrap", cluster.bootstrap)
    docs = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    assert docs, "dump printed nothing"
    for d in docs:
        assert set(d) >= {"partition", "offset", "key_type", "key", "value"}, d

    # The same records, read and decoded by the test (Kafka's schemas).
    theirs = {(d["partition"], d["offset"]): d for d in docs}
    ours = {(r.partition, r.offset): r for r in G.read_offsets_topic(cluster.bootstrap)}
    assert set(ours) <= set(theirs), f"records missing from the dump: {set(ours) - set(theirs)}"
    for pos, r in ours.items():
        d = theirs[pos]
        if isinstance(r.key, D.OffsetCommitKey):
            assert d["key_type"] == "offset_commit", d
            assert (d["key"]["group"], d["key"]["topic"], d["key"]["partition"]) == (
                r.key.group,
                r.key.topic,
                r.key.partition,
            ), d
            if r.value is None:
                assert d["value"] is None, d
            else:
                assert d["value"]["offset"] == r.value.offset, d
                assert d["value"]["leader_epoch"] == r.value.leader_epoch, d
        elif isinstance(r.key, D.GroupMetadataKey):
            assert d["key_type"] == "group_metadata", d
            assert d["key"]["group"] == r.key.group, d
            if r.value is None:
                assert d["value"] is None, d
            else:
                assert d["value"]["generation"] == r.value.generation, d
                clients = [m["client_id"] for m in d["value"]["members"]]
                assert clients == [m.client_id for m in r.value.members], d

    commits = {}
    for d in docs:
        if d["key_type"] == "offset_commit" and d["key"]["group"] == GROUP:
            commits[d["key"]["partition"]] = None if d["value"] is None else d["value"]["offset"]
    assert commits == COMMITS, commits
    described = [
        d
        for d in docs
        if d["key_type"] == "group_metadata" and d["key"]["group"] == GROUP and d["value"]
    ]
    assert described and [m["client_id"] for m in described[-1]["value"]["members"]] == [
        CLIENT_ID
    ], described[-1:]
