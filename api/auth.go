package api

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/sync/singleflight"
	"golang.org/x/time/rate"
)

var (
	// errUnauthorized: no key, a malformed key or a key nobody issued (401).
	errUnauthorized = errors.New("api: unauthorized")
	// errAuthUnavailable: the key could not be checked (Postgres down); 503,
	// never 401, so clients do not drop good keys during an outage.
	errAuthUnavailable = errors.New("api: api key check unavailable")
	// errAuthThrottled: key lookups are over their per-process rate (a
	// flood of unknown keys); answered like errAuthUnavailable, not logged.
	errAuthThrottled = errors.New("api: api key lookups over their rate")
)

// keyPrefix marks tidemark API keys so they are recognisable in leaks.
const keyPrefix = "tmk_"

// Querier is the part of a pgx pool that key lookups and creation need.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// CreateAPIKey issues a new API key for tenant and stores only its SHA-256.
// The returned key cannot be recovered later.
func CreateAPIKey(ctx context.Context, db Querier, tenant string) (string, error) {
	if err := validID("tenant", tenant); err != nil {
		return "", err
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", fmt.Errorf("api: create api key: %w", err)
	}
	key := keyPrefix + base64.RawURLEncoding.EncodeToString(raw[:])
	sum := sha256.Sum256([]byte(key))
	if _, err := db.Exec(ctx, `INSERT INTO tidemark.api_keys (key_sha256, tenant_id) VALUES ($1, $2)`, sum[:], tenant); err != nil {
		return "", fmt.Errorf("api: create api key: %w", err)
	}
	return key, nil
}

// bearerKey extracts the key of an "Authorization: Bearer <key>" header.
func bearerKey(header string) (string, bool) {
	scheme, key, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	key = strings.TrimSpace(key)
	return key, key != "" && len(key) <= 256
}

// authenticator maps API keys to tenants. Answers are cached in-process so a
// cache-hit GET never touches Postgres; a known key keeps working for
// AuthStale while Postgres cannot be asked (a read outage must not turn into
// 401s), and unknown keys are remembered briefly.
type authenticator struct {
	db      Querier
	ttl     time.Duration
	stale   time.Duration
	timeout time.Duration
	log     *slog.Logger

	sf      singleflight.Group
	slots   chan struct{} // bounds concurrent key lookups: junk keys cannot flood Postgres
	lookups *rate.Limiter // bounds their rate too; beyond it 503 (never 401: the key may be good)

	mu      sync.RWMutex
	entries map[[32]byte]authEntry
}

type authEntry struct {
	tenant  string // "" for an unknown key
	checked time.Time
}

const (
	authNegativeTTL = time.Second
	authMaxEntries  = 100000
	authLookupSlots = 8
	authLookupRate  = 200 // Postgres key lookups per second per process
	authLookupBurst = 50
)

func newAuthenticator(db Querier, ttl, stale, timeout time.Duration, log *slog.Logger) *authenticator {
	return &authenticator{db: db, ttl: ttl, stale: stale, timeout: timeout, log: log,
		slots: make(chan struct{}, authLookupSlots), lookups: rate.NewLimiter(authLookupRate, authLookupBurst),
		entries: make(map[[32]byte]authEntry)}
}

// tenant resolves an Authorization header to its tenant.
func (a *authenticator) tenant(ctx context.Context, header string) (string, error) {
	key, ok := bearerKey(header)
	if !ok {
		return "", errUnauthorized
	}
	sum := sha256.Sum256([]byte(key))
	now := time.Now()
	a.mu.RLock()
	e, cached := a.entries[sum]
	a.mu.RUnlock()
	if cached {
		ttl := a.ttl
		if e.tenant == "" {
			ttl = authNegativeTTL
		}
		if now.Sub(e.checked) < ttl {
			return found(e.tenant)
		}
	}
	v, err, _ := a.sf.Do(string(sum[:]), func() (any, error) {
		if !a.lookups.Allow() {
			return "", errAuthThrottled
		}
		return a.lookup(ctx, sum)
	})
	if err != nil {
		if cached && e.tenant != "" && now.Sub(e.checked) < a.stale {
			return e.tenant, nil
		}
		if !errors.Is(err, errAuthThrottled) {
			a.log.Warn("api key check failed", "err", err)
		}
		return "", errAuthUnavailable
	}
	return found(v.(string))
}

func found(tenant string) (string, error) {
	if tenant == "" {
		return "", errUnauthorized
	}
	return tenant, nil
}

func (a *authenticator) lookup(ctx context.Context, sum [32]byte) (string, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.timeout)
	defer cancel()
	select {
	case a.slots <- struct{}{}:
		defer func() { <-a.slots }()
	case <-ctx.Done():
		return "", fmt.Errorf("api: api key lookup: %w", ctx.Err())
	}
	var tenant string
	err := a.db.QueryRow(ctx, `SELECT tenant_id FROM tidemark.api_keys WHERE key_sha256 = $1`, sum[:]).Scan(&tenant)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("api: api key lookup: %w", err)
	}
	a.mu.Lock()
	if len(a.entries) >= authMaxEntries {
		for k := range a.entries { // drop an arbitrary tenth
			if len(a.entries) < authMaxEntries*9/10 {
				break
			}
			delete(a.entries, k)
		}
	}
	a.entries[sum] = authEntry{tenant: tenant, checked: time.Now()}
	a.mu.Unlock()
	return tenant, nil
}
