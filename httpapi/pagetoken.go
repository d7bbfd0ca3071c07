package httpapi

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"fmt"
)

// PageTokenKeySize is the size of Config.PageTokenKey: an AES-256 key.
const PageTokenKeySize = 32

// pageTokenAEAD returns the cipher that seals page tokens: key, or a random
// key when key is nil.
func pageTokenAEAD(key []byte) (cipher.AEAD, error) {
	if key == nil {
		key = make([]byte, PageTokenKeySize)
		_, _ = rand.Read(key) // crypto/rand.Read never fails
	}
	if len(key) != PageTokenKeySize {
		return nil, fmt.Errorf("httpapi: Config.PageTokenKey has %d bytes, want %d", len(key), PageTokenKeySize)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("httpapi: page token key: %w", err)
	}
	return cipher.NewGCM(block)
}

// pageTokenBinding is the additional data a page token is sealed with: the
// list it continues (prefix) and the caller it was given to (principal), so
// that neither can be changed without the token failing to open.
func pageTokenBinding(prefix, principal string) []byte {
	return []byte("leasesvc/list/v1\x00" + prefix + "\x00" + principal)
}

// pageTokenPlainSize is the size every page token's plaintext is padded to
// before it is sealed, so that every token has the same length whatever
// name it continues after: the Manager's token is base64 of at most
// 3 + 2×lease.MaxNameLen + 1 bytes (348 characters).
const pageTokenPlainSize = 384

// sealPageToken turns the Manager's page token into an opaque one: random
// nonce, then the AES-GCM sealed token padded with zero bytes to
// pageTokenPlainSize, base64url. It reveals nothing of the names listed,
// not even their length, and opens only for the same prefix and principal.
func (a *api) sealPageToken(inner, prefix, principal string) string {
	if inner == "" {
		return ""
	}
	plain := make([]byte, max(pageTokenPlainSize, len(inner)))
	copy(plain, inner) // the Manager's token is base64: no zero byte in it
	nonce := make([]byte, a.tokens.NonceSize(), a.tokens.NonceSize()+len(plain)+a.tokens.Overhead())
	_, _ = rand.Read(nonce)
	return base64.RawURLEncoding.EncodeToString(a.tokens.Seal(nonce, nonce, plain, pageTokenBinding(prefix, principal)))
}

// openPageToken returns the Manager's page token inside tok; ok is false for
// a token that was altered, made by an instance with another key, or given
// for another prefix or principal.
func (a *api) openPageToken(tok, prefix, principal string) (inner string, ok bool) {
	if tok == "" {
		return "", true
	}
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil || len(raw) < a.tokens.NonceSize()+a.tokens.Overhead() {
		return "", false
	}
	n := a.tokens.NonceSize()
	plain, err := a.tokens.Open(nil, raw[:n], raw[n:], pageTokenBinding(prefix, principal))
	if err != nil {
		return "", false
	}
	return string(bytes.TrimRight(plain, "\x00")), true
}
