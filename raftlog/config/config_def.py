"""Kafka's ConfigDef for the configs raftlog stores (topics and groups): a setting's type and
bounds, and a value checked as Kafka's ConfigDef parses and validates it, with Kafka's
messages, so `kafka-configs` and AdminClient users read what Kafka would tell them.

A value is checked for its length first: every value a setting takes is short (numbers,
names, a duration), and a refused value is never echoed back in full.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

# Kafka's ConfigType (DescribeConfigs v3+).
BOOLEAN, STRING, INT, SHORT, LONG, DOUBLE, LIST, CLASS, PASSWORD = 1, 2, 3, 4, 5, 6, 7, 8, 9
_TYPE_NAMES = {
    BOOLEAN: "BOOLEAN",
    STRING: "STRING",
    INT: "INT",
    SHORT: "SHORT",
    LONG: "LONG",
    DOUBLE: "DOUBLE",
}
# Java's Short, Integer and Long: what Short.parseShort, Integer.parseInt and Long.parseLong
# read without overflowing.
_INTEGER_BITS = {SHORT: 16, INT: 32, LONG: 64}

# The longest valid value of any setting is under 100 characters (a by_duration ISO-8601
# duration); 1 KiB leaves room and bounds what one topic or group can store to ~10 KiB.
MAX_VALUE_LENGTH = 1024

_INTEGER = re.compile(r"[-+]?[0-9]+")
# Java's Double.parseDouble, less hexadecimal: digits with an optional fraction and exponent,
# NaN and Infinity, an optional f/d suffix (Python's float() also takes "inf" and "1_0").
_DOUBLE = re.compile(r"[-+]?(NaN|Infinity|([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?[fFdD]?)")


@dataclass(frozen=True)
class Setting:
    """`choices` limit a STRING's value, or each item of a LIST's; `minimum`/`maximum` bound
    numbers."""

    name: str
    type: int
    default: str
    doc: str
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None


def invalid(name: str, value: object, message: str) -> str:
    """Kafka's ConfigException(name, value, message)."""
    return f"Invalid value {value} for configuration {name}: {message}"


def length_error(setting: Setting, value: str) -> str | None:
    if len(value) <= MAX_VALUE_LENGTH:
        return None
    return (
        f"Invalid value of {len(value)} characters for configuration {setting.name}: "
        f"longer than the maximum of {MAX_VALUE_LENGTH}"
    )


def parse_number(setting: Setting, value: str) -> int | float | str:
    """An INT, LONG or DOUBLE value as Kafka parses it (blanks around it trimmed), or Kafka's
    message when it is not one: "Not a number of type INT" for 2147483648 too."""
    text = value.strip()
    kind = setting.type
    if kind in _INTEGER_BITS:
        bits = _INTEGER_BITS[kind]
        # (a valid value is short: int() of thousands of digits would raise)
        if len(text) <= MAX_VALUE_LENGTH and _INTEGER.fullmatch(text):
            number = int(text)
            if -(2 ** (bits - 1)) <= number < 2 ** (bits - 1):
                return number
    elif kind == DOUBLE and _DOUBLE.fullmatch(text):
        real = float(text.rstrip("fFdD"))
        if not math.isnan(real):  # Kafka takes NaN; nothing raftlog computes could use it
            return real
    return invalid(setting.name, value, f"Not a number of type {_TYPE_NAMES[kind]}")


def range_error(setting: Setting, number: float) -> str | None:
    """Kafka's ConfigDef.Range, which prints the parsed value."""
    shown = _java(number)
    if setting.minimum is not None and number < setting.minimum:
        return invalid(setting.name, shown, f"Value must be at least {_plain(setting.minimum)}")
    if setting.maximum is not None and number > setting.maximum:
        return invalid(setting.name, shown, f"Value must be no more than {_plain(setting.maximum)}")
    return None


def parse_boolean(setting: Setting, value: str) -> bool | str:
    """A BOOLEAN as Kafka's ConfigDef parses a string (trimmed, any letter case), or Kafka's
    message when it is not one."""
    text = value.strip().lower()
    if text in ("true", "false"):
        return text == "true"
    return invalid(setting.name, value, "Expected value to be either true or false")


def boolean_error(setting: Setting, value: str) -> str | None:
    parsed = parse_boolean(setting, value)
    return parsed if isinstance(parsed, str) else None


def choice_error(setting: Setting, value: str) -> str | None:
    """Kafka's ValidString, on the trimmed value as ConfigDef parses a STRING."""
    if value.strip() in setting.choices:
        return None
    return invalid(setting.name, value, f"String must be one of: {', '.join(setting.choices)}")


def list_error(setting: Setting, value: str) -> str | None:
    """Kafka's ValidList over `choices`. The empty list is valid: Kafka 4.1+ (KIP-1161) takes
    an empty cleanup.policy, the only LIST setting here, as neither deletion nor compaction."""
    name = setting.name
    for item in split_list(value):
        if not item:
            return f"Configuration '{name}' values must not be empty."
        if item not in setting.choices:
            return invalid(name, item, f"String must be one of: {', '.join(setting.choices)}")
    return None


def split_list(value: str) -> list[str]:
    """A LIST value's items as Kafka parses them: comma-separated, blanks around items
    trimmed, a blank value is the empty list (and "a,,b" has an empty item)."""
    return [item.strip() for item in value.split(",")] if value.strip() else []


def _java(number: float) -> str:
    """A parsed value as Java prints it (Long 5, Double 5.0 and Infinity)."""
    if isinstance(number, int):
        return str(number)
    if math.isinf(number):
        return "Infinity" if number > 0 else "-Infinity"
    return repr(number)


def _plain(number: float) -> str:
    """A bound as LogConfig writes it (atLeast(0), between(0, 1): integers)."""
    return str(int(number)) if number == int(number) else str(number)
