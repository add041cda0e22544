package dev

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/status"
)

// TestPipelineAsRedisACLUserOverTLS runs capture, apply and serve as real
// processes the way the README's managed setup does: Redis only over TLS
// (a test-made CA, a client certificate) as an ACL user holding exactly
// cache.ACLRules, Kafka with SASL SCRAM, every password only in a file,
// every connection setting in one config file. Reads are filled and hit,
// an update through the API is invalidated by apply and served, and
// serve's status page (Kafka and Redis as those users) says OK, and
// `tidemark inspect` checks the cached entries as the same Redis user. An
// applier and a server whose user lacks one rule (+info) stop at start,
// and an inspect whose user lacks the item keys' pattern fails, with
// Redis's NOPERM.
func TestPipelineAsRedisACLUserOverTLS(t *testing.T) {
	t.Parallel()
	pg := testenv.SharedPostgres(t)
	dsn := pg.MigratedDatabase(t)
	dir := t.TempDir()
	// Each step that takes a context gets its own deadline, so the time the
	// processes take to come up on a loaded box never eats a later step's.
	keys, _, err := seedDemo(testenv.Context(t, 2*time.Minute), dsn, filepath.Join(dir, "keys"))
	if err != nil {
		t.Fatal(err)
	}
	srv, certs := testenv.StartRedisTLS(t, filepath.Join(dir, "certs"))
	secret := func(name, value string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(value+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	setUser := func(user, rules string) { testenv.SetACLUser(t, srv.Addr, user, user+"-pw", rules) }
	const ns = "catalog"
	setUser("tidemark", cache.ACLRules(ns))
	// Less one rule: what a user of the common "+@all -@dangerous" set has.
	setUser("noinfo", strings.Replace(cache.ACLRules(ns), " +info", "", 1))
	// Less the item keys' pattern.
	setUser("nokeys", strings.Replace(cache.ACLRules(ns), " ~"+ns+":v1:*", "", 1))
	k := testenv.StartKfake(t, kfake.AllowAutoTopicCreation(), kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", "tm", "kafka-pw"))
	topic, group, slot := testenv.Unique(t, "topic"), testenv.Unique(t, "group"), testenv.Unique(t, "slot")
	conf := filepath.Join(dir, "tidemark.yaml")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(`# one file for every process
pg: %s
kafka: %s
kafka-sasl-mechanism: SCRAM-SHA-512
kafka-sasl-user: tm
kafka-sasl-password-file: %s
topic: %s
group: %s
slot: %s
redis: rediss://%s/0
redis-user: tidemark
redis-password-file: %s
redis-ca-file: %s
redis-cert-file: %s
redis-key-file: %s
`, dsn, k.BrokerList(), secret("kafka-password", "kafka-pw"), topic, group, slot, srv.TLSAddr,
		secret("redis-password", "tidemark-pw"), certs.CA, certs.ClientCert, certs.ClientKey)), 0o600); err != nil {
		t.Fatal(err)
	}
	apiAddr, serveMetrics := freeAddr(t), freeAddr(t)
	e := &e2e{t: t, apiBase: "http://" + apiAddr}
	procs := []*proc{
		{t: t, name: "capture", args: []string{"capture", "--config", conf, "--partitions", "3", "--metrics-addr", freeAddr(t)}},
		{t: t, name: "apply", args: []string{"apply", "--config", conf, "--session-timeout", "2s", "--metrics-addr", freeAddr(t)}},
		{t: t, name: "serve", args: []string{"serve", "--config", conf, "--addr", apiAddr, "--metrics-addr", serveMetrics, "--status-every", "1s"}},
	}
	startAll(t, procs...)
	key := keys[0]
	testenv.Eventually(t, 90*time.Second, "serve's status page (Kafka and Redis as the least-privilege users) says OK", func() error {
		resp, err := http.Get("http://" + serveMetrics + "/status.json")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var rep struct{ Verdict, Reason, Error string }
		if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
			return err
		}
		if rep.Verdict != status.OK {
			return fmt.Errorf("verdict %s: %s%s", rep.Verdict, rep.Reason, rep.Error)
		}
		return nil
	})
	item := "item-00001"
	var v int64
	testenv.Eventually(t, 30*time.Second, item+" is filled and then served from the cache", func() error {
		code, ver, cs, err := e.getStatus(key, item)
		if err != nil {
			return err
		}
		if code != http.StatusOK || !strings.HasPrefix(cs, "tidemark; hit") {
			return fmt.Errorf("GET %s = %d, Cache-Status %q, want 200 and a hit", item, code, cs)
		}
		v = ver
		return nil
	})
	code, it, err := e.patch(key, item, v)
	if err != nil || code != http.StatusOK {
		t.Fatalf("PATCH %s: %d %v", item, code, err)
	}
	testenv.Eventually(t, 30*time.Second, "apply invalidated the cached "+item+" and serve caches the new version", func() error {
		code, ver, cs, err := e.getStatus(key, item)
		if err != nil {
			return err
		}
		if code != http.StatusOK || ver != it.Version || !strings.HasPrefix(cs, "tidemark; hit") {
			return fmt.Errorf("GET %s = %d version %d, Cache-Status %q; want version %d from the cache", item, code, ver, cs, it.Version)
		}
		return nil
	})
	for _, p := range procs {
		if out := p.output(); strings.Contains(out, "NOPERM") {
			t.Errorf("%s, as the user holding cache.ACLRules, was refused a command:\n%s", p.name, tail(out, 3000))
		}
	}

	// inspect, from the same file, as the same user over TLS: it reads the
	// entries serve filled and compares them with Postgres.
	out, err := exec.CommandContext(testenv.Context(t, time.Minute), testenv.Binary(t), "inspect", "--config", conf, "--json").Output()
	var rep struct{ Checked, Consistent int }
	if err == nil {
		err = json.Unmarshal(out, &rep)
	}
	if err != nil || rep.Checked == 0 || rep.Consistent != rep.Checked {
		t.Errorf("inspect as the user holding cache.ACLRules over TLS: %v, checked %d, consistent %d; want every entry checked and consistent:\n%s%s",
			err, rep.Checked, rep.Consistent, out, exitStderr(err))
	}

	// inspect as a user without the item keys' pattern is refused them.
	if out, err := exec.CommandContext(testenv.Context(t, time.Minute), testenv.Binary(t), "inspect", "--config", conf, "--redis-user", "nokeys",
		"--redis-password-file", secret("nokeys-password", "nokeys-pw")).CombinedOutput(); err == nil || !strings.Contains(string(out), "NOPERM") {
		t.Errorf("inspect as a user without ~%s:v1:*: exit %v, want a failure naming NOPERM:\n%s", ns, err, tail(string(out), 3000))
	}
	// The same processes as a user without +info do not start.
	noinfoPW := secret("noinfo-password", "noinfo-pw")
	for _, cmd := range []string{"apply", "serve"} {
		args := []string{cmd, "--config", conf, "--redis-user", "noinfo", "--redis-password-file", noinfoPW,
			"--metrics-addr", freeAddr(t), "--group", group + "-noinfo"}
		if cmd == "serve" {
			args = append(args, "--addr", freeAddr(t))
		}
		p := &proc{t: t, name: cmd + " as noinfo", args: args}
		p.start()
		t.Cleanup(p.kill)
		select {
		case <-p.process().Done():
			if code, out := p.process().ExitCode(), p.output(); code == 0 || !strings.Contains(out, "NOPERM") {
				t.Errorf("%s as a user without +info: exit code %d, want a failure naming NOPERM:\n%s", cmd, code, tail(out, 3000))
			}
		case <-time.After(60 * time.Second):
			p.kill()
			t.Errorf("%s as a user without +info still runs after 60 s, want it to stop with NOPERM:\n%s", cmd, tail(p.output(), 3000))
		}
	}
}

// exitStderr is the standard error of a failed exec.Cmd.Output.
func exitStderr(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(ee.Stderr)
	}
	return ""
}
