package cli

import (
	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/kafkaconn"
	"github.com/tidemark/tidemark/internal/tlsfiles"
)

// KafkaFlags are how a process reaches and authenticates to Kafka: the same
// flags in every command that talks to it (capture, apply, replay, status,
// and serve's status page). Secrets are taken from files too (--…-file,
// *_FILE), so none needs to sit in argv or the environment.
type KafkaFlags struct {
	KafkaTLS              bool   `field:"applier.Kafka.TLS.Enabled,capture.Relay.Kafka.TLS.Enabled,replay.Kafka.TLS.Enabled,status.Kafka.TLS.Enabled,page.Check.Kafka.TLS.Enabled,chaos.KafkaConn.TLS.Enabled" name:"kafka-tls" env:"TIDEMARK_KAFKA_TLS" help:"Connect to Kafka with TLS (implied by any other --kafka-tls-* or --kafka-ca-file flag)."`
	KafkaCAFile           string `field:"applier.Kafka.TLS.CAFile,capture.Relay.Kafka.TLS.CAFile,replay.Kafka.TLS.CAFile,status.Kafka.TLS.CAFile,page.Check.Kafka.TLS.CAFile,chaos.KafkaConn.TLS.CAFile" name:"kafka-ca-file" env:"TIDEMARK_KAFKA_CA_FILE" help:"PEM CA bundle the brokers' certificates are checked against (default: the system's)."`
	KafkaCertFile         string `field:"applier.Kafka.TLS.CertFile,capture.Relay.Kafka.TLS.CertFile,replay.Kafka.TLS.CertFile,status.Kafka.TLS.CertFile,page.Check.Kafka.TLS.CertFile,chaos.KafkaConn.TLS.CertFile" name:"kafka-cert-file" env:"TIDEMARK_KAFKA_CERT_FILE" help:"PEM client certificate (mTLS)."`
	KafkaKeyFile          string `field:"applier.Kafka.TLS.KeyFile,capture.Relay.Kafka.TLS.KeyFile,replay.Kafka.TLS.KeyFile,status.Kafka.TLS.KeyFile,page.Check.Kafka.TLS.KeyFile,chaos.KafkaConn.TLS.KeyFile" name:"kafka-key-file" env:"TIDEMARK_KAFKA_KEY_FILE" help:"PEM key of --kafka-cert-file."`
	KafkaServerName       string `field:"applier.Kafka.TLS.ServerName,capture.Relay.Kafka.TLS.ServerName,replay.Kafka.TLS.ServerName,status.Kafka.TLS.ServerName,page.Check.Kafka.TLS.ServerName,chaos.KafkaConn.TLS.ServerName" name:"kafka-tls-server-name" env:"TIDEMARK_KAFKA_TLS_SERVER_NAME" help:"Name checked in the brokers' certificates (default: the host dialled)."`
	KafkaInsecure         bool   `field:"applier.Kafka.TLS.InsecureSkipVerify,capture.Relay.Kafka.TLS.InsecureSkipVerify,replay.Kafka.TLS.InsecureSkipVerify,status.Kafka.TLS.InsecureSkipVerify,page.Check.Kafka.TLS.InsecureSkipVerify,chaos.KafkaConn.TLS.InsecureSkipVerify" name:"kafka-tls-insecure-skip-verify" env:"TIDEMARK_KAFKA_TLS_INSECURE_SKIP_VERIFY" help:"Accept any broker certificate (a lab only: anyone on the path can read and forge the stream)."`
	KafkaSASLMechanism    string `field:"applier.Kafka.SASLMechanism,capture.Relay.Kafka.SASLMechanism,replay.Kafka.SASLMechanism,status.Kafka.SASLMechanism,page.Check.Kafka.SASLMechanism,chaos.KafkaConn.SASLMechanism" name:"kafka-sasl-mechanism" env:"TIDEMARK_KAFKA_SASL_MECHANISM" help:"PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER or AWS_MSK_IAM (credentials from the standard AWS chain); empty: no SASL."`
	KafkaSASLUser         string `field:"applier.Kafka.SASLUser,capture.Relay.Kafka.SASLUser,replay.Kafka.SASLUser,status.Kafka.SASLUser,page.Check.Kafka.SASLUser,chaos.KafkaConn.SASLUser" name:"kafka-sasl-user" env:"TIDEMARK_KAFKA_SASL_USER" help:"SASL user (PLAIN, SCRAM)."`
	KafkaSASLPassword     string `field:"applier.Kafka.SASLPassword,capture.Relay.Kafka.SASLPassword,replay.Kafka.SASLPassword,status.Kafka.SASLPassword,page.Check.Kafka.SASLPassword,chaos.KafkaConn.SASLPassword" name:"kafka-sasl-password" env:"TIDEMARK_KAFKA_SASL_PASSWORD" secret:"true" help:"SASL password (PLAIN, SCRAM); prefer --kafka-sasl-password-file."`
	KafkaSASLPasswordFile string `field:"applier.Kafka.SASLPasswordFile,capture.Relay.Kafka.SASLPasswordFile,replay.Kafka.SASLPasswordFile,status.Kafka.SASLPasswordFile,page.Check.Kafka.SASLPasswordFile,chaos.KafkaConn.SASLPasswordFile" name:"kafka-sasl-password-file" env:"TIDEMARK_KAFKA_SASL_PASSWORD_FILE" help:"File holding the SASL password, read at each connection (a rotated secret is picked up)."`
	KafkaOAuthTokenFile   string `field:"applier.Kafka.OAuthTokenFile,capture.Relay.Kafka.OAuthTokenFile,replay.Kafka.OAuthTokenFile,status.Kafka.OAuthTokenFile,page.Check.Kafka.OAuthTokenFile,chaos.KafkaConn.OAuthTokenFile" name:"kafka-oauth-token-file" env:"TIDEMARK_KAFKA_OAUTH_TOKEN_FILE" help:"File holding the OAUTHBEARER token, read again when it changes."`
}

func (f KafkaFlags) KafkaConn() kafkaconn.Config {
	return kafkaconn.Config{
		TLS: tlsfiles.Config{Enabled: f.KafkaTLS, CAFile: f.KafkaCAFile, CertFile: f.KafkaCertFile, KeyFile: f.KafkaKeyFile,
			ServerName: f.KafkaServerName, InsecureSkipVerify: f.KafkaInsecure},
		SASLMechanism: f.KafkaSASLMechanism, SASLUser: f.KafkaSASLUser, SASLPassword: f.KafkaSASLPassword,
		SASLPasswordFile: f.KafkaSASLPasswordFile, OAuthTokenFile: f.KafkaOAuthTokenFile,
	}
}

// RedisFlags are how a process reaches and authenticates to the cache tier,
// beyond the URL: the same flags wherever --redis is taken.
type RedisFlags struct {
	RedisMode                 string   `field:"redis.Mode" name:"redis-mode" env:"TIDEMARK_REDIS_MODE" default:"${redis_Mode}" enum:"auto,standalone,cluster,sentinel" help:"auto (ask a single address whether it is a Cluster node: a Cluster configuration endpoint gets a Cluster client), standalone, cluster or sentinel (the URL's addresses are Sentinels)."`
	RedisUser                 string   `field:"redis.Username" name:"redis-user" env:"TIDEMARK_REDIS_USER" help:"Redis ACL user (default: the URL's, else default)."`
	RedisPassword             string   `field:"redis.Password" name:"redis-password" env:"TIDEMARK_REDIS_PASSWORD" secret:"true" help:"Redis password; prefer --redis-password-file (a password in --redis shows in ps)."`
	RedisPasswordFile         string   `field:"redis.PasswordFile" name:"redis-password-file" env:"TIDEMARK_REDIS_PASSWORD_FILE" help:"File holding the Redis password, read at each new connection (a rotated secret is picked up)."`
	RedisTLS                  bool     `field:"redis.TLS.Enabled" name:"redis-tls" env:"TIDEMARK_REDIS_TLS" help:"Connect with TLS (rediss:// implies it)."`
	RedisCAFile               string   `field:"redis.TLS.CAFile" name:"redis-ca-file" env:"TIDEMARK_REDIS_CA_FILE" help:"PEM CA bundle the Redis servers' certificates are checked against (default: the system's)."`
	RedisCertFile             string   `field:"redis.TLS.CertFile" name:"redis-cert-file" env:"TIDEMARK_REDIS_CERT_FILE" help:"PEM client certificate for Redis (mTLS)."`
	RedisKeyFile              string   `field:"redis.TLS.KeyFile" name:"redis-key-file" env:"TIDEMARK_REDIS_KEY_FILE" help:"PEM key of --redis-cert-file."`
	RedisServerName           string   `field:"redis.TLS.ServerName" name:"redis-tls-server-name" env:"TIDEMARK_REDIS_TLS_SERVER_NAME" help:"Name checked in the Redis servers' certificates (default: the host dialled)."`
	RedisInsecure             bool     `field:"redis.TLS.InsecureSkipVerify" name:"redis-tls-insecure-skip-verify" env:"TIDEMARK_REDIS_TLS_INSECURE_SKIP_VERIFY" help:"Accept any Redis certificate (a lab only)."`
	RedisSentinelMaster       string   `field:"redis.SentinelMaster" name:"redis-sentinel-master" env:"TIDEMARK_REDIS_SENTINEL_MASTER" help:"Sentinel master set name (or the path of a redis+sentinel:// URL)."`
	RedisSentinelAddrs        []string `field:"redis.SentinelAddrs" name:"redis-sentinel-addrs" env:"TIDEMARK_REDIS_SENTINEL_ADDRS" sep:"," help:"Sentinel addresses (default: the URL's)."`
	RedisSentinelUser         string   `field:"redis.SentinelUsername" name:"redis-sentinel-user" env:"TIDEMARK_REDIS_SENTINEL_USER" help:"ACL user on the Sentinels."`
	RedisSentinelPassword     string   `field:"redis.SentinelPassword" name:"redis-sentinel-password" env:"TIDEMARK_REDIS_SENTINEL_PASSWORD" secret:"true" help:"Password on the Sentinels; prefer --redis-sentinel-password-file."`
	RedisSentinelPasswordFile string   `field:"redis.SentinelPasswordFile" name:"redis-sentinel-password-file" env:"TIDEMARK_REDIS_SENTINEL_PASSWORD_FILE" help:"File holding the Sentinels' password."`
}

// redisConn is the cache tier's connection settings for url.
func (f RedisFlags) RedisConn(url string) cache.RedisConfig {
	return cache.RedisConfig{URL: url, Mode: f.RedisMode, Username: f.RedisUser, Password: f.RedisPassword, PasswordFile: f.RedisPasswordFile,
		TLS: tlsfiles.Config{Enabled: f.RedisTLS, CAFile: f.RedisCAFile, CertFile: f.RedisCertFile, KeyFile: f.RedisKeyFile,
			ServerName: f.RedisServerName, InsecureSkipVerify: f.RedisInsecure},
		SentinelMaster: f.RedisSentinelMaster, SentinelAddrs: f.RedisSentinelAddrs, SentinelUsername: f.RedisSentinelUser,
		SentinelPassword: f.RedisSentinelPassword, SentinelPasswordFile: f.RedisSentinelPasswordFile}
}

// validateRedis checks the connection settings when a URL is given (a
// command that requires one says so itself).
func (f RedisFlags) ValidateRedis(p *config.Problems, url string) {
	if url != "" {
		ValidateAs(p, "redis", f.RedisConn(url).Validate())
	}
}
