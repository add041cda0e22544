package dev

import (
	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/api"
	"github.com/tidemark/tidemark/lab/seed"
)

// Demo data: two tenants with the same item ids, so tenant isolation shows.
var demoTenants = []string{"acme", "globex"}

const demoItems = 2000

type apiKey struct{ tenant, key string }

// seedDemo inserts the demo catalog once and makes sure every demo tenant has a
// working API key. Keys exist in Postgres only as hashes, so the demo keeps
// its own copy in keysFile (0600) for the load generator and the banner.
// fresh reports keys created by this call (printed once).
func seedDemo(ctx context.Context, dsn, keysFile string) (keys []apiKey, fresh bool, err error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, false, fmt.Errorf("dev: seed: %w", err)
	}
	defer conn.Close(context.Background())
	for _, t := range demoTenants {
		err := seed.Items{Tenant: t, Prefix: "item-", Pad: 5, First: 1, Count: demoItems, State: "active", SkipExisting: true,
			Display: "jsonb_build_object('title', format('%s product %s', t, n), 'price_cents', 100 + n)"}.Insert(ctx, conn)
		if err != nil {
			return nil, false, fmt.Errorf("dev: seed items: %w", err)
		}
	}
	keys = readKeys(keysFile)
	valid := len(keys) == len(demoTenants)
	for _, k := range keys {
		sum := sha256.Sum256([]byte(k.key))
		var ok bool
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM tidemark.api_keys WHERE key_sha256 = $1 AND tenant_id = $2)`, sum[:], k.tenant).Scan(&ok); err != nil {
			return nil, false, fmt.Errorf("dev: check demo keys: %w", err)
		}
		valid = valid && ok
	}
	if valid {
		return keys, false, nil
	}
	keys = keys[:0]
	var b strings.Builder
	b.WriteString("# tidemark-lab dev demo API keys: tenant key\n")
	for _, t := range demoTenants {
		key, err := api.CreateAPIKey(ctx, conn, t)
		if err != nil {
			return nil, false, err
		}
		keys = append(keys, apiKey{t, key})
		fmt.Fprintf(&b, "%s %s\n", t, key)
	}
	if err := os.WriteFile(keysFile, []byte(b.String()), 0o600); err != nil {
		return nil, false, fmt.Errorf("dev: save demo keys: %w", err)
	}
	return keys, true, nil
}

func readKeys(path string) []apiKey {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) || err != nil {
		return nil
	}
	defer f.Close()
	var keys []apiKey
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if t, k, ok := strings.Cut(line, " "); ok {
			keys = append(keys, apiKey{t, strings.TrimSpace(k)})
		}
	}
	return keys
}
