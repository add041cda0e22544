// Package kafkaconn turns the connection settings of a managed Kafka (TLS,
// SASL PLAIN, SCRAM, OAUTHBEARER, AWS MSK IAM) into franz-go client
// options. Every Kafka client tidemark builds (relay, applier, replay,
// status) starts from Opts, so every role connects the same way.
package kafkaconn

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/aws"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	"github.com/twmb/franz-go/plugin/kslog"

	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/tlsfiles"
)

// SASL mechanisms.
const (
	None        = ""
	Plain       = "PLAIN"
	ScramSHA256 = "SCRAM-SHA-256"
	ScramSHA512 = "SCRAM-SHA-512"
	OAuthBearer = "OAUTHBEARER"
	AWSMSKIAM   = "AWS_MSK_IAM"
)

// Config is how to reach and authenticate to the brokers. The zero value is
// plaintext without authentication.
type Config struct {
	TLS tlsfiles.Config
	// SASLMechanism is one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512,
	// OAUTHBEARER, AWS_MSK_IAM (empty: no SASL).
	SASLMechanism string
	SASLUser      string // PLAIN and SCRAM
	SASLPassword  string // PLAIN and SCRAM; or SASLPasswordFile
	// SASLPasswordFile holds the password; read at each authentication, so a
	// rotated secret is used by the next connection.
	SASLPasswordFile string
	// OAuthTokenFile holds the OAUTHBEARER token; read at each
	// authentication (a sidecar or the platform rewrites it before expiry).
	OAuthTokenFile string
	// AWS_MSK_IAM takes its credentials from the standard AWS chain
	// (environment, shared config and credentials files, web identity,
	// container and instance roles); nothing to set here.
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	var p config.Problems
	p.Nested("TLS", c.TLS.Validate())
	switch m := strings.ToUpper(c.SASLMechanism); m {
	case None:
		if c.SASLUser != "" || c.SASLPassword != "" || c.SASLPasswordFile != "" || c.OAuthTokenFile != "" {
			p.Add("SASLMechanism", "is required when SASL credentials are given")
		}
	case Plain, ScramSHA256, ScramSHA512:
		if c.SASLUser == "" {
			p.Add("SASLUser", "is required for %s", m)
		}
		if c.SASLPassword == "" && c.SASLPasswordFile == "" {
			p.Add("SASLPassword", "is required for %s (or a file holding it)", m)
		}
		tlsfiles.CheckSecret(&p, "SASLPassword", c.SASLPassword, c.SASLPasswordFile)
	case OAuthBearer:
		if c.OAuthTokenFile == "" {
			p.Add("OAuthTokenFile", "is required for OAUTHBEARER")
		} else if _, err := os.Stat(c.OAuthTokenFile); err != nil {
			p.Add("OAuthTokenFile", "cannot read %s", c.OAuthTokenFile)
		}
	case AWSMSKIAM:
		if !c.TLS.Used() {
			p.Add("SASLMechanism", "AWS_MSK_IAM needs TLS (MSK's IAM listener is TLS only)")
		}
	default:
		p.Add("SASLMechanism", "must be one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER, AWS_MSK_IAM (got %q)", c.SASLMechanism)
	}
	return p.Err()
}

// Opts are the client options for brokers under c, with franz-go's own log
// routed to log (nil: discarded). Callers append their role's options.
func Opts(brokers []string, c Config, log *slog.Logger) ([]kgo.Opt, error) {
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("kafka connection: %w", err)
	}
	opts := []kgo.Opt{kgo.SeedBrokers(brokers...)}
	if log != nil {
		// kslog maps franz-go's levels onto slog's and asks the handler
		// which are enabled, so the process's log level and format apply.
		opts = append(opts, kgo.WithLogger(kslog.New(log.With("component", "kafka-client"))))
	}
	tc, err := c.TLS.TLS()
	if err != nil {
		return nil, fmt.Errorf("kafka connection: %w", err)
	}
	if tc != nil {
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	mech, err := c.mechanism()
	if err != nil {
		return nil, fmt.Errorf("kafka connection: %w", err)
	}
	if mech != nil {
		opts = append(opts, kgo.SASL(mech))
	}
	return opts, nil
}

func (c Config) mechanism() (sasl.Mechanism, error) {
	user, pw, pwFile := c.SASLUser, c.SASLPassword, c.SASLPasswordFile
	password := func() (string, error) { return tlsfiles.Secret(pw, pwFile) }
	switch strings.ToUpper(c.SASLMechanism) {
	case None:
		return nil, nil
	case Plain:
		return plain.Plain(func(context.Context) (plain.Auth, error) {
			p, err := password()
			return plain.Auth{User: user, Pass: p}, err
		}), nil
	case ScramSHA256, ScramSHA512:
		fn := func(context.Context) (scram.Auth, error) {
			p, err := password()
			return scram.Auth{User: user, Pass: p}, err
		}
		if strings.ToUpper(c.SASLMechanism) == ScramSHA256 {
			return scram.Sha256(fn), nil
		}
		return scram.Sha512(fn), nil
	case OAuthBearer:
		tf := &tokenFile{path: c.OAuthTokenFile}
		return oauth.Oauth(func(context.Context) (oauth.Auth, error) {
			tok, err := tf.read()
			return oauth.Auth{Token: tok}, err
		}), nil
	case AWSMSKIAM:
		return awsIAM()
	}
	return nil, fmt.Errorf("unknown SASL mechanism %q", c.SASLMechanism)
}

// awsIAM signs with credentials from the standard AWS chain; the chain's
// cache refreshes expiring (role) credentials before each use.
func awsIAM() (sasl.Mechanism, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("AWS credentials chain: %w", err)
	}
	return aws.ManagedStreamingIAM(func(ctx context.Context) (aws.Auth, error) {
		cr, err := cfg.Credentials.Retrieve(ctx)
		if err != nil {
			return aws.Auth{}, fmt.Errorf("AWS credentials: %w", err)
		}
		return aws.Auth{AccessKey: cr.AccessKeyID, SecretKey: cr.SecretAccessKey, SessionToken: cr.SessionToken}, nil
	}), nil
}

// tokenFile reads an OAUTHBEARER token, again only when the file changed.
type tokenFile struct {
	path string

	mu    sync.Mutex
	mtime time.Time
	size  int64
	tok   string
}

func (t *tokenFile) read() (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fi, err := os.Stat(t.path)
	if err != nil {
		return "", fmt.Errorf("OAUTHBEARER token file: %w", err)
	}
	if t.tok != "" && fi.ModTime().Equal(t.mtime) && fi.Size() == t.size {
		return t.tok, nil
	}
	tok, err := tlsfiles.Secret("", t.path)
	if err != nil {
		return "", fmt.Errorf("OAUTHBEARER token file: %w", err)
	}
	if tok = strings.TrimSpace(tok); tok == "" {
		return "", fmt.Errorf("OAUTHBEARER token file %s is empty", t.path)
	}
	t.tok, t.mtime, t.size = tok, fi.ModTime(), fi.Size()
	return tok, nil
}
