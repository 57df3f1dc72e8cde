"""`raftlog user create|delete|list`: SCRAM users through a node's admin API (as Redpanda's
rpk does), which is how the first user gets in when every Kafka listener wants SASL. The
admin token comes from --token, $RAFTLOG_ADMIN_TOKEN, or the local cluster's node config."""

from __future__ import annotations

import argparse
import getpass
import json
import os
import ssl
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from raftlog.common.errors import ConfigError
from raftlog.config.node_config import NodeConfig
from raftlog.security.scram import DEFAULT_MECHANISM, MECHANISMS, MIN_ITERATIONS
from raftlog_app import cluster, local_nodes

TIMEOUT_S = 30.0


def add_parser(sub: Any, default_data: Path) -> None:
    user = sub.add_parser("user", help="SCRAM users (SASL PLAIN and SCRAM log in as them)")
    actions = user.add_subparsers(metavar="ACTION", required=True)
    create = actions.add_parser("create", help="create a user, or set a mechanism's password")
    create.add_argument("name")
    secret = create.add_mutually_exclusive_group()
    secret.add_argument("--password", help="visible to other local users in ps; prefer stdin")
    secret.add_argument("--password-stdin", action="store_true", help="read it from stdin")
    create.add_argument("--mechanism", choices=sorted(MECHANISMS), default=DEFAULT_MECHANISM)
    create.add_argument("--iterations", type=int, default=MIN_ITERATIONS)
    create.set_defaults(run=_create)
    delete = actions.add_parser("delete", help="delete a user (or one mechanism of it)")
    delete.add_argument("name")
    delete.add_argument("--mechanism", choices=sorted(MECHANISMS))
    delete.set_defaults(run=_delete)
    listing = actions.add_parser("list", help="users and their mechanisms")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(run=_list)
    for p in (create, delete, listing):
        p.add_argument("--admin", help="a node's admin address, host:port or https://host:port")
        p.add_argument("--token", help="the admin token (default: $RAFTLOG_ADMIN_TOKEN)")
        p.add_argument("--cacert", type=Path, help="CA file for an https admin address")
        p.add_argument("--data", type=Path, default=default_data)


def _create(args: argparse.Namespace) -> int:
    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = args.password or getpass.getpass(f"password for {args.name}: ")
    body = {
        "name": args.name,
        "password": password,
        "mechanism": args.mechanism,
        "iterations": args.iterations,
    }
    _call(args, "POST", "/v1/users", body)
    print(f"user {args.name}: {args.mechanism} set")
    return 0


def _delete(args: argparse.Namespace) -> int:
    query = f"?mechanism={args.mechanism}" if args.mechanism else ""
    done = _call(args, "DELETE", f"/v1/users/{urllib.parse.quote(args.name, safe='')}{query}")
    print(f"user {args.name}: {', '.join(done['deleted'])} deleted")
    return 0


def _list(args: argparse.Namespace) -> int:
    users = _call(args, "GET", "/v1/users")["users"]
    if args.json:
        print(json.dumps(users, indent=2))
        return 0
    print(f"{'USER':<24} MECHANISMS")
    for name, mechanisms in users.items():
        described = ", ".join(f"{m} ({i} iterations)" for m, i in mechanisms.items())
        print(f"{name:<24} {described}")
    return 0


def _target(args: argparse.Namespace) -> tuple[str, str]:
    """(base URL, token): --admin and --token, else the local cluster's first live node."""
    token = args.token or os.environ.get("RAFTLOG_ADMIN_TOKEN")
    admin = args.admin
    if admin is None or token is None:
        state = cluster.read_state(args.data.resolve())
        live = [n for n in state["nodes"] if local_nodes.alive(n.get("pid"))] or state["nodes"]
        admin = admin or live[0]["admin"]
        if token is None:
            token = NodeConfig.load(Path(live[0]["config"])).admin_token
    if not token:
        raise ConfigError("no admin token: pass --token or set RAFTLOG_ADMIN_TOKEN")
    return (admin if "://" in admin else f"http://{admin}"), token


def _call(args: argparse.Namespace, method: str, path: str, body: Any = None) -> Any:
    base, token = _target(args)
    request = urllib.request.Request(
        base + path,
        method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    context = ssl.create_default_context(cafile=args.cacert) if args.cacert else None
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S, context=context) as answer:
            return json.load(answer)
    except urllib.error.HTTPError as e:
        raise ConfigError(f"{method} {path}: {e.code} {_refusal(e.read())}") from None
    except (urllib.error.URLError, OSError) as e:
        raise ConfigError(f"cannot reach the admin API at {base}: {e}") from None


def _refusal(body: bytes) -> str:
    """An error answer as one line: the node's {"error", "message"}, or its text."""
    text = body.decode(errors="replace")
    try:
        answer = json.loads(text)
    except ValueError:
        answer = None
    if isinstance(answer, dict) and "error" in answer:
        text = f"{answer['error']}: {answer.get('message') or ''}"
    return " ".join(text.split())
