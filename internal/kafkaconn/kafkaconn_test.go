package kafkaconn_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/tidemark/internal/kafkaconn"
	"github.com/tidemark/tidemark/internal/tlsfiles"
	"github.com/tidemark/tidemark/lab/localserver"
)

// saslTLSCluster is a kfake cluster that takes only TLS connections with a
// client certificate signed by a test-made CA, and SASL users of every
// mechanism kfake serves.
func saslTLSCluster(t *testing.T) (*kfake.Cluster, localserver.Certs) {
	t.Helper()
	certs, err := localserver.MakeCerts(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	srv, err := tls.LoadX509KeyPair(certs.ServerCert, certs.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(certs.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(),
		kfake.TLS(&tls.Config{Certificates: []tls.Certificate{srv}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}),
		kfake.EnableSASL(),
		kfake.Superuser("SCRAM-SHA-256", "admin", "admin-pw"),
		kfake.User("PLAIN", "plain", "plain-pw"),
		kfake.User("SCRAM-SHA-256", "s256", "s256-pw"),
		kfake.User("SCRAM-SHA-512", "s512", "s512-pw"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, certs
}

// roundTrip produces one record and reads it back through a client built
// from cfg.
func roundTrip(t *testing.T, brokers []string, cfg kafkaconn.Config, topic string) error {
	t.Helper()
	opts, err := kafkaconn.Opts(brokers, cfg, nil)
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(append(opts, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.AllowAutoTopicCreation(), kgo.RequestRetries(1), kgo.RetryTimeout(5*time.Second))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("v")}).FirstErr(); err != nil {
		return err
	}
	for {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			return err
		}
		if fs.NumRecords() > 0 {
			return nil
		}
	}
}

// refused says why a client built from cfg cannot talk to the brokers (nil:
// it can).
func refused(t *testing.T, brokers []string, cfg kafkaconn.Config) error {
	t.Helper()
	opts, err := kafkaconn.Opts(brokers, cfg, nil)
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return cl.Ping(ctx)
}

func TestSASLOverTLS(t *testing.T) {
	c, certs := saslTLSCluster(t)
	dir := t.TempDir()
	pwFile := func(pw string) string {
		p := filepath.Join(dir, pw)
		if err := os.WriteFile(p, []byte(pw+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	mtls := tlsfiles.Config{CAFile: certs.CA, CertFile: certs.ClientCert, KeyFile: certs.ClientKey}
	for _, tc := range []struct{ mech, user, pw string }{
		{kafkaconn.Plain, "plain", "plain-pw"},
		{kafkaconn.ScramSHA256, "s256", "s256-pw"},
		{kafkaconn.ScramSHA512, "s512", "s512-pw"},
	} {
		t.Run(tc.mech, func(t *testing.T) {
			// The password only as a file, as a Kubernetes secret mounts it.
			cfg := kafkaconn.Config{TLS: mtls, SASLMechanism: tc.mech, SASLUser: tc.user, SASLPasswordFile: pwFile(tc.pw)}
			if err := roundTrip(t, c.ListenAddrs(), cfg, "t-"+strings.ToLower(tc.mech)); err != nil {
				t.Fatalf("%s over TLS with the password from a file: %v", tc.mech, err)
			}
			bad := cfg
			bad.SASLPasswordFile = pwFile("wrong-" + tc.pw)
			if err := refused(t, c.ListenAddrs(), bad); err == nil {
				t.Fatalf("%s with a wrong password connected: the broker's SASL is not in use", tc.mech)
			}
		})
	}
	t.Run("no client certificate", func(t *testing.T) {
		cfg := kafkaconn.Config{TLS: tlsfiles.Config{CAFile: certs.CA}, SASLMechanism: kafkaconn.Plain, SASLUser: "plain", SASLPassword: "plain-pw"}
		if err := refused(t, c.ListenAddrs(), cfg); err == nil {
			t.Fatal("connected without the client certificate the broker requires")
		}
	})
	t.Run("system CAs only", func(t *testing.T) {
		cfg := kafkaconn.Config{TLS: tlsfiles.Config{Enabled: true, CertFile: certs.ClientCert, KeyFile: certs.ClientKey}, SASLMechanism: kafkaconn.Plain, SASLUser: "plain", SASLPassword: "plain-pw"}
		if err := refused(t, c.ListenAddrs(), cfg); err == nil {
			t.Fatal("trusted a broker certificate signed by a CA that was not given")
		}
	})
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  kafkaconn.Config
		want string
	}{
		{kafkaconn.Config{SASLMechanism: "GSSAPI"}, "SASLMechanism: must be one of"},
		{kafkaconn.Config{SASLMechanism: "PLAIN", SASLPassword: "x"}, "SASLUser: is required"},
		{kafkaconn.Config{SASLMechanism: "SCRAM-SHA-512", SASLUser: "u", SASLPassword: "x", SASLPasswordFile: "/nonexistent"}, "not both"},
		{kafkaconn.Config{SASLMechanism: "OAUTHBEARER"}, "OAuthTokenFile: is required"},
		{kafkaconn.Config{SASLMechanism: "AWS_MSK_IAM"}, "needs TLS"},
		{kafkaconn.Config{SASLUser: "u"}, "SASLMechanism: is required"},
		{kafkaconn.Config{TLS: tlsfiles.Config{CertFile: "/x"}}, "needs both"},
	} {
		err := tc.cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want %q", tc.cfg, err, tc.want)
		}
	}
}
