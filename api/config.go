package api

import (
	"strings"
	"time"

	"github.com/tidemark/tidemark/catalog"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/promise"
	"github.com/tidemark/tidemark/reader"
	"github.com/tidemark/tidemark/rollout"
)

// Config is the serve stage's configuration. Every field maps to one flag of
// `tidemark serve`; Validate names the field of each problem.
type Config struct {
	Addr      string        // where the API listens
	Namespace string        // Redis namespace
	Table     catalog.Table // the catalog table and how its columns map

	// The read path (package reader): deadlines, the source budget, L1,
	// replicas, min_version bounds, fill admission. Its SourcePool names
	// the source budget and the rollout store, shared by every namespace of
	// one deployment so that a namespace upgrade runs on one budget (the
	// default is one pool per source: promise.SourcePool). Its Mapping is
	// Table's fingerprint (what Validate and New use, whatever it holds).
	reader.Config

	WriteTimeout         time.Duration // deadline of one write transaction
	IdempotencyRetention time.Duration // how long an Idempotency-Key's answer is kept

	// RolloutDefault is the serving mode of tenants without a rollout
	// setting: cache (100 %), shadow or source
	RolloutDefault   string
	RolloutPoll      time.Duration // how often the rollout settings are read (a change is in force within it)
	ShadowSample     float64       // share of shadowed source reads compared with the cache
	ShadowGrace      time.Duration // an older cached version still served after this is cache_older_than_allowed
	HaltMismatchRate float64       // shadow mismatch share of a ramp step that halts it
	HaltMinChecks    int           // comparisons of a step before its mismatch rate is judged

	MaxBodyBytes int64         // largest accepted request body
	AuthTTL      time.Duration // how long a resolved API key is trusted before re-checking Postgres
	AuthStale    time.Duration // how long a known key keeps working while Postgres cannot be asked

	// PGFile, when set, is the file the pool's DSN came from (a mounted
	// Secret, a Vault agent's file): NewPool reads it again for every new
	// connection, so a rotated password is picked up without a restart.
	PGFile string
}

// MaxMinVersionMemo bounds MinVersionMemo (reader.MaxMinVersionMemo).
const MaxMinVersionMemo = reader.MaxMinVersionMemo

// DefaultConfig returns the production figures: the read path's
// (reader.DefaultConfig: 12,000 + 8,000 source reads/s shared by every
// serve process, 1 s request deadline, 0.5 s L1) and the API's own.
func DefaultConfig() Config {
	return Config{
		Addr:                 "127.0.0.1:8080",
		Namespace:            promise.Namespace,
		Table:                catalog.DefaultTable(),
		Config:               reader.DefaultConfig(),
		WriteTimeout:         5 * time.Second,
		IdempotencyRetention: 24 * time.Hour,
		RolloutDefault:       "cache",
		RolloutPoll:          time.Second,
		ShadowSample:         0.05,
		ShadowGrace:          5 * time.Second,
		HaltMismatchRate:     0.01,
		HaltMinChecks:        100,
		MaxBodyBytes:         64 << 10,
		AuthTTL:              30 * time.Second,
		AuthStale:            10 * time.Minute,
	}
}

// Validate reports every problem at once, one config.FieldError per field.
func (c Config) Validate() error {
	var p config.Problems
	p.Nested("Table", c.Table.Validate())
	p.Also(c.readerConfig().Validate())
	if strings.TrimSpace(c.Addr) == "" {
		p.Add("Addr", "must not be empty")
	}
	if strings.TrimSpace(c.Namespace) == "" {
		p.Add("Namespace", "must not be empty")
	}
	p.Positive("WriteTimeout", c.WriteTimeout)
	p.Positive("AuthTTL", c.AuthTTL)
	if c.AuthStale < 0 {
		p.Add("AuthStale", "must not be negative (got %s)", c.AuthStale)
	}
	p.Positive("IdempotencyRetention", c.IdempotencyRetention)
	if c.RolloutDefault != "" {
		if _, err := rollout.ParseMode(c.RolloutDefault); err != nil {
			p.Add("RolloutDefault", "must be cache, shadow or source (got %q)", c.RolloutDefault)
		}
	}
	p.Positive("RolloutPoll", c.RolloutPoll)
	p.Positive("ShadowGrace", c.ShadowGrace)
	if !(c.ShadowSample >= 0 && c.ShadowSample <= 1) {
		p.Add("ShadowSample", "must be between 0 and 1 (got %v)", c.ShadowSample)
	}
	if !(c.HaltMismatchRate > 0 && c.HaltMismatchRate <= 1) {
		p.Add("HaltMismatchRate", "must be above 0 and at most 1 (got %v)", c.HaltMismatchRate)
	}
	if c.HaltMinChecks < 1 {
		p.Add("HaltMinChecks", "must be at least 1 (got %d)", c.HaltMinChecks)
	}
	if c.MaxBodyBytes <= 0 {
		p.Add("MaxBodyBytes", "must be positive (got %d)", c.MaxBodyBytes)
	}
	return p.Err()
}

// readerConfig is the read path's configuration, its Mapping the table's.
func (c Config) readerConfig() reader.Config {
	rc := c.Config
	rc.Mapping = c.Table.Fingerprint()
	return rc
}

// sourcePool names the budget and the rollout store.
func (c Config) sourcePool() string { return c.SourcePool }
