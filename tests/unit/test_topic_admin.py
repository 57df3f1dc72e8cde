"""TopicAdmin's bound on one CreateTopics: Kafka's controller creates at most 10,000
partitions per request (ReplicationControlManager.validateTotalNumberOfPartitions) and
refuses a request over it whole; Metadata's auto-creation goes through the same check."""

from types import SimpleNamespace

from raftlog.broker import BrokerInfo, TopicSpec
from raftlog.errors import ErrorCode
from raftlog.limits import MAX_RECORDS_PER_USER_OP, ReplicaBudget
from raftlog.topic_admin import TopicAdmin


class Controller:
    def __init__(self) -> None:
        self.state = SimpleNamespace(topics={})
        self.calls: list[tuple] = []

    async def call(self, method: str, *args: object) -> None:
        self.calls.append((method, *args))


class View:
    def live_brokers(self) -> list[BrokerInfo]:
        return [BrokerInfo(1, "h", 1), BrokerInfo(2, "h", 2)]

    def topic(self, name: str) -> None:
        return None


def admin(num_partitions: int = 1) -> tuple[TopicAdmin, Controller]:
    controller = Controller()
    broker = {"num.partitions": num_partitions, "offsets.topic.num.partitions": 50}
    node = SimpleNamespace(
        controller=controller,
        config=SimpleNamespace(broker_setting=broker.__getitem__),
        budget=ReplicaBudget(10**9, 0),
    )
    return TopicAdmin(node, View()), controller


async def test_a_create_topics_over_10000_partitions_is_refused_whole() -> None:
    topics, controller = admin(num_partitions=4)
    specs = [
        TopicSpec("small", 1, 1),
        TopicSpec("assigned", assignments={0: (1,), 1: (2,)}),
        TopicSpec("defaulted"),  # num.partitions: 4
        TopicSpec("__consumer_offsets"),  # offsets.topic.num.partitions: 50
        TopicSpec("big", MAX_RECORDS_PER_USER_OP - 1 - 2 - 4 - 50 + 1, 1),
    ]
    for validate_only in (True, False):
        results = await topics.create_topics(specs, validate_only, 1000)
        assert [(r.name, r.error, r.message) for r in results] == [
            (
                s.name,
                ErrorCode.policy_violation,
                "Excessively large number of partitions per request: 10001, at most 10000.",
            )
            for s in specs
        ]
    huge = await topics.create_topics([TopicSpec("huge", 2**31 - 1, 3)], False, 1000)
    assert huge[0].error == ErrorCode.policy_violation
    assert controller.calls == []
    fits = await topics.create_topics([TopicSpec("fits", MAX_RECORDS_PER_USER_OP, 1)], True, 1)
    assert fits[0].error == ErrorCode.none and controller.calls == []
