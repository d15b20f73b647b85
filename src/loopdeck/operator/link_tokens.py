"""One-time decision links: the token a push's link carries, and the server that answers it.

A token names one ask of one decision of one run (`LinkClaim`: the run, the call or question,
which ask of it, what it is, until when, and the server), signed with HMAC-SHA256 under the
server's secret and compared in constant time. A token for another server (another `--url`,
another machine's secret) is foreign; one whose signature does not match was made under
another secret (another store's server at this address, a secret made anew) or altered; one
past its time has expired. What the token decides is the store's to say:
`operator/link_decisions.py`.

The server: `loopdeck serve --url BASE` registers itself for its store in loopdeck's data
folder (0700): its secret (`<store>.secret`, 0600, kept across restarts so a link outlives a
restart of the same server) and where it is (`<store>.serve`: BASE and its pid, removed when it
stops). A run of that store on this machine finds it there (`registered`) and puts links to it
in its pushes; without one, a push carries the CLI command that decides.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import os
import secrets
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, get_args

from loopdeck.core.push_events import PushedWhat
from loopdeck.core.text import moment_words
from loopdeck.store.base import Location, data_folder, is_postgres, redact
from loopdeck.store.files import private_folder

VERSION = 1
LINK_PATH = "/d/"
SECRET_BYTES = 32
OUTCOME_ASK = "outcome"  # an unknown outcome has one ask: its word
# Most often honest: another store's server at the same address, or its secret made anew.
NOT_THIS_SECRET = (
    "This link was made for this address by another loopdeck server (another store served"
    " here, or this store's link secret was made anew), or it was altered: it decides nothing"
    " here."
)


class LinkRefused(Exception):
    """A token that decides nothing here: `reason` is one of `malformed`, `foreign`,
    `forged`, `expired`; the message says it to the person who opened it."""

    def __init__(self, reason: str, words: str, claim: LinkClaim | None = None) -> None:
        super().__init__(words)
        self.reason = reason
        self.claim = claim  # an expired link's, read and checked: the page shows where it stands


@dataclass(frozen=True)
class LinkClaim:
    """What a link's token says: one ask (`ask`) of the decision `call_id` of `run_id`,
    valid until `until` (epoch seconds), made by the server `server`."""

    run_id: str
    call_id: str
    ask: str
    what: PushedWhat
    until: int
    server: str


def ask_of_request(call_id: str, args_sha256: str, state_hash: str, requested_at: datetime) -> str:
    """Which ask of a write a request is: its arguments, its state and when it was asked. A
    call asked again (the state moved, the request expired) is another ask."""
    said = f"{call_id}|{args_sha256}|{state_hash}|{requested_at.timestamp():.6f}"
    return hashlib.sha256(said.encode()).hexdigest()[:16]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True)
class LinkServer:
    """A server that answers decision links: the address they point at (`url`, as a phone
    reaches it) and its secret."""

    url: str
    secret: bytes

    @property
    def id(self) -> str:
        """The server as its tokens name it: its address, hashed."""
        return hashlib.sha256(self.url.encode()).hexdigest()[:16]

    def _mac(self, purpose: str, text: str) -> bytes:
        return hmac.new(self.secret, f"{purpose}:{text}".encode(), hashlib.sha256).digest()

    def token(self, claim: LinkClaim) -> str:
        said = [VERSION, claim.run_id, claim.call_id, claim.ask, claim.what, claim.until]
        payload = _b64(json.dumps([*said, claim.server], separators=(",", ":")).encode())
        return f"{payload}.{_b64(self._mac('link', payload))}"

    def link(self, claim: LinkClaim) -> str:
        return f"{self.url}{LINK_PATH}{self.token(claim)}"

    def claim(self, run_id: str, call_id: str, ask: str, what: PushedWhat, until: int) -> LinkClaim:
        return LinkClaim(run_id, call_id, ask, what, until, self.id)

    def claim_of(self, token: str, now: float) -> LinkClaim:
        """The claim a token makes, checked: signed by this server, for this server, in
        time; `LinkRefused` naming why not."""
        claim, payload, mac = _parsed(token)
        if claim.server != self.id:
            raise LinkRefused(
                "foreign",
                "This link was made for another loopdeck server: it decides nothing here.",
            )
        if not hmac.compare_digest(mac, self._mac("link", payload)):
            raise LinkRefused("forged", NOT_THIS_SECRET)
        if now >= claim.until:
            when = moment_words(datetime.fromtimestamp(claim.until).astimezone())
            said = f"This link expired at {when}: it decides nothing by itself."
            raise LinkRefused("expired", said, claim)
        return claim

    def sign(self, purpose: str, text: str) -> str:
        """A value only this server makes (a form's guard against cross-site posts)."""
        return _b64(self._mac(purpose, text))

    def signed(self, purpose: str, text: str, given: str) -> bool:
        return hmac.compare_digest(given.encode(), self.sign(purpose, text).encode())


MALFORMED = LinkRefused("malformed", "This is not a loopdeck decision link (it cannot be read).")


def _parsed(token: str) -> tuple[LinkClaim, str, bytes]:
    payload, sep, mac_text = token.partition(".")
    if not sep or len(token) > 2000:
        raise MALFORMED
    try:
        said: Any = json.loads(_unb64(payload))
        mac = _unb64(mac_text)
        version, run_id, call_id, ask, what, until, server = said
    except (ValueError, TypeError):
        raise MALFORMED from None
    texts = (run_id, call_id, ask, server)
    if version != VERSION or not all(isinstance(t, str) for t in texts):
        raise MALFORMED
    if what not in get_args(PushedWhat) or not isinstance(until, int):
        raise MALFORMED
    return LinkClaim(run_id, call_id, ask, what, until, server), payload, mac


def _folder() -> Path:
    return private_folder(data_folder() / "links")


def _store_key(location: Location) -> str:
    """A store, named the same by every process that opens it."""
    named = redact(str(location)) if is_postgres(location) else str(Path(location).resolve())
    return hashlib.sha256(named.encode()).hexdigest()[:20]


def _secret(location: Location) -> bytes:
    """The store's link secret, made once (0600, never replaced)."""
    path = _folder() / f"{_store_key(location)}.secret"
    with contextlib.suppress(FileExistsError):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as made:
            made.write(secrets.token_hex(SECRET_BYTES))
    return bytes.fromhex(path.read_text().strip())


def register(location: Location, url: str) -> LinkServer:
    """This process answers the store's decision links at `url` (`loopdeck serve --url`)."""
    server = LinkServer(url.rstrip("/"), _secret(location))
    path = _folder() / f"{_store_key(location)}.serve"
    fd = os.open(path.with_suffix(".tmp"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as written:
        json.dump({"url": server.url, "pid": os.getpid()}, written)
    os.replace(path.with_suffix(".tmp"), path)
    return server


def unregister(location: Location) -> None:
    """The store's links are answered no more by this process (another's registration is
    left as it is)."""
    path = _folder() / f"{_store_key(location)}.serve"
    with contextlib.suppress(OSError, ValueError):
        if json.loads(path.read_text()).get("pid") == os.getpid():
            path.unlink()


def registered(location: Location) -> LinkServer | None:
    """The server answering the store's links on this machine, while it runs; else None."""
    path = _folder() / f"{_store_key(location)}.serve"
    try:
        said = json.loads(path.read_text())
        pid, url = int(said["pid"]), str(said["url"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # alive, another user's: its files would not be readable; taken as alive
    return LinkServer(url, _secret(location))
