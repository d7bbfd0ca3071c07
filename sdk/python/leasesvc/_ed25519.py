"""Ed25519 signature verification (RFC 8032 §5.1.7), pure Python, standard
library only: the SDK verifies leasesvc's fencing proofs (docs/contract.md
§17) without a third-party package. Verification only: nothing here signs
or handles a secret, so the code need not be constant-time.

The rules, stricter than RFC 8032's minimum and the same the project keeps
for all three languages (``fence/testdata/ed25519_vectors.json``):

* the public key is 32 bytes and the signature 64, else ``length``;
* ``S`` (the signature's second half) is below the group order L, else
  ``s_not_canonical`` (RFC 8032 §5.1.7 step 1: it prevents malleability);
* ``A`` (the key) and ``R`` (the signature's first half) are canonical
  encodings: their y is below p = 2^255 − 19, and x = 0 has the sign bit
  clear, else ``non_canonical``; they decode to a point of the curve, else
  ``not_on_curve``;
* neither ``A`` nor ``R`` is one of the 8 points of small order (the points
  P with [8]P the identity), else ``small_order``. **Chosen:** such a key
  makes signatures that verify for every message (the identity as ``A``
  with any ``R = [S]B``), and a small-order ``R`` is never what an honest
  signer makes, so both are refused rather than allowed by RFC 8032's
  letter. Points of mixed order (a prime-order part plus a small-order
  part) cannot be told apart cheaply and are not refused;
* the equation is the cofactorless one, ``[S]B = R + [k]A``, checked by
  encoding ``[S]B − [k]A`` and comparing it with ``R``'s bytes (as Go's
  crypto/ed25519 does), else ``mismatch``.

Speed: extended twisted Edwards coordinates (RFC 8032 §5.1.4), a table of
the base point's multiples in 4-bit windows (built once) for ``[S]B`` and a
4-bit fixed window for ``[k]A``: a verification takes a few milliseconds in
CPython.
"""

from __future__ import annotations

import hashlib
from typing import List, Optional, Tuple

__all__ = ["InvalidSignature", "verify", "check"]

#: The field's prime, 2^255 − 19.
P = 2**255 - 19
#: The order of the prime-order subgroup, L.
L = 2**252 + 27742317777372353535851937790883648493
#: The curve constant d = −121665 / 121666.
D = -121665 * pow(121666, P - 2, P) % P
_D2 = 2 * D % P
#: A square root of −1 modulo p.
_SQRT_M1 = pow(2, (P - 1) // 4, P)

#: A point in extended coordinates (X, Y, Z, T): x = X/Z, y = Y/Z, xy = T/Z.
Point = Tuple[int, int, int, int]

_IDENTITY: Point = (0, 1, 1, 0)

#: The reasons of :class:`InvalidSignature`, stable across releases and the
#: same words the shared vectors use.
LENGTH = "length"
S_NOT_CANONICAL = "s_not_canonical"
NON_CANONICAL = "non_canonical"
NOT_ON_CURVE = "not_on_curve"
SMALL_ORDER = "small_order"
MISMATCH = "mismatch"


class InvalidSignature(ValueError):
    """A signature that does not verify; ``reason`` is one of ``length``,
    ``s_not_canonical``, ``non_canonical``, ``not_on_curve``,
    ``small_order`` or ``mismatch``, and ``part`` names what was refused
    (``key``, ``R``, ``S``, ``signature`` or ``equation``)."""

    def __init__(self, reason: str, part: str, detail: str) -> None:
        super().__init__(f"ed25519: {detail}")
        self.reason = reason
        self.part = part


def _add(p1: Point, p2: Point) -> Point:
    """p1 + p2 (RFC 8032 §5.1.4, add-2008-hwcd-3)."""
    x1, y1, z1, t1 = p1
    x2, y2, z2, t2 = p2
    a = (y1 - x1) * (y2 - x2) % P
    b = (y1 + x1) * (y2 + x2) % P
    c = t1 * _D2 * t2 % P
    d = z1 * 2 * z2 % P
    e, f, g, h = b - a, d - c, d + c, b + a
    return (e * f % P, g * h % P, f * g % P, e * h % P)


def _double(p1: Point) -> Point:
    """2 · p1 (RFC 8032 §5.1.4, dbl-2008-hwcd)."""
    x1, y1, z1, _ = p1
    a = x1 * x1 % P
    b = y1 * y1 % P
    c = 2 * z1 * z1 % P
    h = a + b
    s = x1 + y1
    e = h - s * s % P
    g = a - b
    f = c + g
    return (e * f % P, g * h % P, f * g % P, e * h % P)


def _neg(p1: Point) -> Point:
    x, y, z, t = p1
    return ((-x) % P, y, z, (-t) % P)


def _encode(p1: Point) -> bytes:
    """The 32-byte encoding of p1 (RFC 8032 §5.1.2)."""
    x, y, z, _ = p1
    zi = pow(z, P - 2, P)
    x, y = x * zi % P, y * zi % P
    return (y | ((x & 1) << 255)).to_bytes(32, "little")


def _decode(s: bytes, part: str) -> Point:
    """Decode a 32-byte point (RFC 8032 §5.1.3), refusing a y ≥ p, a
    negative zero x, and a point off the curve."""
    n = int.from_bytes(s, "little")
    sign = n >> 255
    y = n & ((1 << 255) - 1)
    if y >= P:
        raise InvalidSignature(NON_CANONICAL, part, f"{part} is not canonically encoded (y ≥ p)")
    u = (y * y - 1) % P
    v = (D * y * y + 1) % P
    # x = (u/v)^((p+3)/8) = u v^3 (u v^7)^((p−5)/8)
    v3 = v * v % P * v % P
    x = u * v3 % P * pow(u * v3 % P * v3 % P * v % P, (P - 5) // 8, P) % P
    vx2 = v * x % P * x % P
    if vx2 != u:
        if vx2 == (-u) % P:
            x = x * _SQRT_M1 % P
        else:
            raise InvalidSignature(NOT_ON_CURVE, part, f"{part} is not a point of the curve")
    if x == 0 and sign:
        raise InvalidSignature(NON_CANONICAL, part, f"{part} is not canonically encoded (x = 0 with the sign bit set)")
    if x & 1 != sign:
        x = P - x
    return (x, y, 1, x * y % P)


def _small_order(p1: Point) -> bool:
    """Report whether [8]p1 is the identity: p1 is one of the 8 points of
    small order."""
    q = _double(_double(_double(p1)))
    return q[0] % P == 0 and (q[1] - q[2]) % P == 0


# The base point B (RFC 8032 §5.1).
_BY = 4 * pow(5, P - 2, P) % P
_B: Point = _decode(_BY.to_bytes(32, "little"), "B")

_B_TABLE: Optional[List[List[Point]]] = None


def _base_table() -> List[List[Point]]:
    """table[i][j] = j · 16^i · B for i < 64, j < 16: [s]B with 64 additions
    and no doubling. Built once (about 1000 additions)."""
    global _B_TABLE
    if _B_TABLE is None:
        table: List[List[Point]] = []
        base = _B
        for _ in range(64):
            row = [_IDENTITY, base]
            for _ in range(14):
                row.append(_add(row[-1], base))
            table.append(row)
            base = _add(row[-1], base)  # 16 · base
        _B_TABLE = table
    return _B_TABLE


def _mul_base(s: int) -> Point:
    """[s]B for 0 ≤ s < 2^256."""
    table = _base_table()
    q = _IDENTITY
    i = 0
    while s:
        nib = s & 15
        if nib:
            q = _add(q, table[i][nib])
        s >>= 4
        i += 1
    return q


def _mul(k: int, p1: Point) -> Point:
    """[k]p1 for 0 ≤ k < 2^256 with a 4-bit fixed window."""
    row = [_IDENTITY, p1]
    for _ in range(14):
        row.append(_add(row[-1], p1))
    q = _IDENTITY
    for shift in range(252, -1, -4):
        q = _double(_double(_double(_double(q))))
        nib = (k >> shift) & 15
        if nib:
            q = _add(q, row[nib])
    return q


def check(public_key: bytes, message: bytes, signature: bytes) -> None:
    """Verify an Ed25519 signature, raising :class:`InvalidSignature` with
    the reason when it does not verify (see the module's rules)."""
    if not isinstance(public_key, (bytes, bytearray)) or len(public_key) != 32:
        raise InvalidSignature(LENGTH, "key", "the public key is not 32 bytes")
    if not isinstance(signature, (bytes, bytearray)) or len(signature) != 64:
        raise InvalidSignature(LENGTH, "signature", "the signature is not 64 bytes")
    public_key, signature = bytes(public_key), bytes(signature)
    r_bytes = signature[:32]
    s = int.from_bytes(signature[32:], "little")
    if s >= L:
        raise InvalidSignature(S_NOT_CANONICAL, "S", "S is not below the group order L")
    a = _decode(public_key, "key")
    if _small_order(a):
        raise InvalidSignature(SMALL_ORDER, "key", "the public key is a point of small order")
    r = _decode(r_bytes, "R")
    if _small_order(r):
        raise InvalidSignature(SMALL_ORDER, "R", "R is a point of small order")
    k = int.from_bytes(hashlib.sha512(r_bytes + public_key + bytes(message)).digest(), "little") % L
    got = _add(_mul_base(s), _mul(k, _neg(a)))
    if _encode(got) != r_bytes:
        raise InvalidSignature(MISMATCH, "equation", "the signature does not verify: [S]B ≠ R + [k]A")


def verify(public_key: bytes, message: bytes, signature: bytes) -> bool:
    """Report whether signature is a valid Ed25519 signature of message by
    public_key, under the module's rules."""
    try:
        check(public_key, message, signature)
    except InvalidSignature:
        return False
    return True
