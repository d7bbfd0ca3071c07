# leasesvc container image: a static Go binary on distroless, run as non-root.
#
#   docker build --build-arg VERSION="$(git describe --tags --always --dirty)" -t leasesvc .
#
# See docs/deploy.md for pushing it to Artifact Registry and deploying it.

# --- build --------------------------------------------------------------------
FROM golang:1.26-bookworm AS build

WORKDIR /src

# Dependencies first, so a source change does not download them again.
COPY go.mod go.sum ./
RUN go mod download && go mod verify

COPY . .

# VERSION is stamped into main.version (reported at start-up and in telemetry).
ARG VERSION=dev

# CGO off: a static binary that needs no libc, so it runs on distroless/static.
# -trimpath drops local paths from the binary; -s -w drop the symbol table and
# DWARF data; -buildvcs=false because .git is not in the build context.
RUN CGO_ENABLED=0 GOOS=linux go build \
      -trimpath -buildvcs=false \
      -ldflags "-s -w -X main.version=${VERSION}" \
      -o /out/leasesvc ./cmd/leasesvc

# --- run ----------------------------------------------------------------------
# distroless/static: CA certificates, tzdata and /etc/passwd, nothing else (no
# shell, no package manager). The :nonroot tag runs as uid 65532.
FROM gcr.io/distroless/static-debian12:nonroot

COPY --from=build /out/leasesvc /leasesvc

USER nonroot:nonroot

# The service listens on $PORT (default 8080); Cloud Run sets PORT itself.
EXPOSE 8080

ENTRYPOINT ["/leasesvc"]
