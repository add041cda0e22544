package dev

import (
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/rollout"
	"github.com/tidemark/tidemark/schema"
)

// TestSharedPoolNamespaceUpgradeAsACLUsers runs the README's namespace
// upgrade as least-privilege Redis users: namespace catalog's apply and
// serve as a user holding cache.ACLRules("catalog"), then namespace
// catalog2's as a user holding cache.ACLRules("catalog2") and
// cache.ACLPoolRules("catalog") (the README's line for a --source-pool
// other than the namespace; both share the default pool). The new
// namespace's serve process reads the source under the pool's budget,
// joins the pool's serve set and namespaces (what `tidemark status` counts),
// claims its identity, and `tidemark rollout` reads the pool's settings as
// that user; no process is refused a command (NOPERM).
func TestSharedPoolNamespaceUpgradeAsACLUsers(t *testing.T) {
	t.Parallel()
	const pool = "catalog"
	var redisAddr string
	secrets := t.TempDir()
	userFlags := func(user string) []string {
		p := filepath.Join(secrets, user)
		if err := os.WriteFile(p, []byte(user+"-pw\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return []string{"--redis-user", user, "--redis-password-file", p}
	}
	e := newE2E(t, func(e *e2e) {
		u, err := url.Parse(e.redisURL)
		if err != nil {
			t.Fatal(err)
		}
		redisAddr = u.Host
		testenv.SetACLUser(t, redisAddr, "tm-catalog", "tm-catalog-pw", cache.ACLRules("catalog"))
		testenv.SetACLUser(t, redisAddr, "tm-catalog2", "tm-catalog2-pw", cache.ACLRules("catalog2")+" "+cache.ACLPoolRules(pool))
		e.applier.args = append(e.applier.args, userFlags("tm-catalog")...)
		e.serve.args = append(e.serve.args, userFlags("tm-catalog")...)
	})
	newFlags := userFlags("tm-catalog2")
	apiAddr := freeAddr(t)
	newApply := &proc{t: t, name: "apply catalog2", args: append([]string{"apply", "--namespace", "catalog2", "--kafka", e.brokers,
		"--redis", e.redisURL, "--topic", e.topic, "--session-timeout", "2s", "--metrics-addr", freeAddr(t)}, newFlags...)}
	newServe := &proc{t: t, name: "serve catalog2", args: append([]string{"serve", "--namespace", "catalog2", "--pg", e.dsn,
		"--redis", e.redisURL, "--addr", apiAddr, "--metrics-addr", freeAddr(t)}, newFlags...)}
	startAll(t, newApply, newServe)
	next := &e2e{t: t, apiBase: "http://" + apiAddr}

	// A cold read on the new namespace is admitted by the pool's budget
	// and filled; a second one is a hit.
	key, item := e.keys[0], "item-00002"
	testenv.Eventually(t, 90*time.Second, "catalog2's serve fills "+item+" and serves it from the cache", func() error {
		code, _, cs, err := next.getStatus(key, item)
		if err != nil {
			return err
		}
		if code != http.StatusOK || !strings.HasPrefix(cs, "tidemark; hit") {
			return fmt.Errorf("GET %s = %d, Cache-Status %q, want 200 and a hit", item, code, cs)
		}
		return nil
	})
	admin := e.rdb
	ctx := testenv.Context(t, 2*time.Minute)
	testenv.Eventually(t, 30*time.Second, "both namespaces' serve processes counted in the pool", func() error {
		members, err := admin.ZRange(ctx, rollout.ServeKey(pool), 0, -1).Result()
		if err != nil {
			return err
		}
		byNS := map[string]int{}
		for _, m := range members {
			ns, _, _ := strings.Cut(m, "/")
			byNS[ns]++
		}
		stamped, err := admin.HKeys(ctx, pool+":v1:_namespaces").Result()
		if err != nil {
			return err
		}
		if byNS["catalog"] != 1 || byNS["catalog2"] != 1 || len(stamped) != 2 {
			return fmt.Errorf("pool %s's serve set %v, namespaces %v; want one serve process of each namespace and both stamped", pool, members, stamped)
		}
		return nil
	})
	if got, err := admin.HGet(ctx, schema.IdentityKey("catalog2"), schema.FieldIdentityPool).Result(); err != nil || got != pool {
		t.Errorf("catalog2's identity record names pool %q (%v), want %q", got, err, pool)
	}
	// The operator's rollout command, as the new namespace's user, reads
	// (and writes) the pool's settings.
	for _, args := range [][]string{{"set", "source", "--tenant", "acme"}, {"status"}} {
		cmd := append(append([]string{"rollout"}, args...), "--namespace", "catalog2", "--redis", e.redisURL, "--pg", e.dsn)
		out, err := exec.CommandContext(ctx, testenv.Binary(t), append(cmd, newFlags...)...).CombinedOutput()
		if err != nil {
			t.Errorf("tidemark %s as the catalog2 user: %v\n%s", strings.Join(cmd, " "), err, out)
		}
	}
	for _, p := range []*proc{e.applier, e.serve, newApply, newServe} {
		if out := p.output(); strings.Contains(out, "NOPERM") {
			t.Errorf("%s, as the user holding the README's rules, was refused a command:\n%s", p.name, tail(out, 3000))
		}
	}
}
