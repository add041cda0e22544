package main

// The image `make image` builds (lab/image) holds this binary and no CA
// bundle: with no system roots (a scratch image), TLS to Kafka, Redis and
// Postgres verifies against Mozilla's roots compiled in here. A system bundle,
// where there is one (Debian, distroless), still wins.
import _ "golang.org/x/crypto/x509roots/fallback"
