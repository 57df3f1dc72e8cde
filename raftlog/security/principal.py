"""Kafka principals, written as Kafka writes them: "<type>:<name>"."""

from __future__ import annotations

USER = "User"
# What an unauthenticated (PLAINTEXT or one-way SSL) connection is, as in Kafka.
ANONYMOUS = "User:ANONYMOUS"


def user(name: str) -> str:
    return f"{USER}:{name}"
