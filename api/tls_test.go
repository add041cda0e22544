package api

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/tidemark/tidemark/lab/localserver"
	"github.com/tidemark/tidemark/lab/testenv"
)

// owned gives path to the lab's Postgres user when we are root.
func owned(t *testing.T, path string) {
	t.Helper()
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
	certs, err := localserver.MakeCerts(filepath.Join(dir, "ca"))
	if err != nil {
		t.Fatal(err)
	}
	otherCerts, err := localserver.MakeCerts(filepath.Join(dir, "other-ca"))
	if err != nil {
		t.Fatal(err)
	}
	ca, other := certs.CA, otherCerts.CA
	for _, d := range []string{dir, filepath.Dir(certs.CA)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{certs.ServerCert, certs.ServerKey} {
		owned(t, f)
	}
	pg := testenv.StartPostgres(t, testenv.PGConf("ssl", "on"),
		testenv.PGConf("ssl_cert_file", "'"+certs.ServerCert+"'"),
		testenv.PGConf("ssl_key_file", "'"+certs.ServerKey+"'"))
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
