"""A test-only Ed25519 signer (RFC 8032 §5.1.6) on leasesvc._ed25519's
arithmetic, so the tests can make proofs with keys of their own. The SDK
itself only verifies. Not constant-time: never sign with a real key here."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any, Dict

from leasesvc import _ed25519 as ed


def public_key(seed: bytes) -> bytes:
    """The public key of a 32-byte secret key."""
    return ed._encode(ed._mul_base(_scalar(seed)))


def _scalar(seed: bytes) -> int:
    h = bytearray(hashlib.sha512(seed).digest()[:32])
    h[0] &= 248
    h[31] &= 127
    h[31] |= 64
    return int.from_bytes(h, "little")


def sign(seed: bytes, message: bytes) -> bytes:
    """The Ed25519 signature of message under the secret key seed."""
    prefix = hashlib.sha512(seed).digest()[32:]
    a = _scalar(seed)
    pub = ed._encode(ed._mul_base(a))
    r = int.from_bytes(hashlib.sha512(prefix + message).digest(), "little") % ed.L
    rb = ed._encode(ed._mul_base(r))
    k = int.from_bytes(hashlib.sha512(rb + pub + message).digest(), "little") % ed.L
    return rb + ((r + k * a) % ed.L).to_bytes(32, "little")


def b64(b: bytes) -> str:
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def compact(obj: Dict[str, Any]) -> str:
    """JSON as Go's encoding/json writes it (members in the given order)."""
    return b64(json.dumps(obj, separators=(",", ":")).encode())


def make_proof(seed: bytes, kid: str, lease: str, token: int, holder: str = "h", *, principal: str = "",
               iat: int = 1700000000, iss: str = "leasesvc", header: Any = None, payload: Any = None) -> str:
    """A proof as the service signs it (fence.Sign), or with the header or
    payload given instead."""
    if header is None:
        header = {"alg": "EdDSA", "kid": kid, "typ": "leasesvc-fence+jwt"}
    if payload is None:
        payload = {"lease": lease, "fencingToken": token, "holder": holder}
        if principal:
            payload["principal"] = principal
        payload.update({"iat": iat, "iss": iss})
    signed = compact(header) + "." + compact(payload)
    return signed + "." + b64(sign(seed, signed.encode()))
