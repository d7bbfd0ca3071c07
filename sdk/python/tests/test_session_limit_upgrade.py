"""An upgrade refused at the service's cap of sessions is a
SessionLimitError (docs/contract.md §14 Limits); the rate limit is not."""

import json
import unittest
from unittest import mock

from leasesvc import RateLimitedError
from leasesvc import _session_wire, _websocket
from leasesvc._session_wire import SessionLimitError


def _refused(body: dict, status: int = 429) -> _websocket.HandshakeError:
    return _websocket.HandshakeError("refused", status=status, reason="Too Many Requests",
                                     headers={"retry-after": "1"}, body=json.dumps(body).encode())


class UpgradeRefusalTest(unittest.TestCase):
    """dial tells the cap of sessions from the caller's rate limit."""

    def _dial(self, err: _websocket.HandshakeError) -> BaseException:
        with mock.patch.object(_websocket, "connect", side_effect=err):
            with self.assertRaises(RateLimitedError) as cm:
                _session_wire.dial("ws://127.0.0.1:1/v1/sessions:connect", {}, 1.0)
        return cm.exception

    def test_cap_of_sessions(self) -> None:
        e = self._dial(_refused({"code": "resource_exhausted", "detail": "too many sessions", "limit": "sessions"}))
        self.assertIsInstance(e, SessionLimitError)

    def test_rate_limit(self) -> None:
        e = self._dial(_refused({"code": "resource_exhausted", "detail": "rate limit exceeded"}))
        self.assertNotIsInstance(e, SessionLimitError)


if __name__ == "__main__":
    unittest.main()
