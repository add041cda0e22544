// Package secretfile is the one reader of secret files: a DSN, a URL with a
// password, or a password, mounted from a Kubernetes Secret or written by a
// Vault agent. Callers read the file again for every new connection, so a
// rotated secret is picked up without a restart; connections already open
// keep the credentials they authenticated with.
package secretfile

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Read returns the file's content without one trailing newline (what an
// editor or `kubectl create secret --from-file` leaves).
func Read(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("secret file: %w", err)
	}
	return strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r"), nil
}

// Value is a secret given as a value or as a file holding it: the file's
// current content when file is set, else value.
func Value(value, file string) (string, error) {
	if file == "" {
		return value, nil
	}
	return Read(file)
}

// PGConfig parses the current Postgres DSN: file's content when file is
// set, else dsn.
func PGConfig(dsn, file string) (*pgx.ConnConfig, error) {
	s, err := Value(dsn, file)
	if err != nil {
		return nil, err
	}
	cc, err := pgx.ParseConfig(s)
	if err != nil {
		if file != "" {
			return nil, fmt.Errorf("parse Postgres DSN in %s: %w", file, err)
		}
		return nil, fmt.Errorf("parse Postgres DSN: %w", err)
	}
	return cc, nil
}

// PGBeforeConnect is a pgxpool BeforeConnect hook: each new connection of
// the pool takes the address, database, user, password and TLS settings of
// the DSN file's current content (the pool's own settings, such as runtime
// parameters and hooks, stay as configured at start). An unreadable or
// unparsable file fails that connection; the pool tries again on the next
// acquire.
func PGBeforeConnect(file string) func(context.Context, *pgx.ConnConfig) error {
	return func(_ context.Context, cc *pgx.ConnConfig) error {
		cur, err := PGConfig("", file)
		if err != nil {
			return err
		}
		CopyPGConnection(cc, cur)
		return nil
	}
}

// CopyPGConnection sets dst's connection fields (where to connect and as
// whom) from src, keeping dst's runtime parameters and hooks.
func CopyPGConnection(dst, src *pgx.ConnConfig) {
	dst.Host, dst.Port, dst.Database = src.Host, src.Port, src.Database
	dst.User, dst.Password = src.User, src.Password
	dst.TLSConfig, dst.Fallbacks = src.TLSConfig, src.Fallbacks
}
