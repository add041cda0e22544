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
	"sync/atomic"
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
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
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

// wellFormed reports whether key has the shape CreateAPIKey gives keys
// (tmk_ and 32 random bytes in unpadded base64url): any other string is
// refused without asking Postgres.
func wellFormed(key string) bool {
	if len(key) != len(keyPrefix)+43 || !strings.HasPrefix(key, keyPrefix) {
		return false
	}
	for _, c := range key[len(keyPrefix):] {
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// authenticator maps API keys to tenants without a Postgres round trip on
// the request path for any key issued more than one ttl ago: the whole key
// table is read every ttl (in the background, started by a request) and
// kept for AuthStale while Postgres cannot be asked (a read outage must not
// turn into 401s). A key not in the table (issued since the last read, or
// junk) is looked up by itself and the answer cached for ttl (an unknown
// key for a second). A revoked (deleted) key therefore stops working
// within about one ttl; while Postgres cannot be asked, within AuthStale.
//
// Lookups come in two classes, each with its own rate and concurrent
// slots: re-checks of keys this process has resolved by a lookup, and
// everything else (new keys, and junk that passed the shape check). A
// flood of unknown keys spends only the second: it cannot delay keys in
// the table nor re-checks of resolved keys, and over its rate a re-check
// falls back to the cached answer for at most two ttl.
type authenticator struct {
	db      Querier
	ttl     time.Duration
	stale   time.Duration
	timeout time.Duration
	log     *slog.Logger

	sf      singleflight.Group
	known   lookupClass // re-checks of keys resolved to a tenant
	unknown lookupClass // every other key

	mu      sync.RWMutex
	entries map[[32]byte]authEntry

	// table is every issued key, read whole every ttl (nil until the first
	// read; no keys when there are more than authMaxEntries): a key in it
	// needs no lookup of its own, so no flood of unknown keys can delay it,
	// and a key deleted from tidemark.api_keys leaves it at the next read.
	table        atomic.Pointer[keyTable]
	refreshing   atomic.Bool
	tableFailing atomic.Bool // the last read of the table failed: keep it up to stale
}

type keyTable struct {
	tenants map[[32]byte]string
	read    time.Time
}

// lookupClass bounds one class of key lookups: concurrent ones (junk keys
// cannot flood Postgres) and their rate (beyond it 503, never 401: the key
// may be good).
type lookupClass struct {
	slots chan struct{}
	rate  *rate.Limiter
}

func newLookupClass() lookupClass {
	return lookupClass{slots: make(chan struct{}, authLookupSlots), rate: rate.NewLimiter(authLookupRate, authLookupBurst)}
}

type authEntry struct {
	tenant  string // "" for an unknown key
	checked time.Time
}

const (
	authNegativeTTL = time.Second
	authMaxEntries  = 100000
	authLookupSlots = 4   // per class
	authLookupRate  = 200 // Postgres key lookups per second per process, per class
	authLookupBurst = 50
)

func newAuthenticator(db Querier, ttl, stale, timeout time.Duration, log *slog.Logger) *authenticator {
	return &authenticator{db: db, ttl: ttl, stale: stale, timeout: timeout, log: log,
		known: newLookupClass(), unknown: newLookupClass(), entries: make(map[[32]byte]authEntry)}
}

// tenant resolves an Authorization header to its tenant.
func (a *authenticator) tenant(ctx context.Context, header string) (string, error) {
	key, ok := bearerKey(header)
	if !ok || !wellFormed(key) {
		return "", errUnauthorized
	}
	var buf [len(keyPrefix) + 43]byte // a well-formed key's length: hashed without a heap copy
	sum := sha256.Sum256(append(buf[:0], key...))
	now := time.Now()
	if tb := a.table.Load(); tb != nil {
		age := now.Sub(tb.read)
		if age >= a.ttl {
			a.refresh()
		}
		// Good for two ttl (the read started at one takes a moment), or up
		// to stale while reads fail.
		if tenant, ok := tb.tenants[sum]; ok && (age < 2*a.ttl || age < a.stale && a.tableFailing.Load()) {
			return tenant, nil
		}
	} else {
		a.refresh()
	}
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
	class, sfKey := &a.unknown, "u"+string(sum[:])
	if cached && e.tenant != "" {
		class, sfKey = &a.known, "k"+string(sum[:])
	}
	v, err, _ := a.sf.Do(sfKey, func() (any, error) {
		if !class.rate.Allow() {
			return "", errAuthThrottled
		}
		return a.lookup(ctx, sum, class)
	})
	if err != nil {
		if cached && e.tenant != "" {
			// Stale only while Postgres cannot answer; over the rate, for
			// at most two ttl, which bounds how long a revoked key works.
			limit := a.stale
			if errors.Is(err, errAuthThrottled) {
				limit = min(a.stale, 2*a.ttl)
			}
			if now.Sub(e.checked) < limit {
				return e.tenant, nil
			}
		}
		if !errors.Is(err, errAuthThrottled) {
			a.log.Warn("api key check failed", "err", err)
		}
		return "", errAuthUnavailable
	}
	return found(v.(string))
}

// refresh reads the key table in the background, one read at a time.
func (a *authenticator) refresh() {
	if !a.refreshing.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer a.refreshing.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), a.timeout+5*time.Second)
		defer cancel()
		tb, err := a.readTable(ctx)
		if err != nil {
			if !a.tableFailing.Swap(true) {
				a.log.Warn("api key table read failed; known keys keep working for the stale bound", "err", err)
			}
			return
		}
		a.tableFailing.Store(false)
		a.table.Store(tb)
	}()
}

func (a *authenticator) readTable(ctx context.Context) (*keyTable, error) {
	read := time.Now()
	rows, err := a.db.Query(ctx, `SELECT key_sha256, tenant_id FROM tidemark.api_keys LIMIT $1`, authMaxEntries+1)
	if err != nil {
		return nil, fmt.Errorf("api: read api keys: %w", err)
	}
	defer rows.Close()
	tb := &keyTable{tenants: make(map[[32]byte]string), read: read}
	for rows.Next() {
		var sum []byte
		var tenant string
		if err := rows.Scan(&sum, &tenant); err != nil {
			return nil, fmt.Errorf("api: read api keys: %w", err)
		}
		if len(sum) == 32 {
			tb.tenants[[32]byte(sum)] = tenant
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("api: read api keys: %w", err)
	}
	if len(tb.tenants) > authMaxEntries {
		tb.tenants = nil // too many to hold: every key is looked up by itself
	}
	return tb, nil
}

func found(tenant string) (string, error) {
	if tenant == "" {
		return "", errUnauthorized
	}
	return tenant, nil
}

func (a *authenticator) lookup(ctx context.Context, sum [32]byte, class *lookupClass) (string, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.timeout)
	defer cancel()
	select {
	case class.slots <- struct{}{}:
		defer func() { <-class.slots }()
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
