package cache

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/secretfile"
	"github.com/tidemark/tidemark/internal/tlsfiles"
)

// Redis modes (RedisConfig.Mode).
const (
	ModeAuto       = "auto"       // one address: ask the server (INFO server's redis_mode)
	ModeStandalone = "standalone" // one server (or a primary behind a proxy)
	ModeCluster    = "cluster"    // Redis Cluster: the addresses are seeds
	ModeSentinel   = "sentinel"   // the addresses are Sentinels; SentinelMaster names the master set
)

// RedisConfig is how to reach and authenticate to the cache tier. URL is
// redis:// or rediss:// with one address or a comma-separated list, or
// redis+sentinel://[user:password@]s1:26379,s2:26379/master[/db]. Fields
// given here override the URL's.
type RedisConfig struct {
	URL string
	// URLFile, when set, is the file URL came from (a mounted Secret, a
	// Vault agent's file): its user and password are read again for every
	// new connection, so a rotated password is picked up without a restart
	// (the addresses, mode and TLS stay as read at start).
	URLFile string
	// Mode is auto, standalone, cluster or sentinel; empty goes by the URL
	// alone (one address standalone, several a Cluster, redis+sentinel a
	// Sentinel set). auto asks a single address what it is, so a Cluster's
	// configuration endpoint (ElastiCache, Memorystore) gets a Cluster client.
	Mode string

	Username     string // ACL user (default: the URL's, else "default")
	Password     string // or PasswordFile; default: the URL's
	PasswordFile string // read at each new connection, so a rotated secret is picked up

	TLS tlsfiles.Config // rediss:// turns it on; CA, client certificate, server name

	SentinelMaster       string   // master set name (sentinel mode; or the redis+sentinel URL's path)
	SentinelAddrs        []string // Sentinels (default: the URL's addresses)
	SentinelUsername     string
	SentinelPassword     string // or SentinelPasswordFile
	SentinelPasswordFile string
}

// Validate reports every problem at once.
func (c RedisConfig) Validate() error {
	var p config.Problems
	if c.URL == "" && len(c.SentinelAddrs) == 0 {
		p.Add("URL", "is required")
	} else if c.URL != "" {
		if _, err := parseRedisURL(c.URL); err != nil {
			p.Add("URL", "%v", err)
		}
	}
	switch c.Mode {
	case "", ModeAuto, ModeStandalone, ModeCluster, ModeSentinel:
	default:
		p.Add("Mode", "must be auto, standalone, cluster or sentinel (got %q)", c.Mode)
	}
	p.Nested("TLS", c.TLS.Validate())
	tlsfiles.CheckSecret(&p, "Password", c.Password, c.PasswordFile)
	tlsfiles.CheckSecret(&p, "SentinelPassword", c.SentinelPassword, c.SentinelPasswordFile)
	return p.Err()
}

// redisURL is a parsed cache-tier URL.
type redisURL struct {
	scheme             string // redis, rediss, redis+sentinel
	addrs              []string
	username, password string
	hasPassword        bool
	db                 int
	master             string         // redis+sentinel
	opts               *redis.Options // go-redis's own parse of a redis:// URL (its first address; query options)
}

func parseRedisURL(s string) (*redisURL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("redis URL %q: %w", redact(s), err)
	}
	r := &redisURL{scheme: u.Scheme}
	if u.User != nil {
		r.username = u.User.Username()
		r.password, r.hasPassword = u.User.Password()
	}
	for _, h := range strings.Split(u.Host, ",") {
		if h == "" {
			return nil, fmt.Errorf("redis URL %q: empty address", redact(s))
		}
		if _, _, err := net.SplitHostPort(h); err != nil {
			port := "6379"
			if u.Scheme == "redis+sentinel" {
				port = "26379"
			}
			h = net.JoinHostPort(h, port)
		}
		r.addrs = append(r.addrs, h)
	}
	path := strings.FieldsFunc(u.Path, func(r rune) bool { return r == '/' })
	switch u.Scheme {
	case "redis", "rediss":
		if len(path) > 1 {
			return nil, fmt.Errorf("redis URL %q: path must be /db", redact(s))
		}
		if len(path) == 1 {
			if r.db, err = strconv.Atoi(path[0]); err != nil {
				return nil, fmt.Errorf("redis URL %q: db %q is not a number", redact(s), path[0])
			}
		}
		// go-redis's own parse takes one address; a seed list's query
		// options (timeouts, pool, retries) are parsed with the first seed.
		one := s
		if len(r.addrs) > 1 {
			v := *u
			v.Host = r.addrs[0]
			one = v.String()
		}
		if r.opts, err = redis.ParseURL(one); err != nil {
			return nil, fmt.Errorf("redis URL %q: %w", redact(s), err)
		}
	case "redis+sentinel":
		if len(path) > 2 {
			return nil, fmt.Errorf("redis URL %q: path must be /master or /master/db", redact(s))
		}
		if len(path) > 0 {
			r.master = path[0]
		}
		if len(path) == 2 {
			if r.db, err = strconv.Atoi(path[1]); err != nil {
				return nil, fmt.Errorf("redis URL %q: db %q is not a number", redact(s), path[1])
			}
		}
	default:
		return nil, fmt.Errorf("redis URL %q: scheme must be redis, rediss or redis+sentinel", redact(s))
	}
	return r, nil
}

// OpenRedis builds the cache tier's client. In auto mode with one address
// it asks the server (INFO server) whether it is a Cluster node; when the
// server cannot be asked it goes by the URL and logs that it did: a
// standalone client on a Cluster node gets MOVED errors, never another
// key's data, so a wrong choice fails loudly. Every call's context
// deadline binds the socket reads and writes (ContextTimeoutEnabled).
func OpenRedis(cfg RedisConfig, log *slog.Logger) (redis.UniversalClient, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("cache: redis: %w", err)
	}
	u := &redisURL{scheme: "redis"}
	if cfg.URL != "" {
		var err error
		if u, err = parseRedisURL(cfg.URL); err != nil {
			return nil, fmt.Errorf("cache: %w", err)
		}
	}
	tcfg := cfg.TLS
	if u.scheme == "rediss" {
		tcfg.Enabled = true
	}
	tc, err := tcfg.TLS()
	if err != nil {
		return nil, fmt.Errorf("cache: redis: %w", err)
	}
	user := cfg.Username
	if user == "" {
		user = u.username
	}
	pw, pwFile := cfg.Password, cfg.PasswordFile
	if pw == "" && pwFile == "" {
		pw = u.password
	}
	creds := func(context.Context) (string, string, error) {
		p, err := tlsfiles.Secret(pw, pwFile)
		return user, p, err
	}
	if cfg.URLFile != "" && cfg.Password == "" && pwFile == "" {
		// The password, and the user unless given apart, follow the file.
		pwFile = cfg.URLFile
		creds = func(context.Context) (string, string, error) {
			s, err := secretfile.Read(cfg.URLFile)
			if err != nil {
				return "", "", err
			}
			cur, err := parseRedisURL(s)
			if err != nil {
				return "", "", fmt.Errorf("%s: %w", cfg.URLFile, err)
			}
			u := cfg.Username
			if u == "" {
				u = cur.username
			}
			return u, cur.password, nil
		}
	}
	mode := cfg.Mode
	if mode == "" || (mode == ModeAuto && u.scheme == "redis+sentinel") {
		switch {
		case u.scheme == "redis+sentinel":
			mode = ModeSentinel
		case len(u.addrs) > 1:
			mode = ModeCluster
		default:
			mode = ModeStandalone
		}
	}
	if mode == ModeAuto {
		if len(u.addrs) > 1 {
			mode = ModeCluster
		} else {
			mode = detectMode(u, tc, creds, log)
		}
	}
	switch mode {
	case ModeStandalone:
		if len(u.addrs) != 1 {
			return nil, fmt.Errorf("cache: redis: standalone mode takes one address, got %d", len(u.addrs))
		}
		opt := u.opts
		if opt == nil {
			opt = &redis.Options{Addr: u.addrs[0], DB: u.db}
		}
		opt.Username, opt.Password = user, pw
		if pwFile != "" {
			opt.CredentialsProviderContext = creds
		}
		opt.TLSConfig = serverName(tc, u.addrs[0])
		opt.ContextTimeoutEnabled = true
		return redis.NewClient(opt), nil
	case ModeCluster:
		if u.db != 0 {
			return nil, fmt.Errorf("cache: redis URL %q: Redis Cluster has only db 0, got %d", redact(cfg.URL), u.db)
		}
		opt := &redis.ClusterOptions{Addrs: u.addrs, Username: user, Password: pw, TLSConfig: serverName(tc, u.addrs[0]), ContextTimeoutEnabled: true}
		if pwFile != "" {
			opt.CredentialsProviderContext = creds
		}
		if u.opts != nil { // keep the URL's query options (timeouts, pool)
			o := u.opts
			opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = o.DialTimeout, o.ReadTimeout, o.WriteTimeout
			opt.PoolSize, opt.MinIdleConns, opt.MaxRetries = o.PoolSize, o.MinIdleConns, o.MaxRetries
		}
		return redis.NewClusterClient(opt), nil
	case ModeSentinel:
		master := cfg.SentinelMaster
		if master == "" {
			master = u.master
		}
		if master == "" {
			return nil, fmt.Errorf("cache: redis: sentinel mode needs the master set's name (redis+sentinel://host:26379/<master> or the sentinel master setting)")
		}
		addrs := cfg.SentinelAddrs
		if len(addrs) == 0 {
			addrs = u.addrs
		}
		spw, err := tlsfiles.Secret(cfg.SentinelPassword, cfg.SentinelPasswordFile)
		if err != nil {
			return nil, fmt.Errorf("cache: redis: sentinel password: %w", err)
		}
		opt := &redis.FailoverOptions{MasterName: master, SentinelAddrs: addrs, SentinelUsername: cfg.SentinelUsername, SentinelPassword: spw,
			DB: u.db, Username: user, Password: pw, TLSConfig: tc, ContextTimeoutEnabled: true}
		if pwFile != "" {
			opt.CredentialsProviderContext = creds
		}
		return redis.NewFailoverClient(opt), nil
	}
	return nil, fmt.Errorf("cache: redis: unknown mode %q", mode)
}

// serverName fixes the name checked in the server's certificate to addr's
// host unless one is given, so one config works for standalone and seeds.
func serverName(tc *tls.Config, addr string) *tls.Config {
	if tc == nil || tc.ServerName != "" {
		return tc
	}
	tc = tc.Clone()
	if h, _, err := net.SplitHostPort(addr); err == nil {
		tc.ServerName = h
	}
	return tc
}

// detectMode asks one address whether it is a Cluster node.
func detectMode(u *redisURL, tc *tls.Config, creds func(context.Context) (string, string, error), log *slog.Logger) string {
	c := redis.NewClient(&redis.Options{Addr: u.addrs[0], TLSConfig: serverName(tc, u.addrs[0]), CredentialsProviderContext: creds,
		DialTimeout: 3 * time.Second, ReadTimeout: 3 * time.Second, MaxRetries: 1, ContextTimeoutEnabled: true})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		log.Warn("cannot ask the cache tier whether it is a Redis Cluster; going by the URL (one address: standalone). Set the Redis mode to cluster for a Cluster configuration endpoint",
			"addr", u.addrs[0], "err", err)
		return ModeStandalone
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_mode:"); ok {
			switch v {
			case "cluster":
				log.Info("cache tier is a Redis Cluster: using a Cluster client", "seed", u.addrs[0])
				return ModeCluster
			case "sentinel":
				log.Warn("the Redis address is a Sentinel; give the master set's name (sentinel mode)", "addr", u.addrs[0])
			}
		}
	}
	return ModeStandalone
}

// RedisLogger routes go-redis's own log lines (it has one process-wide
// logger) to log at warn: they report dropped connections, failovers and
// pool trouble.
func RedisLogger(log *slog.Logger) { redis.SetLogger(redisLog{log.With("component", "redis-client")}) }

type redisLog struct{ log *slog.Logger }

func (l redisLog) Printf(ctx context.Context, format string, v ...any) {
	l.log.WarnContext(ctx, strings.TrimSpace(fmt.Sprintf(format, v...)))
}

// DefaultRedisConfig asks a single address what it is.
func DefaultRedisConfig() RedisConfig { return RedisConfig{Mode: ModeAuto} }

// ACLRules is the least-privilege Redis ACL rule set of a tidemark user of
// namespace ns (ACL SETUSER <user> on ><password> ACLRules(ns)): its keys
// only, every command but the @dangerous ones, and INFO back (the server
// identity, the eviction-policy check and the auto mode read INFO sections;
// managed services that rename CONFIG still answer INFO).
func ACLRules(ns string) string {
	return "resetkeys ~" + ns + ":v1:* ~{" + ns + ":v1:* resetchannels +@all -@dangerous +info"
}

// IsNoPerm says Redis refused a command or key to the ACL user (NOPERM): a
// rule of ACLRules is missing, which no retry fixes.
func IsNoPerm(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "NOPERM")
}

// ACLPoolRules is what a user of a namespace needs beyond ACLRules when its
// source pool is another name (a namespace upgrade's new namespace, or a
// namespace beside the default pool): the pool's hash-tagged budget and
// rollout keys ({<pool>:v1:*) and its plain ones, the serve processes
// (<pool>:v1:_serve) and the namespaces (<pool>:v1:_namespaces).
func ACLPoolRules(pool string) string {
	return "~" + pool + ":v1:* ~{" + pool + ":v1:*"
}
