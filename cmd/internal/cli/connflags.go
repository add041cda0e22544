package cli

import (
	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/kafkaconn"
)

// KafkaFlags binds how a process reaches and authenticates to Kafka into k:
// the same flags in every command that talks to it (capture, apply, replay,
// status, and serve's status page). Secrets are taken from files too
// (--…-file, *_FILE), so none needs to sit in argv or the environment.
func KafkaFlags(b *Binder, k *kafkaconn.Config) {
	b.shared(&k.TLS.Enabled, "kafka-tls", "Connect to Kafka with TLS (implied by any other --kafka-tls-* or --kafka-ca-file flag).")
	b.shared(&k.TLS.CAFile, "kafka-ca-file", "PEM CA bundle the brokers' certificates are checked against (default: the system's).")
	b.shared(&k.TLS.CertFile, "kafka-cert-file", "PEM client certificate (mTLS).")
	b.shared(&k.TLS.KeyFile, "kafka-key-file", "PEM key of --kafka-cert-file.")
	b.shared(&k.TLS.ServerName, "kafka-tls-server-name", "Name checked in the brokers' certificates (default: the host dialled).")
	b.shared(&k.TLS.InsecureSkipVerify, "kafka-tls-insecure-skip-verify", "Accept any broker certificate (a lab only: anyone on the path can read and forge the stream).")
	b.shared(&k.SASLMechanism, "kafka-sasl-mechanism", "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER or AWS_MSK_IAM (credentials from the standard AWS chain); empty: no SASL.")
	b.shared(&k.SASLUser, "kafka-sasl-user", "SASL user (PLAIN, SCRAM).")
	b.shared(&k.SASLPassword, "kafka-sasl-password", "SASL password (PLAIN, SCRAM); prefer --kafka-sasl-password-file.").Secret()
	b.shared(&k.SASLPasswordFile, "kafka-sasl-password-file", "File holding the SASL password, read at each connection (a rotated secret is picked up).")
	b.shared(&k.OAuthTokenFile, "kafka-oauth-token-file", "File holding the OAUTHBEARER token, read again when it changes.")
}

// RedisFlags binds how a process reaches and authenticates to the cache
// tier into r: --redis (help says what the command uses it for) and the
// same connection flags wherever --redis is taken.
func RedisFlags(b *Binder, r *cache.RedisConfig, help string) {
	b.shared(&r.URL, "redis", help)
	b.shared(&r.Mode, "redis-mode", "auto (ask a single address whether it is a Cluster node: a Cluster configuration endpoint gets a Cluster client), standalone, cluster or sentinel (the URL's addresses are Sentinels).").Enum("auto,standalone,cluster,sentinel")
	b.shared(&r.Username, "redis-user", "Redis ACL user (default: the URL's, else default).")
	b.shared(&r.Password, "redis-password", "Redis password; prefer --redis-password-file (a password in --redis shows in ps).").Secret()
	b.shared(&r.PasswordFile, "redis-password-file", "File holding the Redis password, read at each new connection (a rotated secret is picked up).")
	b.shared(&r.TLS.Enabled, "redis-tls", "Connect with TLS (rediss:// implies it).")
	b.shared(&r.TLS.CAFile, "redis-ca-file", "PEM CA bundle the Redis servers' certificates are checked against (default: the system's).")
	b.shared(&r.TLS.CertFile, "redis-cert-file", "PEM client certificate for Redis (mTLS).")
	b.shared(&r.TLS.KeyFile, "redis-key-file", "PEM key of --redis-cert-file.")
	b.shared(&r.TLS.ServerName, "redis-tls-server-name", "Name checked in the Redis servers' certificates (default: the host dialled).")
	b.shared(&r.TLS.InsecureSkipVerify, "redis-tls-insecure-skip-verify", "Accept any Redis certificate (a lab only).")
	b.shared(&r.SentinelMaster, "redis-sentinel-master", "Sentinel master set name (or the path of a redis+sentinel:// URL).")
	b.shared(&r.SentinelAddrs, "redis-sentinel-addrs", "Sentinel addresses (default: the URL's).")
	b.shared(&r.SentinelUsername, "redis-sentinel-user", "ACL user on the Sentinels.")
	b.shared(&r.SentinelPassword, "redis-sentinel-password", "Password on the Sentinels; prefer --redis-sentinel-password-file.").Secret()
	b.shared(&r.SentinelPasswordFile, "redis-sentinel-password-file", "File holding the Sentinels' password.")
}

// CheckRedis checks the connection settings r when a URL is given (a
// command that requires one says so itself), under the field name "redis".
func CheckRedis(p *config.Problems, r cache.RedisConfig) {
	if r.URL != "" {
		p.Nested("redis", r.Validate())
	}
}
