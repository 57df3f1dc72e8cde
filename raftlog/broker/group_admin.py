"""Group config administration: IncrementalAlterConfigs and AlterConfigs on GROUP resources.
Changes are validated on the node that takes the request and go through the controller group,
so every node answers DescribeConfigs alike and the configs survive restarts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from raftlog.api.values import TopicResult
from raftlog.common.errors import ErrorCode
from raftlog.config import group_config
from raftlog.config.topic_config import altered
from raftlog.controller import ControllerUnavailable, group_configs_refusal

if TYPE_CHECKING:
    from raftlog.node.node import Node


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
        problem = group_config.name_error(group_id)
        if problem:
            return TopicResult(group_id, ErrorCode.invalid_request, problem)
        configs = altered(self.explicit(group_id), changes, incremental)
        problem = group_config.validate(configs, self._node.config.group_bounds())
        if problem:
            return TopicResult(group_id, ErrorCode.invalid_config, problem)
        # validate() refused every None
        stored = group_config.canonical({k: v for k, v in configs.items() if v is not None})
        state = self._node.controller.state
        problem = group_configs_refusal(state.group_configs, group_id, stored)
        if problem is None and not validate_only:
            try:
                # The controller judges the cap again where it applies the command: two
                # requests for new groups at once cannot both pass it.
                problem = await self._node.controller.call("store_group_configs", group_id, stored)
            except ControllerUnavailable as e:
                return TopicResult(group_id, ErrorCode.request_timed_out, str(e))
        if problem is not None:
            return TopicResult(group_id, ErrorCode.policy_violation, problem)
        return TopicResult(group_id)
