// Package fence verifies leasesvc's fencing proofs and keeps sinks fenced
// (docs/contract.md §17; docs/fencing.md).
//
// A holding of a lease comes with a proof: a compact JWS (RFC 7515) signed
// with EdDSA over Ed25519 (RFC 8037) by the leasesvc instance that granted
// it, over the lease name, the fencing token, the holder, the principal, the
// issue time and the issuer, with the key id (kid) of the signing key. A
// Verifier checks a proof against the service's public keys (a Keys: the
// JWKS at /.well-known/jwks.json, fetched and cached by RemoteKeys, or a
// static set for a sink without network); a Guard keeps the highest token
// it has verified per lease and refuses a lower one, so the writes of a
// deposed holder stop at the sink; Guard.Middleware does so for a net/http
// handler reading the Leasesvc-Fence request header.
//
// # What a proof proves
//
// "leasesvc issued fencing token N of lease L to this holder". It carries
// no expiry: ordering, not time, fences. A proof lets its bearer write to a
// sink as the leader until a higher token reaches that sink, so the service
// returns it only to the holder that acquired, and a holder must treat it
// as a secret.
//
// # Limits
//
// A Guard's memory is its process's: a sink that restarts forgets the
// highest token it saw, and a deposed holder's proof passes again until
// the next holder writes. Sinks whose data outlives the process store the
// token with the data, in the same transaction (the pgfence,
// firestorefence and spannerfence helpers; docs/fencing.md).
//
// The verifier trusts the JWKS it is given: whoever can serve a JWKS to a
// RemoteKeys (the service's URL, over TLS) can mint proofs. Keys are never
// revoked before their retention ends (docs/security.md).
package fence
