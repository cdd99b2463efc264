"""CURVE keys of the daemon's sockets: one server and one client key pair in a folder.

The tick feed and the daemon's orders endpoint are CURVE servers (they hold the server's
secret key); the daemon's tick subscriber and every reader of orders are clients (they hold
the client pair and the server's public key). A ZAP authenticator on each server admits only
client keys found in the folder, so a peer without the folder's keys gets nothing in and
reads nothing out.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator

from engine.errors import UserError


@dataclass(frozen=True)
class CurveKeys:
    folder: Path
    server_public: bytes
    server_secret: bytes
    client_public: bytes
    client_secret: bytes

    @property
    def server(self) -> tuple[bytes, bytes]:
        return self.server_public, self.server_secret

    @property
    def client(self) -> tuple[bytes, bytes, bytes]:
        return self.client_public, self.client_secret, self.server_public


def write_keys(folder: str | Path) -> dict[str, str]:
    """Create server and client key pairs in `folder` (secret files readable by the owner
    only); refuses to overwrite existing keys."""
    d = Path(folder)
    try:
        d.mkdir(parents=True, exist_ok=True)
        for name in ("server", "client"):
            if (d / f"{name}.key_secret").exists():
                raise UserError(f"keys {d}: {name}.key_secret exists; not overwriting it")
        out = {}
        for name in ("server", "client"):
            public, secret = zmq.auth.create_certificates(str(d), name)
            os.chmod(secret, 0o600)
            out[name] = public
            out[f"{name}_secret"] = secret
    except OSError as exc:
        raise UserError(f"keys {d}: cannot write: {exc.strerror}") from None
    return out


def load_keys(folder: str | Path) -> CurveKeys:
    d = Path(folder)
    try:
        sp, ss = zmq.auth.load_certificate(str(d / "server.key_secret"))
        cp, cs = zmq.auth.load_certificate(str(d / "client.key_secret"))
    except (OSError, ValueError) as exc:
        raise UserError(f"--curve {d}: no readable key pairs ({exc}); create them with "
                        f"`run_engine.py keys --out {d}`") from None
    if ss is None or cs is None:
        raise UserError(f"--curve {d}: secret keys missing")
    return CurveKeys(d, sp, ss, cp, cs)


def start_authenticator(context: zmq.Context[Any], keys: CurveKeys) -> ThreadAuthenticator:
    """Admit only the folder's client key to CURVE servers of `context` (ZAP)."""
    auth = ThreadAuthenticator(context)
    auth.start()
    auth.configure_curve(domain="*", location=str(keys.folder))
    return auth
