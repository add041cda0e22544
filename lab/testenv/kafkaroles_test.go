//go:build realkafka

package testenv_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tidemark/tidemark/applier"
	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/internal/kafkaconn"
	"github.com/tidemark/tidemark/internal/tlsfiles"
	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/relay"
	"github.com/tidemark/tidemark/schema"
	"github.com/tidemark/tidemark/status"
)

// Each role (capture, apply, replay, status) does its work over SASL_SSL
// (SCRAM-SHA-512, the test-made CA and client certificate, the password
// from a file) as a user holding exactly the ACLs of the README's table,
// and fails with an authorization error when any one of them is missing.
func TestKafkaRolesWorkWithExactlyTheirACLs(t *testing.T) {
	k := testenv.StartKafka(t)
	if k.Real == nil {
		t.Fatalf("the realkafka tests need %s=real", testenv.KafkaEnv)
	}
	topic := testenv.Unique(t, "roles")
	group := "g-" + topic
	compactDelete, compact := "compact,delete", "compact"
	// A compacted topic keeps markers past the relay's retention requirement.
	lag := strconv.FormatInt(relay.DefaultTopicRequirements().Retention.Milliseconds(), 10)
	k.CreateTopic(t, topic, 3, map[string]*string{"cleanup.policy": &compactDelete, "min.compaction.lag.ms": &lag})
	k.CreateTopic(t, topic+".dlq", 1, nil)
	k.CreateTopic(t, relay.StateTopic(topic), 1, map[string]*string{"cleanup.policy": &compact})
	rs := testenv.StartRedis(t)
	rdb := rs.Client(t)
	cc, err := cache.New(cache.DefaultConfig(), cache.Deps{Redis: rdb, Log: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	harness, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer harness.Close()
	seq := 0
	produce := func(ctx context.Context, recs ...*kgo.Record) error {
		return harness.ProduceSync(ctx, recs...).FirstErr()
	}
	change := func(item string, v int64) *kgo.Record {
		ev := &schema.Change{Tenant: "t1", Item: item, Version: v, Op: schema.OpUpsert, LSN: schema.LSN(v), CommitTime: time.Now(), Xid: 1}
		return &kgo.Record{Topic: topic, Key: []byte(schema.Key("t1", item)), Value: schema.Encode(ev)}
	}
	floor := func(item string) int64 {
		v, _ := rdb.HGet(context.Background(), schema.RedisKey(cache.DefaultConfig().Namespace, "t1", item), schema.FieldFloor).Result()
		n, _ := strconv.ParseInt(v, 10, 64)
		return n
	}
	adm := k.Admin(t)
	dlqEnd := func(ctx context.Context) int64 {
		ends, err := adm.ListEndOffsets(ctx, topic+".dlq")
		if err != nil {
			return -1
		}
		o, _ := ends.Lookup(topic+".dlq", 0)
		return o.Offset
	}

	probes := map[string]func(ctx context.Context, conn kafkaconn.Config) error{
		// capture: the topic's configuration check, the state topic, the
		// stream, and its status page.
		testenv.RoleCapture: func(ctx context.Context, conn kafkaconn.Config) error {
			cfg := relay.DefaultConfig()
			cfg.Brokers, cfg.Topic, cfg.Kafka, cfg.CreateTopic = k.SASL, topic, conn, false
			p, err := relay.New(cfg, relay.Deps{Log: testenv.Logger(t), Registerer: prometheus.NewRegistry()})
			if err != nil {
				return err
			}
			defer p.Close()
			if _, _, err := p.Topic(ctx); err != nil {
				return fmt.Errorf("topic: %w", err)
			}
			if err := p.CheckTopic(ctx, relay.DefaultTopicRequirements()); err != nil {
				return fmt.Errorf("check topic: %w", err)
			}
			if err := p.SaveState(ctx, "slot", relay.State{SystemID: "1", Timeline: 1, Database: "db"}); err != nil {
				return fmt.Errorf("save state: %w", err)
			}
			if _, _, err := p.LoadState(ctx, "slot"); err != nil {
				return fmt.Errorf("load state: %w", err)
			}
			seq++
			if err := p.Client().ProduceSync(ctx, change(fmt.Sprintf("c%d", seq), 1)).FirstErr(); err != nil {
				return fmt.Errorf("produce: %w", err)
			}
			return statusCheck(ctx, k.SASL, conn, rs.URL(), topic, group)
		},
		// apply: a change applied, a bad record dead-lettered, offsets
		// committed in the group.
		testenv.RoleApply: func(ctx context.Context, conn kafkaconn.Config) error {
			seq++
			item := fmt.Sprintf("a%d", seq)
			before := dlqEnd(ctx)
			if err := produce(ctx, change(item, 7), &kgo.Record{Topic: topic, Key: []byte(schema.Key("t1", item+"-bad")), Value: []byte("{not json")}); err != nil {
				return err
			}
			cfg := applier.DefaultConfig()
			cfg.Brokers, cfg.Kafka, cfg.Topic, cfg.Group = k.SASL, conn, topic, group
			cfg.CommitInterval = 100 * time.Millisecond // the default 6 s session: a loaded machine misses shorter ones
			cfg.BackoffMin, cfg.BackoffMax = 20*time.Millisecond, 300*time.Millisecond
			a, err := applier.New(cfg, applier.Deps{Cache: cc, Log: testenv.Logger(t), Registerer: prometheus.NewRegistry()})
			if err != nil {
				return err
			}
			rctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- a.Run(rctx) }()
			defer func() { cancel(); <-done }()
			deadline := time.After(90 * time.Second)
			for {
				select {
				case err := <-done:
					done <- err
					if err == nil {
						err = errors.New("applier stopped without an error")
					}
					return err
				case <-deadline:
					return fmt.Errorf("in 90 s: floor of %s %d (want 7), dead letters %d -> %d (want one more), and no error", item, floor(item), before, dlqEnd(ctx))
				case <-time.After(100 * time.Millisecond):
				}
				if floor(item) >= 7 && dlqEnd(ctx) > before {
					return nil
				}
			}
		},
		// replay: the whole topic again.
		testenv.RoleReplay: func(ctx context.Context, conn kafkaconn.Config) error {
			cfg := applier.DefaultReplayConfig()
			cfg.Brokers, cfg.Kafka, cfg.Topic, cfg.Since = k.SASL, conn, topic, time.Now().Add(-time.Hour)
			cfg.BackoffMin, cfg.BackoffMax = 20*time.Millisecond, 300*time.Millisecond
			rp, err := applier.NewReplay(cfg, applier.Deps{Cache: cc, Log: testenv.Logger(t), Registerer: prometheus.NewRegistry()})
			if err != nil {
				return err
			}
			rctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			_, err = rp.Run(rctx)
			return err
		},
		testenv.RoleStatus: func(ctx context.Context, conn kafkaconn.Config) error {
			return statusCheck(ctx, k.SASL, conn, rs.URL(), topic, group)
		},
	}
	ctx := testenv.Context(t, 10*time.Minute)
	// Records for replay and status to find, and a committed group offset.
	if err := produce(ctx, change("seed", 1)); err != nil {
		t.Fatal(err)
	}
	for _, role := range []string{testenv.RoleApply, testenv.RoleCapture, testenv.RoleReplay, testenv.RoleStatus} {
		t.Run(role, func(t *testing.T) {
			acls := testenv.KafkaRoleACLs(role, topic, group)
			if err := probes[role](ctx, k.KafkaUser(t, acls)); err != nil {
				t.Fatalf("%s as a user holding exactly %v: %v", role, acls, err)
			}
			for i, missing := range acls {
				err := probes[role](ctx, k.KafkaUser(t, slices.Delete(slices.Clone(acls), i, i+1)))
				switch {
				case err == nil:
					t.Errorf("%s worked without %s: the README lists an ACL the role does not need", role, missing)
				case !authorization(err):
					t.Errorf("%s without %s failed, but not with an authorization error: %v", role, missing, err)
				default:
					t.Logf("%s without %s: %v", role, missing, err)
				}
			}
		})
	}
}

func statusCheck(ctx context.Context, brokers []string, conn kafkaconn.Config, redisURL, topic, group string) error {
	cfg := status.DefaultConfig()
	cfg.Brokers, cfg.Kafka, cfg.Redis, cfg.Topic, cfg.Group = brokers, conn, redisURL, topic, group
	cfg.Timeout = 30 * time.Second
	_, err := status.Check(ctx, cfg)
	return err
}

func authorization(err error) bool {
	for _, e := range []error{kerr.TopicAuthorizationFailed, kerr.GroupAuthorizationFailed, kerr.ClusterAuthorizationFailed} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// unsecuredJWT is a token Kafka's unsecured OAUTHBEARER validator takes:
// unsigned, its principal the sub claim.
func unsecuredJWT(sub string, life time.Duration) string {
	enc := base64.RawURLEncoding.EncodeToString
	now := time.Now()
	return enc([]byte(`{"alg":"none"}`)) + "." +
		enc(fmt.Appendf(nil, `{"sub":%q,"iat":%d,"exp":%d}`, sub, now.Unix(), now.Add(life).Unix())) + "."
}

// An OAUTHBEARER token is read from its file, and read again when the file
// changes: a client authenticated as a principal without ACLs, whose token
// expires in seconds, carries on as the principal of the token written
// over it (which holds the ACL) once it authenticates again (the broker
// ends a session with its token).
func TestOAuthBearerTokenFileReadAgainWhenItChanges(t *testing.T) {
	k := testenv.StartKafka(t)
	if k.Real == nil {
		t.Fatalf("the realkafka tests need %s=real", testenv.KafkaEnv)
	}
	topic := testenv.Unique(t, "oauth")
	k.CreateTopic(t, topic, 1, nil)
	denied, allowed := "oauth-none-"+topic, "oauth-ok-"+topic
	k.Grant(t, "User:"+allowed, []testenv.KafkaACL{{Resource: kmsg.ACLResourceTypeTopic, Name: topic, Op: kmsg.ACLOperationDescribe}})
	tokenFile := filepath.Join(t.TempDir(), "token")
	write := func(tok string) {
		if err := os.WriteFile(tokenFile+".new", []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tokenFile+".new", tokenFile); err != nil { // as a secret mount swaps it
			t.Fatal(err)
		}
	}
	const life = 5 * time.Second
	write(unsecuredJWT(denied, life))
	conn := kafkaconn.Config{TLS: tlsfiles.Config{CAFile: k.Certs.CA, CertFile: k.Certs.ClientCert, KeyFile: k.Certs.ClientKey},
		SASLMechanism: kafkaconn.OAuthBearer, OAuthTokenFile: tokenFile}
	opts, err := kafkaconn.Opts(k.SASL, conn, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx := testenv.Context(t, time.Minute)
	describe := func() error {
		_, err := adm.ListEndOffsets(ctx, topic)
		return err
	}
	start := time.Now()
	if err := describe(); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("as %s (no ACL): %v, want TOPIC_AUTHORIZATION_FAILED", denied, err)
	}
	write(unsecuredJWT(allowed, time.Hour))
	testenv.Eventually(t, 30*time.Second, "the client authenticates again with the token written over the first", describe)
	t.Logf("principal %s in use %s after the first authentication (the first token lived %s)", allowed, time.Since(start).Round(time.Millisecond), life)
}
