package api

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"tidemark/lab/testenv"
)

// testCA makes a CA and, when server is set, a certificate for 127.0.0.1
// signed by it, as PEM files in dir; it returns the CA file's path.
func testCA(t *testing.T, dir, name string, server bool) string {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, name+".pem")
	write(t, caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o644)
	if !server {
		return caFile
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	write(t, filepath.Join(dir, "server.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	write(t, filepath.Join(dir, "server.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	return caFile
}

func write(t *testing.T, path string, b []byte, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, b, mode); err != nil {
		t.Fatal(err)
	}
	// Run as root, the lab's Postgres runs as user postgres, which must own
	// its key (Postgres refuses a key others can read).
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatal(err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(path, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
}

// serve's pool over sslmode=verify-full: it connects to a server whose
// certificate a test CA signed, and refuses the same server under another CA.
func TestVerifyFullTLS(t *testing.T) {
	// Not t.TempDir: its parent is private to us, and the server (user
	// postgres when we are root) must read the files.
	dir, err := os.MkdirTemp("", "tidemark-tls-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ca := testCA(t, dir, "ca", true)
	other := testCA(t, dir, "other-ca", false)
	pg := testenv.StartPostgres(t, testenv.PGConf("ssl", "on"),
		testenv.PGConf("ssl_cert_file", "'"+filepath.Join(dir, "server.crt")+"'"),
		testenv.PGConf("ssl_key_file", "'"+filepath.Join(dir, "server.key")+"'"))
	db := pg.NewDatabase(t)
	ctx := testenv.Context(t, 60*time.Second)
	dsn := func(root string) string {
		return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=verify-full&sslrootcert=%s", pg.Port, db, root)
	}
	pool, err := NewPool(ctx, dsn(ca), DefaultConfig())
	if err != nil {
		t.Fatalf("NewPool over verify-full with the server's CA: %v", err)
	}
	defer pool.Close()
	var ssl bool
	if err := pool.QueryRow(ctx, "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").Scan(&ssl); err != nil || !ssl {
		t.Fatalf("session is not TLS: ssl=%v err=%v", ssl, err)
	}
	if p, err := NewPool(ctx, dsn(other), DefaultConfig()); err == nil {
		p.Close()
		t.Fatal("NewPool over verify-full with a CA that did not sign the server's certificate connected")
	} else {
		t.Logf("refused under another CA: %v", err)
	}
}
