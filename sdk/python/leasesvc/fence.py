"""Verify leasesvc's fencing proofs and keep a sink fenced (docs/contract.md
§17, docs/fencing.md), standard library only.

A holding of a lease comes with a **proof** (``Lease.proof``): a compact JWS
(RFC 7515) signed with EdDSA over Ed25519 (RFC 8037) by the service, over
the lease name, the fencing token, the holder, the principal, the issue
time and the issuer, naming its key with ``kid``. It states "leasesvc
issued token N of lease L to this holder" and carries no expiry: ordering,
not time, fences. The holder sends it with every write (the
``Leasesvc-Fence`` header to an HTTP sink); the sink checks it here:

* :class:`Verifier` checks a proof against the service's public keys: a
  :class:`RemoteKeys` fetching ``/.well-known/jwks.json`` when a ``kid`` it
  does not know comes (at most once per 10 s) and forgetting a key the
  JWKS has not listed for 10 min (the service lists a key for its retention
  after its instance ended), or :class:`StaticKeys` from a saved JWKS
  (:func:`parse_jwks`) for a sink without network;
* :class:`Guard` keeps the highest token it admitted per lease and refuses
  a lower one, so a deposed holder's late writes stop at the sink;
* :meth:`Guard.check_headers` reads the header from any server's headers
  (a mapping, a WSGI environ or ASGI's list of byte pairs).

Every refusal is a :class:`FenceError` whose ``reason`` is stable
(``missing``, ``malformed``, ``bad_signature``, ``unknown_key``,
``wrong_issuer``, ``other_lease``, ``stale``, ``keys_unavailable``) and
whose ``status`` is the HTTP status a sink answers, as Go's
``fence.Status``: 401, 403, 409 or 503.

Example (any WSGI app)::

    from leasesvc import fence

    guard = fence.Guard(fence.Verifier(fence.RemoteKeys("https://leasesvc.example/.well-known/jwks.json")))

    def app(environ, start_response):
        try:
            claims = guard.check_headers(environ, "orders")
        except fence.FenceError as e:
            start_response(f"{e.status} Refused", [("Content-Type", "text/plain")])
            return [str(e).encode()]
        ...  # write, fenced by claims.fencing_token

A Guard's memory is its process's: a restarted sink admits a deposed
holder again until the next holder writes. Data that outlives the process
stores the token with it, in the same transaction (docs/fencing.md).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, Mapping, Optional, Tuple, Union

from . import _ed25519

__all__ = [
    "HEADER", "TYPE", "DEFAULT_REFETCH", "DEFAULT_MAX_AGE", "Claims", "FenceError", "MissingProofError",
    "MalformedProofError",
    "SignatureError", "UnknownKeyError", "IssuerError", "OtherLeaseError", "StaleTokenError",
    "KeysUnavailableError", "Keys", "StaticKeys", "RemoteKeys", "parse_jwks", "key_id", "Verifier", "Guard",
    "verify", "proof_from_headers",
]

#: The HTTP request header that carries a proof to a sink.
HEADER = "Leasesvc-Fence"
#: The JWS ``typ`` of a proof.
TYPE = "leasesvc-fence+jwt"
#: The least time between two JWKS fetches of a :class:`RemoteKeys`, seconds.
DEFAULT_REFETCH = 10.0
#: How long a :class:`RemoteKeys` answers a key from memory after the last
#: fetch that listed it, seconds (Go's ``fence.DefaultMaxAge``).
DEFAULT_MAX_AGE = 600.0
#: The longest proof read, bytes.
MAX_PROOF = 4096
#: The largest JWKS document read, bytes.
MAX_JWKS = 1 << 20
_MAX_INT64 = 2**63 - 1


@dataclass(frozen=True)
class Claims:
    """What a proof states: the service ``issuer`` issued fencing token
    ``fencing_token`` of lease ``lease`` to ``holder``."""

    lease: str
    fencing_token: int
    holder: str
    #: The authenticated caller that acquired; "" with authentication off.
    principal: str = ""
    #: The holding's acquire time, Unix seconds (the JWT ``iat``).
    issued_at: int = 0
    #: The service's name (the JWT ``iss``, LEASESVC_PROOF_ISSUER).
    issuer: str = ""


class FenceError(Exception):
    """A proof refused. ``reason`` is a stable code, ``status`` the HTTP
    status a sink answers; the message says why, and may be shown to the
    caller."""

    reason = "refused"
    status = 403

    def __str__(self) -> str:
        return f"fence: {self.reason}: {super().__str__()}"


class MissingProofError(FenceError):
    """The request carries no proof."""

    reason, status = "missing", 401


class MalformedProofError(FenceError):
    """Not a compact JWS of a proof's form: a bare number, a truncated or
    re-encoded token (a part that is not the one canonical base64url
    encoding of its bytes, such as a last character whose unused low bits
    are set), another ``alg`` (``none`` included)."""

    reason = "malformed"


class SignatureError(FenceError):
    """The signature does not verify with the key ``kid`` names: the proof
    was forged or altered."""

    reason = "bad_signature"


class UnknownKeyError(FenceError):
    """No key of the service has the proof's ``kid`` (after a refetch, when
    the keys can be refetched): a key it never listed, or no longer lists
    (its retention ended)."""

    reason = "unknown_key"


class IssuerError(FenceError):
    """The proof was issued by another service than the one expected."""

    reason = "wrong_issuer"


class OtherLeaseError(FenceError):
    """The proof is for another lease than the one that fences the write."""

    reason = "other_lease"


class StaleTokenError(FenceError):
    """A higher fencing token of the lease was admitted: the proof's holder
    was deposed."""

    reason, status = "stale", 409


class KeysUnavailableError(FenceError):
    """The service's keys could not be read (network, status, bad JWKS): not
    a verdict on the proof; a sink answers it as unavailable."""

    reason, status = "keys_unavailable", 503


# ---------------------------------------------------------------------------
# Keys

_B64 = re.compile(r"^[A-Za-z0-9_-]*$")


def _b64decode(s: str) -> bytes:
    """Decode unpadded base64url (RFC 7515 §2), refusing other alphabets,
    padding, impossible lengths and every encoding but the canonical one:
    a last character whose unused low bits are not zero decodes to the same
    bytes as the canonical one (RFC 4648 §3.5), so it is refused, as a
    re-encoded token."""
    if not _B64.match(s) or len(s) % 4 == 1:
        raise ValueError("not unpadded base64url")
    b = base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))
    if _b64encode(b) != s:
        raise ValueError("not the canonical base64url encoding (unused bits of the last character are set)")
    return b


def _b64encode(b: bytes) -> str:
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode("ascii")


def key_id(public_key: bytes) -> str:
    """The kid of an Ed25519 public key: its RFC 7638 JWK thumbprint
    (SHA-256, base64url), as the service names its keys."""
    canon = '{"crv":"Ed25519","kty":"OKP","x":"' + _b64encode(public_key) + '"}'
    return _b64encode(hashlib.sha256(canon.encode("ascii")).digest())


class Keys:
    """Finds the public key a proof names. Subclasses implement
    :meth:`key`; they must be safe to call from several threads."""

    def key(self, kid: str) -> bytes:
        """The 32-byte Ed25519 key under kid; raises
        :class:`UnknownKeyError` when there is none, and
        :class:`KeysUnavailableError` when the keys could not be read."""
        raise NotImplementedError


class StaticKeys(Keys):
    """A fixed key set, for a sink without network: give it the service's
    JWKS (``leasectl fence jwks > jwks.json``) through :func:`parse_jwks`."""

    def __init__(self, keys: Optional[Mapping[str, bytes]] = None) -> None:
        self.keys: Dict[str, bytes] = dict(keys or {})

    def key(self, kid: str) -> bytes:
        try:
            return self.keys[kid]
        except KeyError:
            raise UnknownKeyError(f"{kid!r} is not in the static key set") from None

    def __len__(self) -> int:
        return len(self.keys)


def _jwk_key(k: Mapping[str, Any]) -> bytes:
    kid = k.get("kid")
    if k.get("alg") not in (None, "", "EdDSA"):
        raise ValueError(f"key {kid!r}: alg {k.get('alg')!r}, want EdDSA")
    x = k.get("x")
    try:
        pub = _b64decode(x) if isinstance(x, str) else b""
    except ValueError:
        pub = b""
    if len(pub) != 32:
        raise ValueError(f"key {kid!r}: x is not 32 base64url bytes")
    if key_id(pub) != kid:
        raise ValueError(f"key {kid!r}: kid is not the key's RFC 7638 thumbprint")
    return pub


def parse_jwks(data: Union[bytes, str, Mapping[str, Any]]) -> StaticKeys:
    """Read a JWKS document (RFC 7517 §5; bytes, text or already decoded)
    into a :class:`StaticKeys`. Keys of other types are left out (RFC 7517
    §5: ignored); an Ed25519 key that is malformed, or whose kid is not its
    thumbprint, raises ``ValueError``, as Go's ``fence.ParseJWKS``."""
    if isinstance(data, (bytes, bytearray, str)):
        try:
            doc = json.loads(data)
        except ValueError as e:
            raise ValueError(f"fence: read JWKS: {e}") from None
    else:
        doc = data
    if not isinstance(doc, Mapping) or not isinstance(doc.get("keys", []), list):
        raise ValueError("fence: read JWKS: not an object with a keys array")
    keys: Dict[str, bytes] = {}
    for k in doc.get("keys") or []:
        if not isinstance(k, Mapping) or k.get("kty") != "OKP" or k.get("crv") != "Ed25519":
            continue
        try:
            keys[str(k.get("kid"))] = _jwk_key(k)
        except ValueError as e:
            raise ValueError(f"fence: {e}") from None
    return StaticKeys(keys)


class RemoteKeys(Keys):
    """The service's JWKS, fetched from ``url`` (its
    ``/.well-known/jwks.json``) when a kid it does not know comes, at most
    once per ``refetch`` seconds: a flood of proofs under invented kids
    costs the service one fetch per ``refetch``. The fetch names the kid
    (``?kid=``), so an instance that does not list the key yet reads the
    backend first.

    A key is answered from memory for ``max_age`` seconds after the last
    fetch that listed it; a proof under an older one fetches again (within
    the same rate limit), and a key the JWKS has not listed for
    ``max_age`` is forgotten: the service stops listing a key when its
    retention ends (``LEASESVC_PROOF_KEY_RETENTION``, docs/fencing.md), so
    a long-running sink answers ``unknown_key`` for it at most ``max_age``
    (and one ``refetch``) later, as a sink that never fetched it does.
    While the JWKS cannot be fetched, the keys already known are still
    answered: only a fetch that answers forgets. (As Go's
    ``fence.RemoteKeys`` with its ``MaxAge``.)

    ``clock`` (monotonic seconds) is the rate limit's and ``max_age``'s;
    ``timeout`` bounds a fetch, seconds; ``headers`` are added to the
    request."""

    def __init__(self, url: str, *, refetch: float = DEFAULT_REFETCH, timeout: float = 10.0,
                 clock: Callable[[], float] = time.monotonic, headers: Optional[Mapping[str, str]] = None,
                 max_age: float = DEFAULT_MAX_AGE) -> None:
        self.url = url
        self.refetch = refetch if refetch > 0 else DEFAULT_REFETCH
        self.max_age = max_age if max_age > 0 else DEFAULT_MAX_AGE
        self.timeout = timeout
        self.clock = clock
        self.headers = dict(headers or {})
        self._keys: Dict[str, Tuple[bytes, float]] = {}  # kid → (key, when a fetch last listed it)
        self._fetched: Optional[float] = None  # last fetch attempt
        self._failed = False  # the last fetch attempt failed
        self._lock = threading.Lock()

    def key(self, kid: str) -> bytes:
        with self._lock:
            now = self.clock()
            known = self._keys.get(kid)
            if known is not None and now - known[1] < self.max_age:
                return known[0]
            if self._fetched is not None and now - self._fetched < self.refetch:
                if known is not None and (self._failed or known[1] == self._fetched):
                    # the JWKS is unreadable (answer what is known), or the
                    # last fetch listed the key (max_age < refetch)
                    return known[0]
                if known is not None:
                    del self._keys[kid]
                    raise UnknownKeyError(f"{kid!r} was last listed in the service's JWKS {now - known[1]:.3f} s ago "
                                          f"({self.url})")
                raise UnknownKeyError(f"{kid!r} is not in the JWKS fetched {now - self._fetched:.3f} s ago "
                                      f"(refetched at most every {self.refetch:g} s)")
            self._fetched = now
            try:
                got = self._fetch(kid).keys
            except KeysUnavailableError:
                self._failed = True
                if known is not None:
                    return known[0]  # no verdict on a key listed before
                raise
            self._failed = False
            for k, pub in got.items():
                self._keys[k] = (pub, now)
            for k in [k for k, (_, listed) in self._keys.items() if now - listed >= self.max_age]:
                del self._keys[k]  # not listed now, nor for max_age: its retention ended
            found = self._keys.get(kid)
            if found is not None:
                return found[0]
            if known is not None:
                raise UnknownKeyError(f"{kid!r} is no longer in the service's JWKS ({self.url}): its retention ended")
            raise UnknownKeyError(f"{kid!r} is not in the service's JWKS ({self.url})")

    def _fetch(self, kid: str) -> StaticKeys:
        parts = urllib.parse.urlsplit(self.url)
        query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
        query = [(n, v) for n, v in query if n != "kid"] + [("kid", kid)]
        url = urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))
        req = urllib.request.Request(url, headers={"Accept": "application/json", **self.headers})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                body = resp.read(MAX_JWKS + 1)
        except urllib.error.HTTPError as e:
            raise KeysUnavailableError(f"fetch JWKS {self.url}: status {e.code}") from None
        except (OSError, ValueError) as e:
            raise KeysUnavailableError(f"fetch JWKS {self.url}: {e}") from None
        if len(body) > MAX_JWKS:
            raise KeysUnavailableError(f"JWKS {self.url} is larger than {MAX_JWKS} bytes")
        try:
            return parse_jwks(body)
        except ValueError as e:
            raise KeysUnavailableError(f"JWKS {self.url}: {e}") from None


# ---------------------------------------------------------------------------
# Verifying

def _strict_str(d: Mapping[str, Any], name: str, where: str) -> str:
    v = d.get(name)
    if v is None:
        return ""
    if not isinstance(v, str):
        raise MalformedProofError(f"{where}: {name} is not a string")
    return v


def _strict_int(d: Mapping[str, Any], name: str) -> int:
    v = d.get(name)
    if v is None:
        return 0
    if isinstance(v, bool) or not isinstance(v, int) or not -_MAX_INT64 - 1 <= v <= _MAX_INT64:
        raise MalformedProofError(f"payload: {name} is not a 64-bit integer")
    return v


def _parse(proof: Any) -> Tuple[str, Claims, bytes, bytes]:
    """Split and decode a proof, checking its form only: (kid, claims,
    signed bytes, signature)."""
    if not isinstance(proof, str):
        raise MalformedProofError(f"a proof is a string, not {type(proof).__name__} (a bare token is no proof)")
    if len(proof.encode("utf-8", "surrogatepass")) > MAX_PROOF:
        raise MalformedProofError(f"longer than {MAX_PROOF} bytes")
    parts = proof.split(".")
    if len(parts) != 3:
        raise MalformedProofError("not a compact JWS (three base64url parts joined by dots)")
    h64, p64, s64 = parts
    try:
        header = json.loads(_b64decode(h64).decode("utf-8"))
    except ValueError as e:
        raise MalformedProofError(f"header: {e}") from None
    if not isinstance(header, dict):
        raise MalformedProofError("header: not a JSON object")
    extra = set(header) - {"alg", "kid", "typ"}
    if extra:
        raise MalformedProofError(f"header: unknown member {sorted(extra)[0]!r}")
    alg, kid, typ = (_strict_str(header, n, "header") for n in ("alg", "kid", "typ"))
    if alg != "EdDSA" or typ != TYPE or not kid:
        raise MalformedProofError(f"header must have alg EdDSA, typ {TYPE} and a kid (got alg {alg!r}, typ {typ!r})")
    try:
        payload = json.loads(_b64decode(p64).decode("utf-8"))
    except ValueError as e:
        raise MalformedProofError(f"payload: {e}") from None
    if not isinstance(payload, dict):
        raise MalformedProofError("payload: not a JSON object")
    claims = Claims(  # members added later are let through
        lease=_strict_str(payload, "lease", "payload"),
        fencing_token=_strict_int(payload, "fencingToken"),
        holder=_strict_str(payload, "holder", "payload"),
        principal=_strict_str(payload, "principal", "payload"),
        issued_at=_strict_int(payload, "iat"),
        issuer=_strict_str(payload, "iss", "payload"),
    )
    if not claims.lease or claims.fencing_token < 1 or not claims.holder:
        raise MalformedProofError("payload must name a lease, a holder and a fencing token ≥ 1")
    try:
        sig = _b64decode(s64)
    except ValueError:
        sig = b""
    if len(sig) != 64:
        raise MalformedProofError("signature is not 64 base64url bytes")
    return kid, claims, (h64 + "." + p64).encode("ascii"), sig


class Verifier:
    """Checks proofs against the service's keys. A non-empty ``issuer`` is
    the service's name (``LEASESVC_PROOF_ISSUER``, default ``leasesvc``)
    every proof must carry; "" accepts any."""

    def __init__(self, keys: Keys, issuer: str = "leasesvc") -> None:
        if keys is None:
            raise ValueError("fence: Verifier: keys is None")
        self.keys = keys
        self.issuer = issuer

    def verify(self, proof: str) -> Claims:
        """Check that proof was signed by one of the service's keys and
        return its claims; raises :class:`MalformedProofError`,
        :class:`UnknownKeyError`, :class:`SignatureError`,
        :class:`IssuerError` or :class:`KeysUnavailableError`."""
        kid, claims, signed, sig = _parse(proof)
        key = self.keys.key(kid)
        try:
            _ed25519.check(key, signed, sig)
        except _ed25519.InvalidSignature as e:
            raise SignatureError(f"the proof of lease {claims.lease!r} token {claims.fencing_token} does not verify "
                                 f"with key {kid!r} ({e.reason}: {e.part})") from None
        if self.issuer and claims.issuer != self.issuer:
            raise IssuerError(f"issued by {claims.issuer!r}, want {self.issuer!r}")
        return claims


def verify(proof: str, keys: Keys, issuer: str = "leasesvc") -> Claims:
    """``Verifier(keys, issuer).verify(proof)``."""
    return Verifier(keys, issuer).verify(proof)


HeadersLike = Union[Mapping[str, Any], Iterable[Tuple[Any, Any]]]


def _text(v: Any) -> str:
    return v.decode("latin-1") if isinstance(v, (bytes, bytearray)) else str(v)


def proof_from_headers(headers: HeadersLike) -> str:
    """The ``Leasesvc-Fence`` header's value, "" when absent, from any
    server's request headers: a mapping of names to values (matched without
    regard to case; ``http.server``'s, Flask's, Starlette's), a WSGI
    environ (``HTTP_LEASESVC_FENCE``), or an iterable of (name, value)
    pairs, bytes or text (an ASGI scope's ``headers``). The first value is
    taken, as Go's ``Header.Get``."""
    want = HEADER.lower()
    items: Iterable[Tuple[Any, Any]]
    if hasattr(headers, "items") and hasattr(headers, "get"):  # a mapping, an email.message.Message
        m: Any = headers
        for name in ("HTTP_LEASESVC_FENCE", HEADER, want):
            v = m.get(name)
            if v:
                return _text(v).strip()
        items = m.items()
    else:
        items = headers  # type: ignore[assignment]
    for name, v in items:
        if _text(name).lower() == want:
            return _text(v).strip()
    return ""


class Guard:
    """Keeps the highest fencing token it admitted per lease and refuses a
    proof with a lower one: the writes of a deposed holder stop at the
    sink. An equal token is admitted (one holder writes many times).
    Thread-safe; its memory is the process's."""

    def __init__(self, verifier: Verifier) -> None:
        self.verifier = verifier
        self._high: Dict[str, int] = {}
        self._lock = threading.Lock()

    def check(self, lease: str, proof: str) -> Claims:
        """Verify proof, require it to be for ``lease``, and admit it if its
        token is at least the highest admitted for the lease, which it then
        becomes. Raises a :class:`FenceError`: the verifier's, or
        :class:`OtherLeaseError`, :class:`StaleTokenError`."""
        if not proof:
            raise MissingProofError(f"send the holding's proof in the {HEADER} header")
        c = self.verifier.verify(proof)
        if c.lease != lease:
            raise OtherLeaseError(f"the proof is for {c.lease!r}, the write for {lease!r}")
        with self._lock:
            high = self._high.get(lease, 0)
            if c.fencing_token < high:
                raise StaleTokenError(f"token {c.fencing_token} of lease {lease!r}, but token {high} has written")
            self._high[lease] = c.fencing_token
        return c

    def check_headers(self, headers: HeadersLike, lease: str) -> Claims:
        """:meth:`check` of the proof in the request's ``Leasesvc-Fence``
        header (:func:`proof_from_headers`); :class:`MissingProofError`
        (401) without one. Refusals carry ``status`` for the answer."""
        return self.check(lease, proof_from_headers(headers))

    def highest(self, lease: str) -> int:
        """The highest token admitted for lease; 0 if none."""
        with self._lock:
            return self._high.get(lease, 0)
