// Package cache is the cache-tier protocol: Lua scripts run atomically in
// Redis (standalone or Cluster) and the Go client the applier and the API
// share.
//
// Each item is one hash holding its value, version, observation time and
// deadlines, plus a version floor and at most one fill lease. A reader that
// misses gets a 128-bit lease token bound to the server's run_id, reads the
// source and fills; the fill lands only with that still-current token, at or
// above the floor, before the value's hard deadline. The applier's INVALIDATE
// raises the floor and revokes the lease, so a fill of an older read can
// never land after the change that superseded it. Lookups also take the
// pipeline's freshness watermark: an entry not invalidated since it was
// observed is as fresh as the watermark. docs/design.md, "Cache tier" and
// "Freshness watermark", is the full contract and its proof sketch.
package cache

import (
	"encoding/hex"
	"errors"
	"time"
)

// Status is the answer of a Lookup.
type Status string

const (
	StatusHit      Status = "hit"       // a fresh value: serve it
	StatusStale    Status = "stale"     // within its hard deadline but soft-expired or invalidated; Token set for the first caller, who refreshes
	StatusMiss     Status = "miss"      // nothing usable: Token set, read the source and Fill
	StatusWait     Status = "wait"      // another caller holds the lease: poll again with jitter
	StatusNotFound Status = "not_found" // a negative entry: the item does not exist (for 2 s)
)

// Token is a 128-bit lease token made by the client from crypto/rand.
// The zero Token means "no token".
type Token [16]byte

// IsZero reports whether t is the zero Token.
func (t Token) IsZero() bool { return t == Token{} }

func (t Token) String() string { return hex.EncodeToString(t[:]) }

// Entry is a cached value with its deadlines as the lookup computed them from
// the effective observation time max(obs, W) (docs/design.md, "Freshness
// watermark").
type Entry struct {
	Version int64
	Payload []byte
	Obs     time.Time // when the source read that produced the value started
	EffObs  time.Time // effective observation: Obs extended by the watermark when allowed
	Soft    time.Time // soft expiry from EffObs
	Hard    time.Time // hard expiry from EffObs: never served at or after it
	Stale   bool      // invalidated since it was filled
}

// LookupResult is the answer of Lookup.
type LookupResult struct {
	Status Status
	Entry  Entry // set for Hit and Stale (and NotFound's Obs/Hard)
	Token  Token // set for Miss, and for the first caller of Stale
	// Replicas is the published copy set of this version (Hit only; nil
	// when none): see Manifest.
	Replicas *Manifest
}

// Reason says why a Fill was rejected (the label of
// tidemark_cache_fill_rejected_total).
type Reason string

const (
	ReasonToken    Reason = "token"    // not the key's active, unexpired token (revoked, expired, already used, or never issued)
	ReasonVersion  Reason = "version"  // below the key's floor or below the cached version
	ReasonExpired  Reason = "expired"  // the value's hard deadline has already passed
	ReasonClock    Reason = "clock"    // the observation time is in the cache tier's future: the filler's clock is fast
	ReasonLifetime Reason = "lifetime" // the hard deadline is later than observation + hard lifetime (at most promise.Bound)
)

// ErrRejected is matched (errors.Is) by every *RejectedError.
var ErrRejected = errors.New("cache: fill rejected")

// RejectedError is a Fill the cache refused; state is unchanged.
type RejectedError struct{ Reason Reason }

func (e *RejectedError) Error() string        { return "cache: fill rejected: " + string(e.Reason) }
func (e *RejectedError) Is(target error) bool { return target == ErrRejected }

// InvalidateResult says what an invalidation did (the label of
// tidemark_cache_invalidations_total).
type InvalidateResult string

const (
	InvalidateApplied   InvalidateResult = "applied"   // floor raised
	InvalidateDuplicate InvalidateResult = "duplicate" // floor already equal to the version
	InvalidateOlder     InvalidateResult = "older"     // floor already above the version
	// InvalidateRevoked: the version was not above the floor, and a value
	// observed before the change (or a lease) was revoked all the same.
	InvalidateRevoked InvalidateResult = "revoked"
)

// Invalidation is one key's new version, for InvalidateBatch.
type Invalidation struct {
	Tenant, Item string
	Version      int64
}

// InvalidateOutcome is the result for one key of a batch. Err is a per-key
// error (e.g. WRONGTYPE); connection-level failures fail the whole batch.
type InvalidateOutcome struct {
	Result InvalidateResult
	Err    error
}

// Watermark is the pipeline's freshness promise as read from
// <ns>:v1:_tidemark.
type Watermark struct {
	W          time.Time // min over all partitions; zero unless Known
	Known      bool      // every partition 0..Partitions-1 has a watermark
	ResetAt    time.Time // newest gap; zero if none
	Partitions int       // the topic's partition count
	// GrownFrom is the partition count before the last growth, at GrownAt
	// (the cache tier's clock); zero if it never grew. Partitions from
	// GrownFrom on are new: without a watermark they are pending, not lost.
	GrownFrom    int
	GrownAt      time.Time
	PerPartition map[int32]time.Time // p<N> fields
	// Sources holds the s<N> fields: the source of the marker that set
	// p<N> (schema.WatermarkSourceField), where it named one.
	Sources map[int32]string
	// Foreign is set when a partition's watermark was set by a marker of
	// another source than this process's (Client.SetSource): W is unknown.
	Foreign  *ForeignWatermark
	Identity string    // the identity the appliers bound (FieldIdentity, BindWatermarkIdentity); empty if none
	Found    bool      // the hash exists
	ReadAt   time.Time // when it was read (local clock)
	// ServerNow is the cache tier's clock when the hash was read (zero when
	// parsed without it). Ahead lists the partitions whose p<N> was ahead
	// of it by more than promise.ClockBound: they count as missing.
	ServerNow time.Time
	Ahead     []int32
	// FutureRefused counts resolved times the cache tier refused as ahead
	// of its clock; the last one was FutureValue for FutureField at
	// FutureRefusedAt (the cache tier's clock).
	FutureRefused   int64
	FutureRefusedAt time.Time
	FutureField     string
	FutureValue     time.Time
}
