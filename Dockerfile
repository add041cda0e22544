# syntax=docker/dockerfile:1
# tidemark: one static binary (capture, apply, serve, migrate, apikey, ...).
# Used by compose/compose.yaml; build by hand with `docker build -t tidemark .`

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
USER nonroot:nonroot
# API (serve) and the /metrics ports of capture, apply and serve.
EXPOSE 8080 9101 9102 9103
ENTRYPOINT ["/tidemark"]
CMD ["--help"]
