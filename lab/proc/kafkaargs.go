package proc

import (
	"strings"

	"github.com/tidemark/tidemark/internal/kafkaconn"
)

// KafkaArgs are the command-line flags with which a tidemark process
// reaches brokers as c says, as a user would write them: a password is
// passed only as a file (c.SASLPassword is not turned into a flag; give
// SASLPasswordFile).
func KafkaArgs(brokers []string, c kafkaconn.Config) []string {
	args := []string{"--kafka", strings.Join(brokers, ",")}
	add := func(flag, v string) {
		if v != "" {
			args = append(args, flag, v)
		}
	}
	if c.TLS.Enabled {
		args = append(args, "--kafka-tls")
	}
	if c.TLS.InsecureSkipVerify {
		args = append(args, "--kafka-tls-insecure-skip-verify")
	}
	add("--kafka-ca-file", c.TLS.CAFile)
	add("--kafka-cert-file", c.TLS.CertFile)
	add("--kafka-key-file", c.TLS.KeyFile)
	add("--kafka-tls-server-name", c.TLS.ServerName)
	add("--kafka-sasl-mechanism", c.SASLMechanism)
	add("--kafka-sasl-user", c.SASLUser)
	add("--kafka-sasl-password-file", c.SASLPasswordFile)
	add("--kafka-oauth-token-file", c.OAuthTokenFile)
	return args
}
