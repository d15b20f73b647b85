"""`loopdeck serve`: the console in a browser, through textual-serve.

Each browser tab is a `loopdeck console` process of its own on the store, so every decision
made in a tab goes through the store's atomic update, as from a terminal. Every request needs
the token printed at start, on loopback too: a browser lets any page it shows open a
WebSocket to 127.0.0.1, and other users of this machine reach its loopback; the token, kept
in a SameSite=Strict cookie, lets only the one who opened the printed URL in. A browser sends
a host's cookies to every port of it, so a page on another local port would have the cookie
too: every request's `Host` and `Origin` must also name this server (loopback, its address,
or an `--allow-host` name, at its port). `--public` allows listening beyond loopback.

Light at import: the parser imports it for `add_serve_command`. aiohttp and textual-serve are
imported by `run_serve` alone (`cli/serve_auth.py`). It imports nothing of the parser (the
parser imports it): its exit code for refused input is the parser's `EXIT_BAD_INPUT`, 2.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import re
import secrets
import shlex
import sys
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from loopdeck.cli.notify_flags import add_serve_notify_flags
from loopdeck.store.base import (
    DB_HELP,
    Location,
    default_db_path,
    is_postgres,
    made_store,
    redact,
    shown_location,
    store_location,
)

EXIT_SERVED, EXIT_REFUSED = 0, 2
DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 8765
TOKEN_BYTES = 32  # `secrets.token_urlsafe`'s bytes: 43 characters in the URL
WILDCARDS = ("0.0.0.0", "::")
# A Host header's form: a DNS name or IPv4 address, or an IPv6 address in brackets; a port.
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
AUTHORITY = re.compile(rf"(?:{_LABEL}(?:\.{_LABEL})*|\[[0-9A-Fa-f:.]+\])(?::[0-9]{{1,5}})?")
Authority = tuple[str, int | None]  # a name as `name_of` writes it, and a port if given
DEFAULT_PORTS = (80, 443)  # what a Host without a port may mean (plain, or behind TLS)


def port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a port number, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be 0 to 65535 (0: any free port), got {text!r}")
    return value


def allowed_host(text: str) -> Authority:
    try:
        return authority(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be NAME or NAME:PORT (an IPv6 address in brackets), got {text!r}"
        ) from None


def add_serve_command(commands: Any) -> None:
    """`loopdeck serve`, added to the parser's subcommands."""
    serve = commands.add_parser(
        "serve", help="the console in a browser: each tab a console of its own on the store"
    )
    serve.add_argument("--db", type=store_location, help=DB_HELP)
    serve.add_argument(
        "--host",
        default=DEFAULT_HOST,
        help=f"address to listen on (default: {DEFAULT_HOST}, this machine only; "
        "any other needs --public)",
    )
    serve.add_argument(
        "--port", type=port, default=DEFAULT_PORT, help=f"default {DEFAULT_PORT}; 0: a free one"
    )
    serve.add_argument(
        "--public",
        action="store_true",
        help="allow a --host other machines reach (the printed token is still needed)",
    )
    serve.add_argument(
        "--allow-host",
        metavar="NAME[:PORT]",
        type=allowed_host,
        action="append",
        default=[],
        help="a name browsers reach this server by, besides loopback and its address "
        "(repeatable; with :PORT, a tunnel's or proxy's port); any other Host or Origin "
        "is refused",
    )
    add_serve_notify_flags(serve)


def is_loopback(host: str) -> bool:
    """Only this machine reaches it: `localhost`, 127.0.0.0/8, ::1. A name other than
    `localhost` may resolve anywhere, so it is not taken as loopback."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def name_of(host: str) -> str:
    """A host as compared: lowercased, an IP address in its short form without brackets (an
    IPv4-mapped IPv6 address as the IPv4 one)."""
    bare = host.strip("[]").lower()
    try:
        address = ipaddress.ip_address(bare)
    except ValueError:
        return bare
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


def authority(text: str) -> Authority:
    """The name and port of `host[:port]` (a Host header, an `--allow-host`); ValueError if
    it is not one."""
    if not AUTHORITY.fullmatch(text):
        raise ValueError(f"not a host: {text!r}")
    if text.startswith("["):
        close = text.index("]")
        name, given = text[1:close], text[close + 2 :]
        ipaddress.IPv6Address(name)  # ValueError when it is not one
    else:
        name, _, given = text.partition(":")
    port = int(given) if given else None
    if port is not None and not 0 < port <= 65535:
        raise ValueError(f"not a port: {given!r}")
    return name_of(name), port


def origin_of(text: str) -> tuple[str, int] | None:
    """The name and port of an `Origin` header (the port its scheme's when not written);
    None for `null` or anything not an http(s) origin."""
    scheme, sep, rest = text.partition("://")
    default = {"http": 80, "https": 443}.get(scheme.lower())
    if not sep or default is None:
        return None
    try:
        name, port = authority(rest)
    except ValueError:
        return None
    return name, default if port is None else port


@dataclass(frozen=True)
class Site:
    """Where this server's own page is: a loopback name, its `--host` (as its printed URL has
    it), the address a connection came to, or an `--allow-host` name; at the server's port,
    or the allowed name's own. An address is no name a page can rebind to 127.0.0.1."""

    host: str
    allowed: tuple[Authority, ...] = ()

    def refusal(
        self, port: int, hosts: Sequence[str], origins: Sequence[str], local: str | None
    ) -> str | None:
        """Why a request to `port` with these Host and Origin headers, on a connection to the
        address `local`, is not from this server's own page; None when it is."""
        if len(hosts) != 1 or len(origins) > 1:
            return f"{len(hosts)} Host and {len(origins)} Origin headers"
        local = name_of(local) if local else None
        try:
            name, given = authority(hosts[0])
        except ValueError:
            return f"Host {hosts[0]!r} is not a host"
        if not self.serves(port, name, DEFAULT_PORTS if given is None else (given,), local):
            return f"Host {hosts[0]!r} is not this server's"
        if not origins:  # a navigation, or a client that is no browser: the token decides
            return None
        if (origin := origin_of(origins[0])) is None:
            return f"Origin {origins[0]!r} is not a page's"
        if not self.serves(port, origin[0], (origin[1],), local):
            return f"Origin {origins[0]!r} is not this server's"
        return None

    def serves(self, port: int, name: str, ports: tuple[int, ...], local: str | None) -> bool:
        if (is_loopback(name) or name in (local, name_of(self.host))) and port in ports:
            return True
        return any(
            name == allowed and (port if at is None else at) in ports
            for allowed, at in self.allowed
        )


def refusal(host: str, public: bool) -> str | None:
    """Why the console is not served on `host`, or None."""
    if public or is_loopback(host):
        return None
    return (
        f"--host {host} can be reached from other machines: add --public to serve the "
        f"console there (its printed token is still asked of every browser), or leave out "
        f"--host to listen on {DEFAULT_HOST} only"
    )


def console_command(location: Location) -> tuple[str, dict[str, str]]:
    """The shell command each tab runs, and what its environment adds: `loopdeck console`,
    started ahead of its tab (`spare_console`). `exec`: the shell becomes the console, so the
    server's signals and its death reach the console itself. A PostgreSQL password goes in
    PGPASSWORD, never on a command line others can read (`ps`)."""
    extra: dict[str, str] = {}
    shown = str(location)
    if is_postgres(location):
        parts = urllib.parse.urlsplit(shown)
        query = dict(urllib.parse.parse_qsl(parts.query))
        password = query.get("password") or urllib.parse.unquote(parts.password or "")
        if password:
            extra["PGPASSWORD"] = password
        shown = redact(shown)
    console = [sys.executable, "-m", "loopdeck.cli.spare_console", "console", "--db", shown]
    command = shlex.join(console)
    return f"exec {command}", extra


def url_of(host: str, port: int, token: str) -> str:
    """The URL to open: the host as a browser writes it (an IPv6 address in brackets)."""
    try:
        bracketed = ipaddress.ip_address(host).version == 6
    except ValueError:
        bracketed = False
    netloc = f"[{host}]:{port}" if bracketed else f"{host}:{port}"
    return f"http://{netloc}/?token={token}"


def announcement(args: argparse.Namespace, location: Location, port: int, token: str) -> str:
    """What the server says once, as it starts listening: where to open the console."""
    lines = [
        f"loopdeck serve: the console of {shown_location(location)}, one per browser tab",
        f"open {url_of(args.host, port, token)}",
    ]
    if args.host in WILDCARDS:
        lines.append(f"  (from another machine, with this machine's address for {args.host})")
    if not is_loopback(args.host) and not args.allow_host:
        lines.append("  (a browser reaching it by a name needs --allow-host NAME)")
    if not is_loopback(args.host):
        lines.append(
            "plain HTTP: who sees the traffic reads the token; across a network you do not "
            "trust, serve on loopback and reach it through an SSH tunnel"
        )
    lines.append("Ctrl-C stops the server; each console records its stop first")
    return "\n".join(lines)


def run_serve(args: argparse.Namespace) -> int:
    """Serves until SIGINT or SIGTERM; a second one ends the consoles at once."""
    if (refused := refusal(args.host, args.public)) is not None:
        print(f"loopdeck: {refused}", file=sys.stderr)
        return EXIT_REFUSED
    from loopdeck.operator.records import check_store

    location = args.db or default_db_path()
    made = made_store(location)  # a tab's console starts runs in it (`n`): made, never silently
    asyncio.run(check_store(location))  # a store that cannot open is said once, here
    for said in made:
        print(f"loopdeck serve: {said}", file=sys.stderr)

    from loopdeck.cli.decision_links import LinkedServer, link_desk
    from loopdeck.cli.serve_auth import CannotListen, serve_until_stopped

    command, extra_env = console_command(location)
    links = link_desk(args, location, extra_env)  # --url, --notify
    token = secrets.token_urlsafe(TOKEN_BYTES)
    server = LinkedServer(
        command,
        host=args.host,
        port=args.port,
        token=token,
        console_env=extra_env,
        site=Site(args.host, tuple(args.allow_host)).refusal,
        links=links,
    )

    def announce(bound_port: int) -> None:
        print(announcement(args, location, bound_port, token), flush=True)

    try:
        asyncio.run(serve_until_stopped(server, announce))
    except CannotListen as exc:
        print(f"loopdeck: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    return EXIT_SERVED
