"""Group config administration: IncrementalAlterConfigs and AlterConfigs on GROUP resources.
Changes are validated on the node that takes the request and go through the controller group,
so every node answers DescribeConfigs alike and the configs survive restarts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from raftlog import group_config
from raftlog.broker import TopicResult
from raftlog.controller import ControllerUnavailable
from raftlog.errors import ErrorCode
from raftlog.topic_config import altered

if TYPE_CHECKING:
    from raftlog.node import Node


class GroupAdmin:
    def __init__(self, node: Node) -> None:
        self._node = node

    def explicit(self, group_id: str) -> dict[str, str]:
        """The configs set for this group (none for a group never configured)."""
        return dict(self._node.controller.state.group_configs.get(group_id, {}))

    async def alter_group_configs(
        self, group_id: str, changes: dict[str, str | None], incremental: bool, validate_only: bool
    ) -> TopicResult:
        """incremental=False: `changes` replaces every explicit config; True: only `changes`,
        a None value deleting the setting. The whole result is validated, as Kafka does."""
        if not group_id:
            # Kafka's ControllerConfigurationValidator: no cluster-wide default group.
            return TopicResult(
                group_id, ErrorCode.invalid_request, "Default group resources are not allowed."
            )
        configs = altered(self.explicit(group_id), changes, incremental)
        problem = group_config.validate(configs)
        if problem:
            return TopicResult(group_id, ErrorCode.invalid_config, problem)
        if validate_only:
            return TopicResult(group_id)
        # validate() refused every None
        stored = group_config.canonical({k: v for k, v in configs.items() if v is not None})
        try:
            await self._node.controller.call("store_group_configs", group_id, stored)
        except ControllerUnavailable as e:
            return TopicResult(group_id, ErrorCode.request_timed_out, str(e))
        return TopicResult(group_id)
