"""Records in the ranks' store, signed with a secret only the ranks hold.

The store has no authentication (torch's ``TCPStore``): whoever reaches its port can write a record
of exactly the right shape with false contents -- a "met" verdict for a test a rank measured as
unmet. With a secret (``environ.store_secret``), every record is written as
``gputopo-hmac-sha256:<HMAC-SHA256 of key and value, hex>:<value>`` and read back only when its
signature matches: the key is part of what is signed, so a record cannot be moved to another rank's
or another run's key. A fresh secret per job also keeps a record of an earlier run with the same
run id from being replayed.
"""

from __future__ import annotations

import hashlib
import hmac

PREFIX = b"gputopo-hmac-sha256:"
_HEX_CHARS = 64


class Signer:
    def __init__(self, secret: bytes | None, source: str = "") -> None:
        self._secret = secret
        self.source = source  # the variable the secret came from, for messages

    @property
    def signs(self) -> bool:
        return self._secret is not None

    def _mac(self, key: str, value: bytes) -> bytes:
        # called only where it signs: a secret
        return hmac.new(self._secret, key.encode("utf-8") + b"\n" + value, hashlib.sha256).hexdigest().encode()  # type: ignore[arg-type]

    def seal(self, key: str, value: str) -> bytes:
        """What is written under ``key``: the value, signed when there is a secret."""
        data = value.encode("utf-8")
        return PREFIX + self._mac(key, data) + b":" + data if self._secret is not None else data

    def open(self, key: str, raw: bytes) -> bytes:
        """The value read under ``key``; ValueError saying why it is not taken."""
        signed = raw.startswith(PREFIX)
        if self._secret is None:
            if signed:
                raise ValueError(
                    "it is signed and this rank has no secret: give every rank the same "
                    "PYTEST_GPUTOPO_STORE_SECRET_FILE (or PYTEST_GPUTOPO_STORE_SECRET)"
                )
            return raw
        if not signed:
            raise ValueError(
                f"it is not signed: a process without this run's secret ({self.source}) wrote it, "
                f"or a rank that was given none"
            )
        mac, data = raw[len(PREFIX) : len(PREFIX) + _HEX_CHARS], raw[len(PREFIX) + _HEX_CHARS + 1 :]
        if raw[len(PREFIX) + _HEX_CHARS : len(PREFIX) + _HEX_CHARS + 1] != b":" or not hmac.compare_digest(
            mac, self._mac(key, data)
        ):
            raise ValueError(
                f"its signature does not match this run's secret ({self.source}): a process "
                f"without it wrote it, or a rank that was given another secret"
            )
        return data
