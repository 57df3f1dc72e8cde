"""Each node's index of the controller's ACL bindings: the same bindings by resource type
and name, changed with them, so a change costs what it adds or removes, not what the cluster
holds; DeleteAcls finds its matches through it and the authorizer (authorizer.py) judges by
it. The bindings and their checks are acl.py's."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from raftlog.common.errors import ErrorCode
from raftlog.security.acl import (
    MAX_PER_REQUEST,
    WILDCARD,
    AclBinding,
    AclBindingFilter,
    AclRefused,
    PatternType,
    ResourceType,
)

# The ACLs a cluster holds (Kafka sets none). Every node keeps them all in memory, with their
# index, and in the controller's snapshot: 100,000 take about 65 MB per node with names of
# typical length, about 300 MB with every string at its bound below. That is ten full
# CreateAcls, far more than per-principal, per-resource ACLs need (prefixes and wildcards
# cover the rest); at 1.1 million, nodes stalled for seconds on every change and listing.
MAX_ACLS = 100_000
# The stored ACLs one DeleteAcls's filters may look at together, when the controller applies
# it on every node: a filter naming its resource looks only at the ACLs of that name (and, for
# MATCH, of its prefixes and "*", each prefix length looked up counting as one), one without a
# name at every ACL of its resource type.
MAX_EXAMINED = MAX_ACLS

Acls = dict[tuple[Any, ...], None]  # the controller's state: plain tuples, in creation order


class _Section:
    """One resource type's bindings, by how they name resources. Each name's bindings are a
    dict (in creation order) so one leaves in O(1); prefix_lengths counts the PREFIXED names
    of each length, so a name is looked up only at the prefix lengths some binding has."""

    __slots__ = ("literal", "prefix_lengths", "prefixed")

    def __init__(self) -> None:
        self.literal: dict[str, dict[AclBinding, None]] = {}
        self.prefixed: dict[str, dict[AclBinding, None]] = {}
        self.prefix_lengths: dict[int, int] = {}

    def add(self, binding: AclBinding) -> None:
        if binding.pattern_type == PatternType.PREFIXED:
            size = len(binding.name)
            self.prefix_lengths[size] = self.prefix_lengths.get(size, 0) + 1
            self.prefixed.setdefault(binding.name, {})[binding] = None
        else:
            self.literal.setdefault(binding.name, {})[binding] = None

    def remove(self, binding: AclBinding) -> None:
        by_name = self.prefixed if binding.pattern_type == PatternType.PREFIXED else self.literal
        named = by_name[binding.name]
        del named[binding]
        if not named:
            del by_name[binding.name]
        if by_name is self.prefixed:
            size = len(binding.name)
            self.prefix_lengths[size] -= 1
            if not self.prefix_lengths[size]:
                del self.prefix_lengths[size]

    def all(self, literal: bool = True, prefixed: bool = True) -> Iterator[dict[AclBinding, None]]:
        if literal:
            yield from self.literal.values()
        if prefixed:
            yield from self.prefixed.values()

    def applying_to(self, name: str) -> Iterator[dict[AclBinding, None]]:
        """The bindings whose pattern covers `name`: its literal ones, the wildcard ones and
        those of every prefix of it."""
        found = self.literal.get(name)
        if found:
            yield found
        if name != WILDCARD:
            found = self.literal.get(WILDCARD)
            if found:
                yield found
        for size in self.prefix_lengths:
            if size <= len(name):
                found = self.prefixed.get(name[:size])
                if found:
                    yield found

    def selected_by(self, selected: AclBindingFilter) -> Iterator[dict[AclBinding, None]]:
        """The bindings the filter's resource pattern may match (a superset of them)."""
        pattern, name = selected.pattern_type, selected.name
        if name is None:
            yield from self.all(
                literal=pattern != PatternType.PREFIXED, prefixed=pattern != PatternType.LITERAL
            )
        elif pattern == PatternType.MATCH:
            yield from self.applying_to(name)
        else:
            for by_name, kind in (
                (self.literal, PatternType.LITERAL),
                (self.prefixed, PatternType.PREFIXED),
            ):
                found = by_name.get(name) if pattern in (PatternType.ANY, kind) else None
                if found:
                    yield found


class AclIndex:
    """The controller's ACL mapping (`source`: plain tuples, in creation order) and the same
    bindings by resource type and name. CreateAcls and DeleteAcls change both in place, so a
    change costs what it adds or removes. pysyncobj replaces the mapping wholesale when it
    loads a snapshot (at start, or a follower far behind): `synced` notices another mapping
    and rebuilds from it, then only. `version` moves on every change (the authorizer's sign to
    drop its cached decisions)."""

    def __init__(self, source: Callable[[], Acls]) -> None:
        self._source = source
        self._indexed: Acls | None = None  # the mapping the sections were built from
        self._sections: dict[int, _Section] = {}
        self.version = 0

    def synced(self) -> AclIndex:
        source = self._source()
        if source is not self._indexed:
            self._indexed = source
            self._sections = {}
            for entry in source:
                self._add(AclBinding(*entry))
            self.version += 1
        return self

    def bindings(self) -> list[tuple[Any, ...]]:
        """Every binding, in the order they were created: a copy (about 1 ms per 100,000), to
        be filtered off the loop."""
        return list(self._mapping())

    def section(self, resource_type: int) -> _Section | None:
        return self.synced()._sections.get(resource_type)

    def create(self, bindings: Iterable[tuple[Any, ...]]) -> None:
        """Adds the bindings not there yet (CreateAcls); one that exists already stays as it
        is, as in Kafka. Raises AclRefused, changing nothing, if the cluster would then hold
        more than MAX_ACLS."""
        acls = self._mapping()
        new = {tuple(entry): None for entry in bindings if tuple(entry) not in acls}
        if len(acls) + len(new) > MAX_ACLS:
            raise AclRefused(
                ErrorCode.policy_violation,
                f"Excessively large number of ACLs: the cluster holds {len(acls)} and may hold "
                f"at most {MAX_ACLS}; these {len(new)} new ones would exceed it",
            )
        for entry in new:
            acls[entry] = None
            self._add(AclBinding(*entry))
        if new:
            self.version += 1

    def delete(self, filters: Iterable[AclBindingFilter]) -> list[list[AclBinding]]:
        """Deletes the bindings any filter matches (DeleteAcls) and returns each filter's
        matches, all judged against the bindings before this command: a binding two filters
        match is reported by both, as in Kafka. Raises AclRefused, deleting nothing, when the
        filters match more than MAX_PER_REQUEST bindings (Kafka's INVALID_REQUEST) or would
        look at more than MAX_EXAMINED bindings and prefix lengths."""
        self.synced()
        matched: list[list[AclBinding]] = []
        gone: dict[AclBinding, None] = {}
        examined = 0
        for selected in filters:
            found = []
            for section in self._sections_for(selected.resource_type):
                if selected.name is not None and selected.pattern_type == PatternType.MATCH:
                    examined += len(section.prefix_lengths)
                for named in section.selected_by(selected):
                    examined += len(named)
                    if examined > MAX_EXAMINED:
                        raise AclRefused(
                            ErrorCode.policy_violation,
                            "Excessively broad DeleteAcls: its filters would look at more than "
                            f"{MAX_EXAMINED} ACLs; name the resources",
                        )
                    for binding in named:
                        if selected.matches(binding):
                            found.append(binding)
                            gone[binding] = None
                    if len(gone) > MAX_PER_REQUEST:
                        raise AclRefused(
                            ErrorCode.invalid_request,
                            f"Cannot remove more than {MAX_PER_REQUEST} acls in a single delete "
                            "operation.",
                        )
            matched.append(found)
        acls = self._mapping()
        for binding in gone:
            del acls[tuple(binding)]
            self._sections[binding.resource_type].remove(binding)
        if gone:
            self.version += 1
        return matched

    def _mapping(self) -> Acls:
        self.synced()
        assert self._indexed is not None
        return self._indexed

    def _sections_for(self, resource_type: int) -> list[_Section]:
        if resource_type == ResourceType.ANY:
            return list(self._sections.values())
        section = self._sections.get(resource_type)
        return [section] if section is not None else []

    def _add(self, binding: AclBinding) -> None:
        section = self._sections.get(binding.resource_type)
        if section is None:
            section = self._sections[binding.resource_type] = _Section()
        section.add(binding)
