# leasesvc container images: static Go binaries on distroless, run as non-root.
#
#   docker build --build-arg VERSION="$(git describe --tags --always --dirty)" -t leasesvc .
#   docker build --build-arg VERSION="$(git describe --tags --always --dirty)" --target leasectl -t leasectl .
#
# The default (last) stage is the service, the image Cloud Run runs. The
# leasectl stage is an image holding only /leasectl, for agents to copy into
# their own images (docs/agents.md):
#
#   COPY --from=REGION-docker.pkg.dev/PROJECT/REPOSITORY/leasectl:VERSION /leasectl /usr/local/bin/leasectl
#
# See docs/deploy.md for pushing the images to Artifact Registry and deploying.
#
# Platforms: the build stage runs on the builder's own platform
# ($BUILDPLATFORM) and cross-compiles to the image's ($TARGETOS/$TARGETARCH),
# which Go does without emulation; only the runtime stages are of the target
# platform. So `docker build --platform linux/amd64` on an ARM machine (Cloud
# Run runs amd64) compiles at native speed, and `--platform
# linux/amd64,linux/arm64` makes a multi-platform image. The platform
# arguments come from BuildKit (Docker's default builder since 23.0; set
# DOCKER_BUILDKIT=1 on older ones).
#
# Base images. For a reproducible build, pin them by digest, keeping the tag
# for readers: pass the digest of each tag as resolved at release time, e.g.
#
#   docker build \
#     --build-arg GO_IMAGE="golang:1.26-bookworm@$(crane digest golang:1.26-bookworm)" \
#     --build-arg RUNTIME_IMAGE="gcr.io/distroless/static-debian12:nonroot@$(crane digest gcr.io/distroless/static-debian12:nonroot)" …
#
# (crane: github.com/google/go-containerregistry; `docker buildx imagetools
# inspect IMAGE` prints the same digest). The defaults below are the tags
# alone: the digests a tag points to move, and this file does not record one
# that nobody resolved against the registry.
ARG GO_IMAGE=golang:1.26-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/static-debian12:nonroot

# --- build --------------------------------------------------------------------
FROM --platform=$BUILDPLATFORM ${GO_IMAGE} AS build

WORKDIR /src

# Dependencies first, so a source change does not download them again.
COPY go.mod go.sum ./
RUN go mod download && go mod verify

COPY . .

# VERSION is stamped into main.version of both binaries (reported at
# start-up, in telemetry, and by `leasectl version`).
ARG VERSION=dev

# The image's platform, set by BuildKit from --platform (default: the
# builder's); GOOS/GOARCH cross-compile to it.
ARG TARGETOS
ARG TARGETARCH

# CGO off: static binaries that need no libc, so they run on distroless/static.
# -trimpath drops local paths from the binaries; -s -w drop the symbol table
# and DWARF data; -buildvcs=false because .git is not in the build context.
RUN CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} go build \
      -trimpath -buildvcs=false \
      -ldflags "-s -w -X main.version=${VERSION}" \
      -o /out/leasesvc ./cmd/leasesvc \
 && CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} go build \
      -trimpath -buildvcs=false \
      -ldflags "-s -w -X main.version=${VERSION}" \
      -o /out/leasectl ./cmd/leasectl

# --- leasectl -----------------------------------------------------------------
# `docker build --target leasectl`: /leasectl alone (ENTRYPOINT leasectl), to
# run it as is or to COPY --from into an agent's image for `leasectl run`.
FROM ${RUNTIME_IMAGE} AS leasectl

COPY --from=build /out/leasectl /leasectl

USER nonroot:nonroot

ENTRYPOINT ["/leasectl"]

# --- leasesvc (default) ---------------------------------------------------------
# distroless/static: CA certificates, tzdata and /etc/passwd, nothing else (no
# shell, no package manager). The :nonroot tag runs as uid 65532.
FROM ${RUNTIME_IMAGE} AS leasesvc

COPY --from=build /out/leasesvc /leasesvc

USER nonroot:nonroot

# The service listens on $PORT (default 8080); Cloud Run sets PORT itself.
EXPOSE 8080

ENTRYPOINT ["/leasesvc"]
