"""The `raftlog` command."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path
from types import ModuleType

import uvloop
from kafka.errors import KafkaError as ClientError

from raftlog.common.errors import ConfigError
from raftlog.config.node_config import NodeConfig, parse_address
from raftlog_app import (
    acl_cli,
    audit_cli,
    client_config,
    cluster,
    groups_cli,
    local_nodes,
    logs,
    topic_cli,
    transactions_cli,
    user_cli,
)

# The node process and the share CLI are imported where they run: together with the Kafka
# handlers and kio's schemas they took over a second of every other command's start (and the
# tests run the CLI hundreds of times).

DEFAULT_DATA = Path("data")


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "run"):
        parser.print_help()
        return 2
    try:
        client_config.use(_command_config(args))
        return args.run(args) or 0
    except (local_nodes.ClusterError, ConfigError) as e:
        print(f"raftlog: {e}", file=sys.stderr)
        return 1
    except ClientError as e:  # kafka-python's: e.g. no broker at --bootstrap answered
        print(f"raftlog: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # e.g. `raftlog offsets-topic dump | head`
        sys.stderr.close()
        return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="raftlog", description="A Raft-replicated log that speaks the Kafka protocol."
    )
    sub = parser.add_subparsers(metavar="COMMAND")

    serve = sub.add_parser(
        "serve",
        help="run one node, or a host's brokers (a config with brokers = N), in the foreground",
    )
    serve.add_argument(
        "--config",
        type=Path,
        required=True,
        help='node config file (TOML); with `brokers = N` or "auto" a host config: N broker '
        "processes, supervised (raftlog_app/host.py)",
    )
    serve.add_argument(
        "--log-file",
        type=Path,
        help="write the log to this file instead of stderr (`cluster up` gives each node its "
        "data directory's raftlog.log)",
    )
    serve.set_defaults(run=_serve)

    clu = sub.add_parser("cluster", help="a local cluster of node processes on loopback")
    clu_sub = clu.add_subparsers(metavar="ACTION", required=True)
    up = clu_sub.add_parser("up", help="start the nodes in the background")
    up.add_argument("--nodes", type=int, default=3)
    up.add_argument("--data", type=Path, default=DEFAULT_DATA)
    up.add_argument(
        "--kafka-port",
        type=int,
        default=9092,
        help="Kafka port of node 1; node i gets port+i-1 (Raft +1000, admin +2000, proxy +3000)",
    )
    up.add_argument("--timeout", type=float, default=60.0)
    up.add_argument(
        "--broker",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a [broker] setting for every node's config (repeatable)",
    )
    up.add_argument(
        "--listeners",
        help="Kafka listeners by protocol, e.g. PLAINTEXT,SASL_SSL: the first on the Kafka "
        "port, the k-th at port+3000+1000k (TLS needs --broker ssl.keystore.location=...); "
        "default PLAINTEXT, SASL_PLAINTEXT with --secure",
    )
    up.add_argument(
        "--secure",
        action="store_true",
        help="Kafka's ACL authorizer with nothing allowed without an ACL, and a super user "
        "(User:admin, SCRAM) the CLI's commands log in as; DATA/admin.properties holds its "
        "password",
    )
    up.add_argument(
        "--racks",
        metavar="RACK,...",
        help="node i's broker.rack is the i-th of these, round-robin: a partition's replicas "
        "go to distinct racks (e.g. --nodes 6 --racks a,b,c)",
    )
    up.add_argument(
        "--hosts",
        type=int,
        help="run the brokers as this many hosts on loopback, each a supervisor of "
        "--brokers-per-host broker processes (raftlog serve --config DATA/host-<h>/host.toml); "
        "host h is every one of its brokers' rack",
    )
    up.add_argument("--brokers-per-host", type=int, default=1, metavar="N")
    up.set_defaults(run=_cluster_up)
    add = clu_sub.add_parser("add-node", help="start one more node that joins the cluster")
    add.add_argument("--data", type=Path, default=DEFAULT_DATA)
    add.add_argument("--timeout", type=float, default=60.0)
    add.add_argument("--rack", help="the new node's broker.rack")
    add.set_defaults(run=_cluster_add_node)
    add_host = clu_sub.add_parser(
        "add-host",
        help="start one more host of --brokers-per-host brokers that join a cluster of hosts "
        "(cluster up --hosts); the host is their rack",
    )
    add_host.add_argument("--data", type=Path, default=DEFAULT_DATA)
    add_host.add_argument("--timeout", type=float, default=60.0)
    add_host.set_defaults(run=_cluster_add_host)
    down = clu_sub.add_parser("down", help="stop the nodes (leadership is handed over first)")
    down.add_argument("--data", type=Path, default=DEFAULT_DATA)
    down.set_defaults(run=_cluster_down)
    decom = clu_sub.add_parser(
        "decommission", help="move every replica off a node (reassignments), with progress"
    )
    decom.add_argument("node", type=int)
    decom.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for moves")
    decom.add_argument(
        "--admin-token",
        help="the nodes' admin_token, to replace a controller voter (default: "
        "RAFTLOG_ADMIN_TOKEN, else the local cluster's)",
    )
    decom.set_defaults(run=_cluster_decommission)
    rebal = clu_sub.add_parser(
        "rebalance", help="even out replicas and preferred leaders per node, with progress"
    )
    rebal.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for moves")
    rebal.set_defaults(run=_cluster_rebalance)
    st = clu_sub.add_parser("status", help="show the nodes")
    st.add_argument("--data", type=Path, default=DEFAULT_DATA)
    st.set_defaults(run=_cluster_status)

    topic = sub.add_parser("topic", help="create, list and describe topics")
    topic_sub = topic.add_subparsers(metavar="ACTION", required=True)
    create = topic_sub.add_parser("create")
    create.add_argument("name")
    create.add_argument("--partitions", type=int, default=1)
    create.add_argument("--replication-factor", type=int, default=1)
    create.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    create.set_defaults(run=lambda a: topic_cli.topic_create(_bootstrap(a), a))
    listing = topic_sub.add_parser("list")
    listing.set_defaults(run=lambda a: topic_cli.topic_list(_bootstrap(a)))
    describe = topic_sub.add_parser("describe")
    describe.add_argument("name")
    describe.set_defaults(run=lambda a: topic_cli.topic_describe(_bootstrap(a), a))

    groups = sub.add_parser("groups", help="list and describe consumer groups")
    groups_sub = groups.add_subparsers(metavar="ACTION", required=True)
    glist = groups_sub.add_parser("list")
    glist.set_defaults(run=lambda a: groups_cli.groups_list(_bootstrap(a)))
    gdesc = groups_sub.add_parser("describe")
    gdesc.add_argument("group")
    gdesc.set_defaults(run=lambda a: groups_cli.groups_describe(_bootstrap(a), a.group))
    offsets = sub.add_parser("offsets-topic", help="read __consumer_offsets")
    offsets_sub = offsets.add_subparsers(metavar="ACTION", required=True)
    dump = offsets_sub.add_parser("dump", help="decode every record to a JSON line")
    dump.set_defaults(run=lambda a: groups_cli.offsets_topic_dump(_bootstrap(a)))
    share = sub.add_parser("share", help="list and describe share groups (KIP-932)")
    share_sub = share.add_subparsers(metavar="ACTION", required=True)
    slist = share_sub.add_parser("list")
    slist.set_defaults(run=lambda a: _share_cli().share_list(_bootstrap(a)))
    sdesc = share_sub.add_parser(
        "describe", help="members, and per partition: start offset, in flight, acked, lag"
    )
    sdesc.add_argument("group")
    sdesc.add_argument(
        "--admin", help="the nodes' admin host:port list (default: each Kafka port + 2000)"
    )
    sdesc.add_argument("--json", action="store_true", help="one JSON document")
    sdesc.set_defaults(
        run=lambda a: _share_cli().share_describe(_bootstrap(a), a.group, a.admin, a.json)
    )
    acl_actions = acl_cli.add_parsers(sub)
    for p in acl_actions:
        p.set_defaults(run=lambda a: a.run_acl(_bootstrap(a), a))
    txn_actions = transactions_cli.add_parsers(sub)
    for p in txn_actions:
        p.set_defaults(run=lambda a: a.run_transactions(_bootstrap(a), a))
    clients = (
        create,
        listing,
        describe,
        decom,
        rebal,
        glist,
        gdesc,
        dump,
        *acl_actions,
        *txn_actions,
    )
    for p in (describe, decom, rebal):
        p.add_argument(
            "--admin",
            metavar="HOST:PORT,...",
            help="the nodes' admin listeners, for the bytes the moves still have to copy "
            "(default: each broker's Kafka port + 2000)",
        )
    for p in (*clients, slist, sdesc):
        p.add_argument("--bootstrap", help="Kafka bootstrap servers (default: the local cluster's)")
        p.add_argument("--data", type=Path, default=DEFAULT_DATA)
    for p in clients:
        p.add_argument(
            "--command-config",
            type=Path,
            help="client properties for a secured listener (security.protocol, sasl.*, ssl.*)",
        )

    audit_cli.add_parser(sub, DEFAULT_DATA)
    user_cli.add_parser(sub, DEFAULT_DATA)

    certs = sub.add_parser(
        "dev-certs", help="a CA and certificates for trying TLS on this machine (not production)"
    )
    certs.add_argument("directory", type=Path)
    certs.set_defaults(run=_dev_certs)

    proxy = sub.add_parser(
        "proxy", help="run the HTTP consume proxy alone, as a client of a cluster"
    )
    proxy.add_argument("--bootstrap", required=True, help="host:port[,host:port...]")
    proxy.add_argument("--listen", default="127.0.0.1:8080", help="host:port to serve HTTP on")
    proxy.set_defaults(run=_proxy)

    epochs = sub.add_parser("epochs", help="print a partition's leader epoch cache")
    epochs.add_argument("topic")
    epochs.add_argument("partition", type=int)
    epochs.add_argument(
        "--data",
        type=Path,
        default=DEFAULT_DATA,
        help="the local cluster's directory (every node is asked)",
    )
    epochs.add_argument(
        "--admin",
        action="append",
        default=[],
        metavar="HOST:PORT",
        help="ask this node's admin listener instead (repeatable)",
    )
    epochs.set_defaults(run=_epochs)
    return parser


def _process() -> ModuleType:
    from raftlog_app import process

    return process


def _share_cli() -> ModuleType:
    from raftlog_app import share_cli

    return share_cli


def _dev_certs(args: argparse.Namespace) -> int:
    from raftlog_app.dev_certs import make_dev_certs

    for what, path in make_dev_certs(args.directory).items():
        print(f"{what:<12} {path.resolve()}")
    return 0


def _serve(args: argparse.Namespace) -> int:
    from raftlog_app import host

    if host.is_host_config(args.config):
        return host.serve(args.config, args.log_file)
    config = NodeConfig.load(args.config)
    try:
        config.data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"data_dir {config.data_dir}: {e.strerror or e}") from None
    try:
        handler = logging.FileHandler(args.log_file) if args.log_file else logging.StreamHandler()
    except OSError as e:
        raise ConfigError(f"--log-file {args.log_file}: {e.strerror or e}") from None
    logs.configure(handler, config.node_id, config.broker_setting("log.format"))

    # uvloop's transports send without the copies and buffer shuffling of asyncio's own
    # (bytearray extend, del buffer[:n]), which were a fifth of a busy node's time.
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        try:
            runner.run(_process().NodeProcess(config).run_until_signalled())
        except OSError as e:  # a port in use, a data directory it may not write
            raise ConfigError(f"node {config.node_id} cannot start: {e}") from None
    return 0


def _cluster_up(args: argparse.Namespace) -> int:
    if args.hosts is not None:
        return _cluster_up_hosts(args)
    if args.nodes < 1:
        raise ConfigError(f"--nodes must be at least 1, got {args.nodes}")
    # node i listens on kafka_port + i - 1; its Raft, admin and proxy ports 1000, 2000 and
    # 3000 above
    args.listeners = args.listeners or ("SASL_PLAINTEXT" if args.secure else "PLAINTEXT")
    extra = 1000 * args.listeners.count(",")
    if args.kafka_port < 1 or args.kafka_port + args.nodes - 1 + 3000 + extra > 65535:
        raise ConfigError(
            f"--kafka-port {args.kafka_port}: the nodes' ports "
            f"(up to +{args.nodes - 1 + 3000 + extra}) must lie from 1 to 65535"
        )
    broker = dict(local_nodes.parse_setting(item) for item in args.broker)
    listeners = tuple(x.strip().upper() for x in args.listeners.split(",") if x.strip())
    bootstrap = cluster.up(
        args.data,
        args.nodes,
        args.kafka_port,
        args.timeout,
        broker,
        listeners=listeners,
        secure=args.secure,
        racks=tuple(x.strip() for x in (args.racks or "").split(",") if x.strip()),
    )
    print(f"raftlog cluster of {args.nodes} nodes is up; data in {args.data.resolve()}")
    if args.secure:
        print(
            f"authorizer on, super user {cluster.SUPER_USER} (the CLI logs in as it; "
            f"client properties in {args.data.resolve() / cluster.TOOLS_CONFIG})"
        )
    print("bootstrap servers:")
    print(bootstrap)
    return 0


def _cluster_up_hosts(args: argparse.Namespace) -> int:
    if not 1 <= args.hosts <= 64 or not 1 <= args.brokers_per_host <= 64:
        raise ConfigError("--hosts and --brokers-per-host must be from 1 to 64")
    unsupported = [f for f in ("listeners", "racks") if getattr(args, f)] + (
        ["secure"] if args.secure else []
    )
    if unsupported:
        raise ConfigError(f"--{unsupported[0]} is not served with --hosts yet; leave one out")
    broker = dict(local_nodes.parse_setting(item) for item in args.broker)
    bootstrap = cluster.up_hosts(
        args.data, args.hosts, args.brokers_per_host, args.kafka_port, args.timeout, broker
    )
    print(
        f"raftlog cluster of {args.hosts} hosts of {args.brokers_per_host} brokers is up; "
        f"data in {args.data.resolve()}"
    )
    print("bootstrap servers:")
    print(bootstrap)
    return 0


def _cluster_add_node(args: argparse.Namespace) -> int:
    spec = cluster.add_node(args.data, args.timeout, rack=args.rack)
    print(f"node {spec.node_id} joined; Kafka on 127.0.0.1:{spec.kafka_port}")
    print(cluster.read_state(args.data.resolve())["bootstrap"])
    return 0


def _cluster_add_host(args: argparse.Namespace) -> int:
    name, specs = cluster.add_host(args.data, args.timeout)
    print(
        f"host {name} joined: brokers {', '.join(str(s.node_id) for s in specs)}, Kafka on "
        f"{', '.join(f'127.0.0.1:{s.kafka_port}' for s in specs)}"
    )
    print(cluster.read_state(args.data.resolve())["bootstrap"])
    return 0


def _cluster_down(args: argparse.Namespace) -> int:
    for line in cluster.down(args.data):
        print(line)
    return 0


def _cluster_decommission(args: argparse.Namespace) -> int:
    from raftlog_app.replicas_cli import decommission

    admin = client_config.admin(_bootstrap(args), "raftlog-decommission", 30_000)
    try:
        return decommission(
            admin,
            args.node,
            args.timeout,
            lambda line: print(line, flush=True),
            args.admin,
            _admin_token(args),
        )
    finally:
        admin.close()


def _admin_token(args: argparse.Namespace) -> str | None:
    """--admin-token, else RAFTLOG_ADMIN_TOKEN, else, without --bootstrap, the local
    cluster's (its first node's config), if there is one."""
    if args.admin_token:
        return str(args.admin_token)
    if os.environ.get("RAFTLOG_ADMIN_TOKEN"):
        return os.environ["RAFTLOG_ADMIN_TOKEN"]
    if args.bootstrap is not None:
        return None  # not the local cluster
    try:
        first = cluster.read_state(args.data.resolve())["nodes"][0]
        return NodeConfig.load(Path(first["config"])).admin_token
    except (local_nodes.ClusterError, ConfigError, OSError, KeyError, IndexError, ValueError):
        return None


def _cluster_rebalance(args: argparse.Namespace) -> int:
    from raftlog_app.replicas_cli import rebalance

    admin = client_config.admin(_bootstrap(args), "raftlog-rebalance", 30_000)
    try:
        return rebalance(admin, args.timeout, lambda line: print(line, flush=True), args.admin)
    finally:
        admin.close()


def _cluster_status(args: argparse.Namespace) -> int:
    for line in cluster.cluster_status(args.data):
        print(line)
    return 0


def _proxy(args: argparse.Namespace) -> int:
    bootstrap = [parse_address(a, "--bootstrap") for a in args.bootstrap.split(",")]
    listen = parse_address(args.listen, "--listen")
    # as a node logs (on stderr): without it Python's last-resort handler printed WARNINGs
    # and ERRORs as bare messages, no time or level, and dropped every INFO line
    handler = logging.StreamHandler()
    handler.setFormatter(logs.TextFormatter("proxy"))
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        try:
            runner.run(_process().serve_proxy(bootstrap, listen))
        except OSError as e:  # the port in use
            raise ConfigError(f"the proxy cannot listen on {args.listen}: {e}") from None
    return 0


def _bootstrap(args: argparse.Namespace) -> str:
    if args.bootstrap:
        return args.bootstrap
    local = cluster.tools(args.data)  # None: read_state says there is no cluster there
    return local[0] if local is not None else cluster.read_state(args.data.resolve())["bootstrap"]


def _command_config(args: argparse.Namespace) -> Path | None:
    """--command-config, else for a command that talks to the local cluster (no
    --bootstrap) the super user's properties of a `cluster up --secure` one."""
    given: Path | None = getattr(args, "command_config", None)
    local_cluster = hasattr(args, "data") and getattr(args, "bootstrap", "") is None
    if given is not None or not local_cluster:
        return given
    local = cluster.tools(args.data)
    return local[1] if local is not None else None


def _epochs(args: argparse.Namespace) -> int:
    admins = args.admin or [n["admin"] for n in cluster.read_state(args.data.resolve())["nodes"]]
    found = False
    for admin in admins:
        url = f"http://{admin}/v1/partitions/{args.topic}/{args.partition}/epochs"
        try:
            with urllib.request.urlopen(url, timeout=3) as r:
                answer = json.load(r)
        except urllib.error.HTTPError as e:
            print(f"{admin}: {e.read().decode().strip()}")
            continue
        except (urllib.error.URLError, OSError) as e:
            print(f"{admin}: not reachable ({e})")
            continue
        found = True
        print(f"{admin}: term {answer['term']}, log end offset {answer['log_end_offset']}")
        print("  epoch  start offset  bytes")
        for span in answer["epochs"]:
            print(f"  {span['epoch']:>5}  {span['start_offset']:>12}  {span['bytes']}")
    return 0 if found else 1


if __name__ == "__main__":
    sys.exit(main())
