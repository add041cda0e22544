package main

import (
	"tidemark/internal/kafkaconn"
	"tidemark/internal/tlsfiles"
)

// kafkaFlags are how a process reaches and authenticates to Kafka: the same
// flags in every command that talks to it (capture, apply, replay, status,
// and serve's status page). Secrets are taken from files too (--…-file,
// *_FILE), so none needs to sit in argv or the environment.
type kafkaFlags struct {
	KafkaTLS              bool   `field:"applier.Kafka.TLS.Enabled,capture.Relay.Kafka.TLS.Enabled,replay.Kafka.TLS.Enabled,status.Kafka.TLS.Enabled,page.Check.Kafka.TLS.Enabled" name:"kafka-tls" env:"TIDEMARK_KAFKA_TLS" help:"Connect to Kafka with TLS (implied by any other --kafka-tls-* or --kafka-ca-file flag)."`
	KafkaCAFile           string `field:"applier.Kafka.TLS.CAFile,capture.Relay.Kafka.TLS.CAFile,replay.Kafka.TLS.CAFile,status.Kafka.TLS.CAFile,page.Check.Kafka.TLS.CAFile" name:"kafka-ca-file" env:"TIDEMARK_KAFKA_CA_FILE" help:"PEM CA bundle the brokers' certificates are checked against (default: the system's)."`
	KafkaCertFile         string `field:"applier.Kafka.TLS.CertFile,capture.Relay.Kafka.TLS.CertFile,replay.Kafka.TLS.CertFile,status.Kafka.TLS.CertFile,page.Check.Kafka.TLS.CertFile" name:"kafka-cert-file" env:"TIDEMARK_KAFKA_CERT_FILE" help:"PEM client certificate (mTLS)."`
	KafkaKeyFile          string `field:"applier.Kafka.TLS.KeyFile,capture.Relay.Kafka.TLS.KeyFile,replay.Kafka.TLS.KeyFile,status.Kafka.TLS.KeyFile,page.Check.Kafka.TLS.KeyFile" name:"kafka-key-file" env:"TIDEMARK_KAFKA_KEY_FILE" help:"PEM key of --kafka-cert-file."`
	KafkaServerName       string `field:"applier.Kafka.TLS.ServerName,capture.Relay.Kafka.TLS.ServerName,replay.Kafka.TLS.ServerName,status.Kafka.TLS.ServerName,page.Check.Kafka.TLS.ServerName" name:"kafka-tls-server-name" env:"TIDEMARK_KAFKA_TLS_SERVER_NAME" help:"Name checked in the brokers' certificates (default: the host dialled)."`
	KafkaInsecure         bool   `field:"applier.Kafka.TLS.InsecureSkipVerify,capture.Relay.Kafka.TLS.InsecureSkipVerify,replay.Kafka.TLS.InsecureSkipVerify,status.Kafka.TLS.InsecureSkipVerify,page.Check.Kafka.TLS.InsecureSkipVerify" name:"kafka-tls-insecure-skip-verify" env:"TIDEMARK_KAFKA_TLS_INSECURE_SKIP_VERIFY" help:"Accept any broker certificate (a lab only: anyone on the path can read and forge the stream)."`
	KafkaSASLMechanism    string `field:"applier.Kafka.SASLMechanism,capture.Relay.Kafka.SASLMechanism,replay.Kafka.SASLMechanism,status.Kafka.SASLMechanism,page.Check.Kafka.SASLMechanism" name:"kafka-sasl-mechanism" env:"TIDEMARK_KAFKA_SASL_MECHANISM" help:"PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER or AWS_MSK_IAM (credentials from the standard AWS chain); empty: no SASL."`
	KafkaSASLUser         string `field:"applier.Kafka.SASLUser,capture.Relay.Kafka.SASLUser,replay.Kafka.SASLUser,status.Kafka.SASLUser,page.Check.Kafka.SASLUser" name:"kafka-sasl-user" env:"TIDEMARK_KAFKA_SASL_USER" help:"SASL user (PLAIN, SCRAM)."`
	KafkaSASLPassword     string `field:"applier.Kafka.SASLPassword,capture.Relay.Kafka.SASLPassword,replay.Kafka.SASLPassword,status.Kafka.SASLPassword,page.Check.Kafka.SASLPassword" name:"kafka-sasl-password" env:"TIDEMARK_KAFKA_SASL_PASSWORD" secret:"true" help:"SASL password (PLAIN, SCRAM); prefer --kafka-sasl-password-file."`
	KafkaSASLPasswordFile string `field:"applier.Kafka.SASLPasswordFile,capture.Relay.Kafka.SASLPasswordFile,replay.Kafka.SASLPasswordFile,status.Kafka.SASLPasswordFile,page.Check.Kafka.SASLPasswordFile" name:"kafka-sasl-password-file" env:"TIDEMARK_KAFKA_SASL_PASSWORD_FILE" help:"File holding the SASL password, read at each connection (a rotated secret is picked up)."`
	KafkaOAuthTokenFile   string `field:"applier.Kafka.OAuthTokenFile,capture.Relay.Kafka.OAuthTokenFile,replay.Kafka.OAuthTokenFile,status.Kafka.OAuthTokenFile,page.Check.Kafka.OAuthTokenFile" name:"kafka-oauth-token-file" env:"TIDEMARK_KAFKA_OAUTH_TOKEN_FILE" help:"File holding the OAUTHBEARER token, read again when it changes."`
}

func (f kafkaFlags) kafkaConn() kafkaconn.Config {
	return kafkaconn.Config{
		TLS: tlsfiles.Config{Enabled: f.KafkaTLS, CAFile: f.KafkaCAFile, CertFile: f.KafkaCertFile, KeyFile: f.KafkaKeyFile,
			ServerName: f.KafkaServerName, InsecureSkipVerify: f.KafkaInsecure},
		SASLMechanism: f.KafkaSASLMechanism, SASLUser: f.KafkaSASLUser, SASLPassword: f.KafkaSASLPassword,
		SASLPasswordFile: f.KafkaSASLPasswordFile, OAuthTokenFile: f.KafkaOAuthTokenFile,
	}
}
