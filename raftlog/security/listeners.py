"""Kafka's listener settings: `listeners`, `advertised.listeners` and
`listener.security.protocol.map`, e.g.

    listeners = "PLAINTEXT://127.0.0.1:9092,SASL_SSL://0.0.0.0:9093"
    advertised.listeners = "PLAINTEXT://node1:9092,SASL_SSL://node1.example.com:9093"

A listener's name picks its security protocol through the map (by default each protocol's
own name). Metadata answers a client with every broker's address on the listener the client
came in on."""

from __future__ import annotations

from dataclasses import dataclass

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_PROTOCOL_MAP = ",".join(f"{p}:{p}" for p in PROTOCOLS)


class ListenerError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Listener:
    name: str
    protocol: str
    host: str
    port: int
    advertised_host: str
    advertised_port: int

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")


def _endpoints(value: str, what: str) -> dict[str, tuple[str, int]]:
    endpoints: dict[str, tuple[str, int]] = {}
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        name, sep, address = item.partition("://")
        host, colon, port = address.rpartition(":")
        if not sep or not name or not colon or not port.isdigit() or not 0 < int(port) < 65536:
            raise ListenerError(f"{what}: expected NAME://host:port, got {item!r}")
        name = name.upper()
        if name in endpoints:
            raise ListenerError(f"{what}: listener {name} is named twice")
        endpoints[name] = (host.strip("[]"), int(port))
    return endpoints


def _protocol_map(value: str) -> dict[str, str]:
    mapping: dict[str, str] = {}
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        name, sep, protocol = item.partition(":")
        if not sep or protocol.upper() not in PROTOCOLS:
            raise ListenerError(
                f"listener.security.protocol.map: expected NAME:PROTOCOL with a protocol of "
                f"{', '.join(PROTOCOLS)}, got {item!r}"
            )
        mapping[name.upper()] = protocol.upper()
    return mapping


def parse(listeners: str, advertised: str, protocol_map: str) -> list[Listener]:
    """The node's listeners in the order given; an unset advertised.listeners advertises each
    listener's own address, and a host left empty listens on every interface."""
    bound = _endpoints(listeners, "listeners")
    if not bound:
        raise ListenerError("listeners: no listener given")
    told = _endpoints(advertised, "advertised.listeners") if advertised else {}
    unknown = sorted(set(told) - set(bound))
    if unknown:
        raise ListenerError(f"advertised.listeners names no listener {', '.join(unknown)}")
    mapping = _protocol_map(protocol_map)
    ports: dict[tuple[str, int], str] = {}
    result = []
    for name, (host, port) in bound.items():
        if name not in mapping:
            raise ListenerError(
                f"listener {name} has no security protocol in listener.security.protocol.map"
            )
        if (host, port) in ports:
            raise ListenerError(f"listeners {ports[host, port]} and {name} share port {port}")
        ports[host, port] = name
        ad_host, ad_port = told.get(name, (host, port))
        if not ad_host or ad_host == "0.0.0.0":
            raise ListenerError(
                f"listener {name} binds {host or 'every interface'}: advertised.listeners "
                f"must name an address clients can reach"
            )
        result.append(Listener(name, mapping[name], host or "0.0.0.0", port, ad_host, ad_port))
    return result
