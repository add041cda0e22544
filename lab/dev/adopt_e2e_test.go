package dev

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/lab/testenv"
)

// TestAdoptWalkthrough is README's "Adopt an existing catalog" section as a
// test, with the built binary as a user runs it: a shop's own table
// (surrogate key, revision counter, payload in three columns, its own
// status values) is adopted, then capture + apply + serve answer display
// built from title, image_url and body; a DBA's raw UPDATE that does not
// touch the revision and a raw DELETE still reach the cache, and inspect
// finds the cached entries consistent with the shop's rows.
func TestAdoptWalkthrough(t *testing.T) {
	t.Parallel()
	pg := testenv.SharedPostgres(t)
	db := pg.NewDatabase(t)
	dsn := pg.DSN(db)
	pg.Exec(t, db, `CREATE SCHEMA shop;
		CREATE TABLE shop.products (
		    id bigserial PRIMARY KEY, shop_id text NOT NULL, sku text NOT NULL, rev bigint NOT NULL DEFAULT 1,
		    title text, image_url text, body text, status text NOT NULL DEFAULT 'live',
		    updated_at timestamptz NOT NULL DEFAULT now(), UNIQUE (shop_id, sku));
		INSERT INTO shop.products (shop_id, sku, title, image_url, body)
		    SELECT 'acme', 'sku-' || i, 'Lamp ' || i, 'https://img.example/' || i, 'A lamp.' FROM generate_series(1, 20) i;`)
	r := testenv.StartRedis(t)
	k := testenv.StartKafka(t)
	bin := testenv.Binary(t)
	table := []string{"--table", "shop.products", "--tenant-column", "shop_id", "--item-column", "sku", "--version-column", "rev",
		"--state-column", "status", "--deleted-state", "gone", "--active-state", "live", "--payload-columns", "title,image_url,body"}
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("tidemark %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	out := run(append([]string{"adopt", "--pg", dsn, "--dry-run"}, table...)...)
	if !strings.Contains(out, "CREATE PUBLICATION") || !strings.Contains(out, "REPLICA IDENTITY USING INDEX") {
		t.Fatalf("adopt --dry-run does not plan the publication and the replica identity:\n%s", out)
	}
	out = run(append([]string{"adopt", "--pg", dsn}, table...)...)
	t.Logf("tidemark adopt:\n%s", out)
	key := strings.TrimSpace(lastLine(run("apikey", "create", "--pg", dsn, "--tenant", "acme")))

	topic, group, slot := testenv.Unique(t, "topic"), testenv.Unique(t, "group"), testenv.Unique(t, "slot")
	apiAddr := freeAddr(t)
	procs := []*proc{
		{t: t, name: "capture", args: append([]string{"capture", "--pg", dsn, "--kafka", k.BrokerList(), "--topic", topic,
			"--slot", slot, "--partitions", "3", "--metrics-addr", freeAddr(t)}, table...)},
		{t: t, name: "apply", args: []string{"apply", "--kafka", k.BrokerList(), "--redis", r.URL(), "--topic", topic,
			"--group", group, "--session-timeout", "2s", "--metrics-addr", freeAddr(t)}},
		{t: t, name: "serve", args: append([]string{"serve", "--pg", dsn, "--redis", r.URL(), "--addr", apiAddr,
			"--metrics-addr", freeAddr(t)}, table...)},
	}
	startAll(t, procs...)
	var lastCacheStatus string
	get := func(sku string) (int, map[string]any, error) {
		req, _ := http.NewRequest("GET", "http://"+apiAddr+"/v1/catalog/items/"+sku, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		lastCacheStatus = res.Header.Get("Cache-Status")
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			return res.StatusCode, nil, fmt.Errorf("answer %q: %w", b, err)
		}
		return res.StatusCode, m, nil
	}
	testenv.Eventually(t, 90*time.Second, "serve answers sku-1 with display built from title, image_url and body", func() error {
		code, m, err := get("sku-1")
		if err != nil {
			return err
		}
		d, _ := m["display"].(map[string]any)
		if code != 200 || d["title"] != "Lamp 1" || d["image_url"] != "https://img.example/1" || d["body"] != "A lamp." {
			return fmt.Errorf("GET sku-1 = %d %v", code, m)
		}
		return nil
	})
	testenv.Eventually(t, 30*time.Second, "sku-1 is served from the cache", func() error {
		if _, _, err := get("sku-1"); err != nil {
			return err
		}
		if !strings.HasPrefix(lastCacheStatus, "tidemark; hit") {
			return fmt.Errorf("Cache-Status %q, want a hit", lastCacheStatus)
		}
		return nil
	})
	// Cached now; a DBA's UPDATE without a revision bump must still reach it.
	pg.Exec(t, db, `UPDATE shop.products SET title = 'Lamp 1 (new)' WHERE shop_id = 'acme' AND sku = 'sku-1'`)
	testenv.Eventually(t, 60*time.Second, "the raw UPDATE (revision untouched) is served", func() error {
		code, m, err := get("sku-1")
		if err != nil {
			return err
		}
		d, _ := m["display"].(map[string]any)
		if code != 200 || d["title"] != "Lamp 1 (new)" || m["version"] != float64(2) {
			return fmt.Errorf("GET sku-1 = %d %v, want title 'Lamp 1 (new)' at version 2", code, m)
		}
		return nil
	})
	if code, _, err := get("sku-2"); err != nil || code != 200 {
		t.Fatalf("GET sku-2 = %d %v", code, err)
	}
	// inspect with the same table flags compares the cached entries'
	// versions with the shop's revisions.
	iout, err := exec.Command(bin, append([]string{"inspect", "--pg", dsn, "--redis", r.URL(), "--json"}, table...)...).Output()
	var rep struct{ Checked, Consistent int }
	if err == nil {
		err = json.Unmarshal(iout, &rep)
	}
	if err != nil || rep.Checked < 2 || rep.Consistent != rep.Checked {
		t.Fatalf("tidemark inspect on shop.products: %v, checked %d, consistent %d; want sku-1 and sku-2 checked and consistent:\n%s%s",
			err, rep.Checked, rep.Consistent, iout, exitStderr(err))
	}
	pg.Exec(t, db, `DELETE FROM shop.products WHERE shop_id = 'acme' AND sku = 'sku-2'`)
	testenv.Eventually(t, 60*time.Second, "the raw DELETE (a tombstone by the trigger) is served as 404", func() error {
		code, m, err := get("sku-2")
		if err != nil {
			return err
		}
		if code != 404 {
			return fmt.Errorf("GET sku-2 = %d %v, want 404", code, m)
		}
		return nil
	})
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
