"""Write fence/testdata/ed25519_vectors.json, the Ed25519 vectors the project
keeps for its three languages (docs/contract.md §17): RFC 8032 §7.1's
tests, and edge cases every verifier of proofs must reject alike.

Run from sdk/python: ``python3 -m tests.gen_ed25519_vectors``. The output
is deterministic (no randomness); the file is committed, and the tests
check it against leasesvc._ed25519. The edge cases that a lax verifier
would accept are built to verify under RFC 8032's cofactorless (or
cofactored) equation, so a verifier that skips a rule fails the vector,
rather than passing it by accident through a mismatch.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from typing import Any, Dict, List, Tuple

from leasesvc import _ed25519 as ed

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fence", "testdata", "ed25519_vectors.json")

# RFC 8032 §7.1, typed in from the RFC (TEST 1024's message is 1023 bytes).
_MSG_1024 = (
    "08b8b2b733424243760fe426a4b54908632110a66c2f6591eabd3345e3e4eb98"
    "fa6e264bf09efe12ee50f8f54e9f77b1e355f6c50544e23fb1433ddf73be84d8"
    "79de7c0046dc4996d9e773f4bc9efe5738829adb26c81b37c93a1b270b20329d"
    "658675fc6ea534e0810a4432826bf58c941efb65d57a338bbd2e26640f89ffbc"
    "1a858efcb8550ee3a5e1998bd177e93a7363c344fe6b199ee5d02e82d522c4fe"
    "ba15452f80288a821a579116ec6dad2b3b310da903401aa62100ab5d1a36553e"
    "06203b33890cc9b832f79ef80560ccb9a39ce767967ed628c6ad573cb116dbef"
    "efd75499da96bd68a8a97b928a8bbc103b6621fcde2beca1231d206be6cd9ec7"
    "aff6f6c94fcd7204ed3455c68c83f4a41da4af2b74ef5c53f1d8ac70bdcb7ed1"
    "85ce81bd84359d44254d95629e9855a94a7c1958d1f8ada5d0532ed8a5aa3fb2"
    "d17ba70eb6248e594e1a2297acbbb39d502f1a8c6eb6f1ce22b3de1a1f40cc24"
    "554119a831a9aad6079cad88425de6bde1a9187ebb6092cf67bf2b13fd65f270"
    "88d78b7e883c8759d2c4f5c65adb7553878ad575f9fad878e80a0c9ba63bcbcc"
    "2732e69485bbc9c90bfbd62481d9089beccf80cfe2df16a2cf65bd92dd597b07"
    "07e0917af48bbb75fed413d238f5555a7a569d80c3414a8d0859dc65a46128ba"
    "b27af87a71314f318c782b23ebfe808b82b0ce26401d2e22f04d83d1255dc51a"
    "ddd3b75a2b1ae0784504df543af8969be3ea7082ff7fc9888c144da2af58429e"
    "c96031dbcad3dad9af0dcbaaaf268cb8fcffead94f3c7ca495e056a9b47acdb7"
    "51fb73e666c6c655ade8297297d07ad1ba5e43f1bca32301651339e22904cc8c"
    "42f58c30c04aafdb038dda0847dd988dcda6f3bfd15c4b4c4525004aa06eeff8"
    "ca61783aacec57fb3d1f92b0fe2fd1a85f6724517b65e614ad6808d6f6ee34df"
    "f7310fdc82aebfd904b01e1dc54b2927094b2db68d6f903b68401adebf5a7e08"
    "d78ff4ef5d63653a65040cf9bfd4aca7984a74d37145986780fc0b16ac451649"
    "de6188a7dbdf191f64b5fc5e2ab47b57f7f7276cd419c17a3ca8e1b939ae49e4"
    "88acba6b965610b5480109c8b17b80e1b7b750dfc7598d5d5011fd2dcc5600a3"
    "2ef5b52a1ecc820e308aa342721aac0943bf6686b64b2579376504ccc493d97e"
    "6aed3fb0f9cd71a43dd497f01f17c0e2cb3797aa2a2f256656168e6c496afc5f"
    "b93246f6b1116398a346f1a641f3b041e989f7914f90cc2c7fff357876e506b5"
    "0d334ba77c225bc307ba537152f3f1610e4eafe595f6d9d90d11faa933a15ef1"
    "369546868a7f3a45a96768d40fd9d03412c091c6315cf4fde7cb68606937380d"
    "b2eaaa707b4c4185c32eddcdd306705e4dc1ffc872eeee475a64dfac86aba41c"
    "0618983f8741c5ef68d3a101e8a3b8cac60c905c15fc910840b94c00a0b9d0"
)

RFC8032: List[Dict[str, str]] = [
    {
        "name": "TEST 1",
        "secret_key": "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
        "public_key": "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
        "message": "",
        "signature": "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e06522490155"
                     "5fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b",
    },
    {
        "name": "TEST 2",
        "secret_key": "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
        "public_key": "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c",
        "message": "72",
        "signature": "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da"
                     "085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00",
    },
    {
        "name": "TEST 3",
        "secret_key": "c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7",
        "public_key": "fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025",
        "message": "af82",
        "signature": "6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac"
                     "18ff9b538d16f290ae67f760984dc6594a7c15e9716ed28dc027beceea1ec40a",
    },
    {
        "name": "TEST 1024",
        "secret_key": "f5e5767cf153319517630f226876b86c8160cc583bc013744c6bf255f5cc0ee5",
        "public_key": "278117fc144c72340f67d0f2316e8386ceffbf2b2428c9c51fef7c597f1d426e",
        "message": _MSG_1024,
        "signature": "0aab4c900501b3e24d7cdf4663326a3a87df5e4843b2cbdb67cbf6e460fec350"
                     "aa5371b1508f9f4528ecea23c436d94b5e8fcd4f681e30a6ac00a9704a188a03",
    },
    {
        "name": "TEST SHA(abc)",
        "secret_key": "833fe62409237b9d62ec77587520911e9a759cec1d19755b7da901b96dca3d42",
        "public_key": "ec172b93ad5e563bf4932c70e1245034c35467ef2efd4d64ebf819683467e2bf",
        "message": "ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a"
                   "2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f",
        "signature": "dc2a4459e7369633a52b1bf277839a00201009a3efbf3ecb69bea2186c26b589"
                     "09351fc9ac90b3ecfdfbc7c66431e0303dca179c138ac17ad9bef1177331a704",
    },
]


def _secret_scalar(seed: bytes) -> int:
    """The clamped secret scalar a of an RFC 8032 secret key (§5.1.5)."""
    h = bytearray(hashlib.sha512(seed).digest()[:32])
    h[0] &= 248
    h[31] &= 127
    h[31] |= 64
    return int.from_bytes(h, "little")


def _k(r: bytes, a: bytes, m: bytes) -> int:
    return int.from_bytes(hashlib.sha512(r + a + m).digest(), "little") % ed.L


def _s(n: int) -> bytes:
    return n.to_bytes(32, "little")


def _small_order_points() -> List[Tuple[str, bytes]]:
    """The canonical encodings of the 8 points of small order, found as
    the points [j]T (j < 8) of a point T of order 8."""
    # T = [L]Q for a point Q of the curve: [L]Q is in the torsion subgroup;
    # the first Q whose [L]Q has order 8 gives all eight.
    pt = None
    for y in range(2, 1000):
        if not _off_curve(y):
            t = ed._mul(ed.L, ed._decode(_s(y), "Q"))
            if _order(t) == 8:
                pt = t
                break
    assert pt is not None
    out = []
    q: ed.Point = ed._IDENTITY
    for j in range(8):
        out.append((f"order{_order(q)}_{j}", ed._encode(q)))
        q = ed._add(q, pt)
    return out


def _order(q: ed.Point) -> int:
    for n in (1, 2, 4, 8):
        if ed._encode(ed._mul(n, q)) == ed._encode(ed._IDENTITY):
            return n
    raise ValueError("not of small order")


def _lax_decode(b: bytes) -> ed.Point:
    """Decode as a lax verifier does: y reduced mod p, a negative zero x
    taken as 0."""
    n = int.from_bytes(b, "little")
    x, y, z, t = ed._decode(_s((n & ((1 << 255) - 1)) % ed.P), "A")
    if n >> 255 and x:
        x, t = ed.P - x, ed.P - t
    return (x, y, z, t)


def _lax_sig_for_small_a(a_bytes: bytes, msg: bytes) -> bytes:
    """A signature that a verifier without the small-order rule accepts
    under the cofactorless equation, for the small-order key a_bytes:
    R = [S]B − [j]A with j guessed for k mod 8 until the guess holds."""
    a_pt = _lax_decode(a_bytes)
    s = 1234567
    while True:
        for j in range(8):
            r = ed._encode(ed._add(ed._mul_base(s), ed._neg(ed._mul(j, a_pt))))
            if ed._encode(ed._mul(_k(r, a_bytes, msg) % 8, a_pt)) == ed._encode(ed._mul(j, a_pt)):
                return r + _s(s)
        s += 1


def build() -> Dict[str, Any]:
    """The document."""
    t1 = RFC8032[0]
    pk1 = bytes.fromhex(t1["public_key"])
    sig1 = bytes.fromhex(t1["signature"])
    r1, s1 = sig1[:32], int.from_bytes(sig1[32:], "little")
    a1 = _secret_scalar(bytes.fromhex(t1["secret_key"]))
    msg = b"leasesvc fence vector"
    p = ed.P
    vectors: List[Dict[str, Any]] = []

    def add(name: str, pk: bytes, m: bytes, sig: bytes, reason: str, why: str) -> None:
        vectors.append({"name": name, "public_key": pk.hex(), "message": m.hex(), "signature": sig.hex(),
                        "valid": reason == "", "reason": reason, "why": why})

    add("rfc_test1", pk1, b"", sig1, "", "RFC 8032 TEST 1, unchanged: the control")
    # Lengths.
    add("key_31_bytes", pk1[:31], b"", sig1, "length", "public key shorter than 32 bytes")
    add("key_33_bytes", pk1 + b"\0", b"", sig1, "length", "public key longer than 32 bytes")
    add("sig_63_bytes", pk1, b"", sig1[:63], "length", "signature shorter than 64 bytes")
    add("sig_65_bytes", pk1, b"", sig1 + b"\0", "length", "signature longer than 64 bytes")
    add("sig_empty", pk1, b"", b"", "length", "empty signature")
    # S ≥ L.
    add("s_plus_l", pk1, b"", r1 + _s(s1 + ed.L), "s_not_canonical",
        "TEST 1 with S + L: verifies if S is reduced mod L (malleability)")
    add("s_equals_l", pk1, b"", r1 + _s(ed.L), "s_not_canonical", "S = L")
    add("s_all_ones", pk1, b"", r1 + b"\xff" * 32, "s_not_canonical", "S = 2^256 − 1")
    # Mismatches.
    add("wrong_message", pk1, b"x", sig1, "mismatch", "TEST 1's signature over another message")
    bad = bytearray(sig1)
    bad[32] ^= 1
    add("s_bit_flipped", pk1, b"", bytes(bad), "mismatch", "TEST 1 with the low bit of S flipped")
    pk2 = bytes.fromhex(RFC8032[1]["public_key"])
    add("other_key", pk2, b"", sig1, "mismatch", "TEST 1's signature checked with TEST 2's key")
    # Points not on the curve.
    off = next(y for y in range(2, 100) if _off_curve(y))
    add("key_not_on_curve", _s(off), b"", sig1, "not_on_curve", f"key y = {off}: no x on the curve")
    add("r_not_on_curve", pk1, b"", _s(off) + sig1[32:], "not_on_curve", f"R y = {off}: no x on the curve")
    # Non-canonical encodings.
    nc_id = _s(p + 1)  # y = p + 1 ≡ 1: the identity, encoded with y ≥ p
    add("key_noncanonical_identity", nc_id, msg, _lax_sig_for_small_a(nc_id, msg), "non_canonical",
        "key y = p + 1 (the identity with y ≥ p); the signature verifies for a verifier that reduces y mod p")
    big = next(y for y in range(2, 19) if not _off_curve(y) and not _is_small(y))
    add("key_noncanonical_y", _s(p + big), b"", sig1, "non_canonical",
        f"key y = p + {big}, a point of large order encoded with y ≥ p")
    neg0 = _s(1 | (1 << 255))
    add("key_negative_zero", neg0, msg, _lax_sig_for_small_a(neg0, msg), "non_canonical",
        "key y = 1 with the sign bit set (x = 0 is never negative); verifies for a verifier that ignores it")
    r_nc = _s(p + 1)
    add("r_noncanonical_identity", pk1, msg, r_nc + _s(_k(r_nc, pk1, msg) * a1 % ed.L), "non_canonical",
        "R = the identity with y = p + 1, S = k·a: verifies if R is decoded and compared as a point")
    # Small order.
    for label, enc in _small_order_points():
        add(f"key_small_{label}", enc, msg, _lax_sig_for_small_a(enc, msg), "small_order",
            "small-order key; the signature verifies under the cofactorless equation for a verifier without the rule")
    for label, enc in _small_order_points():
        add(f"r_small_{label}", pk1, msg, enc + _s(_k(enc, pk1, msg) * a1 % ed.L), "small_order",
            "small-order R with S = k·a: verifies under the cofactored equation"
            + (" and the cofactorless one" if label.startswith("order1_") else ""))
    return {
        "description": "Ed25519 vectors for leasesvc's proof verifiers in Go, Python and TypeScript "
                       "(docs/contract.md §17). Hex strings. 'rfc8032': RFC 8032 §7.1's tests, all valid. "
                       "'vectors': valid is the expected answer; reason, when invalid, the first rule broken, "
                       "the rules checked in this order: length (key 32, signature 64 bytes), "
                       "s_not_canonical (S >= L), non_canonical (y >= p, or x = 0 with the sign bit), "
                       "not_on_curve, small_order (the key, then R, is one of the 8 points P with [8]P = O), "
                       "mismatch (the encoding of [S]B - [k]A is not R's bytes). "
                       "Go's crypto/ed25519.Verify alone accepts key_noncanonical_identity, key_negative_zero, "
                       "every key_small_* and r_small_order1_0 (it decodes y mod p and has no small-order rule): "
                       "a Go verifier needs these checks of its own. "
                       "Generated by sdk/python/tests/gen_ed25519_vectors.py.",
        "rfc8032": RFC8032,
        "vectors": vectors,
    }


def _off_curve(y: int) -> bool:
    try:
        ed._decode(_s(y), "y")
    except ed.InvalidSignature:
        return True
    return False


def _is_small(y: int) -> bool:
    return ed._small_order(ed._decode(_s(y), "y"))


def main() -> None:
    doc = build()
    text = json.dumps(doc, indent=1) + "\n"
    if len(sys.argv) > 1 and sys.argv[1] == "-check":
        with open(OUT) as f:
            if f.read() != text:
                sys.exit(f"{OUT} is not what the generator writes")
        return
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
