// Package tlsfiles builds a client tls.Config from PEM files, the way both
// the Kafka and the Redis connections of tidemark take their TLS settings,
// and reads secrets that are given as files (Kubernetes and Docker secrets).
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/secretfile"
)

// Config is a client's TLS settings. The zero value with Enabled set uses
// the system's CAs and no client certificate.
type Config struct {
	Enabled  bool   // connect with TLS
	CAFile   string // PEM CA bundle that signs the server's certificate (empty: the system's)
	CertFile string // PEM client certificate, for servers that require one
	KeyFile  string // PEM key of CertFile
	// ServerName overrides the name checked in the server's certificate
	// (empty: the host dialled).
	ServerName string
	// InsecureSkipVerify accepts any server certificate: for a lab only.
	InsecureSkipVerify bool
}

// Used says whether any TLS setting is given (each implies TLS).
func (c Config) Used() bool {
	return c.Enabled || c.CAFile != "" || c.CertFile != "" || c.KeyFile != "" || c.ServerName != "" || c.InsecureSkipVerify
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	var p config.Problems
	if (c.CertFile == "") != (c.KeyFile == "") {
		p.Add("CertFile", "a client certificate needs both the certificate and its key file")
	}
	for _, f := range []struct{ field, path string }{{"CAFile", c.CAFile}, {"CertFile", c.CertFile}, {"KeyFile", c.KeyFile}} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			p.Add(f.field, "cannot read %s: %v", f.path, errors.Unwrap(err))
		}
	}
	return p.Err()
}

// TLS builds the tls.Config, or nil when TLS is not used.
func (c Config) TLS() (*tls.Config, error) {
	if !c.Used() {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName, InsecureSkipVerify: c.InsecureSkipVerify} //nolint:gosec // only behind an explicit setting
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tls: CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls: CA file %s holds no PEM certificate", c.CAFile)
		}
		tc.RootCAs = pool
	}
	if c.CertFile != "" {
		// Loaded on every handshake so a renewed certificate (cert-manager
		// rewrites the mounted files) is used without a restart.
		certFile, keyFile := c.CertFile, c.KeyFile
		if _, err := tls.LoadX509KeyPair(certFile, keyFile); err != nil {
			return nil, fmt.Errorf("tls: client certificate: %w", err)
		}
		tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			cert, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				return nil, fmt.Errorf("tls: client certificate: %w", err)
			}
			return &cert, nil
		}
	}
	return tc, nil
}

// Secret is a secret given as a value or as a file holding it (one of the
// two). The file is read at each call (secretfile.Value), so a rotated
// secret is picked up by the next connection.
func Secret(value, file string) (string, error) {
	return secretfile.Value(value, file)
}

// CheckSecret records a problem when both a value and a file are given, or
// the file cannot be read.
func CheckSecret(p *config.Problems, field, value, file string) {
	if value != "" && file != "" {
		p.Add(field, "give the secret or a file holding it, not both")
		return
	}
	if file != "" {
		if _, err := os.Stat(file); err != nil {
			p.Add(field+"File", "cannot read %s: %v", file, errors.Unwrap(err))
		}
	}
}
