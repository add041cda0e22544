# syntax=docker/dockerfile:1
# tidemark: one static binary (capture, apply, serve, migrate, apikey, ...).
# Used by compose/compose.yaml; build by hand with `docker build -t tidemark .`
# `make image` (lab/image) builds the released image without a container
# engine: the same binary, user (65532, distroless's nonroot), entrypoint and
# ports, for amd64 and arm64, with an SBOM at
# /usr/share/doc/tidemark/sbom.spdx.json and no base image (the binary
# carries fallback CA roots; nothing else from distroless is used).

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# The build context has no .git, so the version and commit come from build
# arguments: docker build --build-arg VERSION=v0.1.0 --build-arg REVISION=$(git rev-parse HEAD) .
ARG VERSION=dev
ARG REVISION=unknown
RUN CGO_ENABLED=0 go build -trimpath -buildvcs=false \
      -ldflags "-s -w -X github.com/tidemark/tidemark/internal/telemetry.version=${VERSION} -X github.com/tidemark/tidemark/internal/telemetry.revision=${REVISION}" \
      -o /out/tidemark ./cmd/tidemark

# static-debian12 carries CA certificates and tzdata; no shell.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/tidemark /tidemark
USER 65532:65532
ARG VERSION=dev
ARG REVISION=unknown
LABEL org.opencontainers.image.title=tidemark \
      org.opencontainers.image.version=${VERSION} \
      org.opencontainers.image.revision=${REVISION} \
      org.opencontainers.image.source=https://github.com/tidemark/tidemark \
      org.opencontainers.image.licenses=Apache-2.0
# API (serve) and the /metrics ports of capture, apply and serve.
EXPOSE 8080 9101 9102 9103
ENTRYPOINT ["/tidemark"]
CMD ["--help"]
