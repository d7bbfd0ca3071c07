#!/usr/bin/env bash
# Runs every test of leasesvc: unit and conformance tests, the fuzz seed
# corpus, the real binary over HTTP, and the emulator tests, which start the
# gcloud emulators they need themselves (see emulator-tests/emulators).
set -euo pipefail
cd "$(dirname "$0")"
exec go test -race -timeout 30m -count=1 "$@" ./...
