package rollout

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redis/go-redis/v9"
)

// The settings are kept twice (docs/design.md, "Where the settings live"):
// the cache tier's hash is the copy every serve process polls, and every
// write raises its generation (a key beside it); Postgres's
// tidemark.rollout_settings holds the same settings of each pool at the
// generation last recorded (migration 5). A write changes the copy, then
// records it; a copy without its marker counts as generation 0. So a copy the
// cache tier lost (a flush, a restore of an older snapshot) is behind the
// record, and a serve process that finds it so serves the record's settings
// and puts them back, instead of every rolled-back tenant returning to the
// cache.

// DB is what the durable record is read and written through (a pgx pool or
// connection).
type DB interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Snapshot is a pool's settings at one generation.
type Snapshot struct {
	Settings Settings
	Gen      int64 // 0: never written (or, for the copy, lost)
	Written  bool  // the copy's hash carries its marker
}

// ErrNotRecorded: a change is in the cache tier's copy but not in the
// durable record (Postgres could not be written, or the copy was lost while
// the change was made): it may be undone by a restore of the record.
var ErrNotRecorded = errors.New("rollout: the change is not recorded in Postgres")

var (
	//go:embed restore.lua
	restoreLua    string
	restoreScript = redis.NewScript(restoreLua)
	//go:embed adopt.lua
	adoptLua    string
	adoptScript = redis.NewScript(adoptLua)
)

// WithDB makes the store record every write in Postgres and read the record
// back (Save, Durable, Restore, Report).
func (s *Store) WithDB(db DB) *Store {
	s.db = db
	return s
}

// Copy reads the cache tier's copy: settings, marker and generation at once.
func (s *Store) Copy(ctx context.Context) (Snapshot, error) {
	pipe := s.rdb.TxPipeline()
	all := pipe.HGetAll(ctx, s.modes)
	gen := pipe.Get(ctx, s.gen)
	_, _ = pipe.Exec(ctx) // each command's error is read below
	raw, err := all.Result()
	if err != nil {
		return Snapshot{}, fmt.Errorf("rollout: read settings: %w", err)
	}
	var c Snapshot
	if c.Settings, c.Written, err = parseHash(raw); err != nil {
		return Snapshot{}, err
	}
	g, err := gen.Int64()
	switch {
	case errors.Is(err, redis.Nil):
	case err != nil:
		return Snapshot{}, fmt.Errorf("rollout: read the settings' generation: %w", err)
	case c.Written:
		c.Gen = g
	}
	return c, nil
}

// Adopt gives a copy written by a release before generations (marker, no
// generation) generation 1, so it can be recorded; it returns the copy as
// it is then.
func (s *Store) Adopt(ctx context.Context) (Snapshot, error) {
	if err := adoptScript.Run(ctx, s.rdb, []string{s.modes, s.gen}).Err(); err != nil {
		return Snapshot{}, fmt.Errorf("rollout: give the settings a generation: %w", err)
	}
	return s.Copy(ctx)
}

// Durable reads the pool's record in Postgres (generation 0 and no settings
// when it has none).
func (s *Store) Durable(ctx context.Context) (Snapshot, error) {
	if s.db == nil {
		return Snapshot{}, errors.New("rollout: no Postgres to read the settings' record from")
	}
	var raw []byte
	d := Snapshot{Settings: Settings{}}
	err := s.db.QueryRow(ctx, `SELECT generation, settings FROM tidemark.rollout_settings WHERE pool = $1`, s.pool).Scan(&d.Gen, &raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return d, nil
	}
	if err != nil {
		return Snapshot{}, fmt.Errorf("rollout: read the settings' record in Postgres: %w", err)
	}
	if err := json.Unmarshal(raw, &d.Settings); err != nil {
		return Snapshot{}, fmt.Errorf("rollout: the settings' record in Postgres (generation %d): %w", d.Gen, err)
	}
	d.Written = true
	return d, nil
}

// Save stores c as the pool's record if it is newer than the one there;
// recorded reports whether it was.
func (s *Store) Save(ctx context.Context, c Snapshot) (recorded bool, err error) {
	if s.db == nil {
		return false, errors.New("rollout: no Postgres to record the settings in")
	}
	b, err := json.Marshal(c.Settings)
	if err != nil {
		return false, fmt.Errorf("rollout: %w", err)
	}
	tag, err := s.db.Exec(ctx, `INSERT INTO tidemark.rollout_settings (pool, generation, settings, updated_at) VALUES ($1, $2, $3, now())
		ON CONFLICT (pool) DO UPDATE SET generation = EXCLUDED.generation, settings = EXCLUDED.settings, updated_at = now()
		WHERE rollout_settings.generation < EXCLUDED.generation`, s.pool, c.Gen, b)
	if err != nil {
		return false, fmt.Errorf("rollout: record the settings (generation %d) in Postgres: %w", c.Gen, err)
	}
	return tag.RowsAffected() == 1, nil
}

// Restore puts the record d back as the cache tier's copy if the copy is
// lost or older, with a note of the loss for `tidemark rollout status`;
// found is the copy's generation it replaced (-1: nothing was replaced).
func (s *Store) Restore(ctx context.Context, d Snapshot, now time.Time) (found int64, err error) {
	args := []any{d.Gen, now.UTC().Format(time.RFC3339)}
	for tenant, st := range d.Settings {
		b, err := json.Marshal(st)
		if err != nil {
			return -1, fmt.Errorf("rollout: %w", err)
		}
		args = append(args, tenant, string(b))
	}
	found, err = restoreScript.Run(ctx, s.rdb, []string{s.modes, s.gen, s.lost}, args...).Int64()
	if err != nil {
		return -1, fmt.Errorf("rollout: restore the cache tier's copy of the settings (generation %d): %w", d.Gen, err)
	}
	return found, nil
}

// sync restores a lost or older copy from the record before a write, so a
// change is made on the settings in force (no-op without Postgres).
func (s *Store) sync(ctx context.Context) error {
	if s.db == nil {
		return nil
	}
	c, err := s.Copy(ctx)
	if err != nil {
		return err
	}
	d, err := s.Durable(ctx)
	if err != nil {
		return err
	}
	if c.Gen < d.Gen {
		if _, err := s.Restore(ctx, d, time.Now()); err != nil {
			return err
		}
	}
	return nil
}

// persist records the copy once a write raised it to generation gen.
func (s *Store) persist(ctx context.Context, gen int64) error {
	if s.db == nil {
		return nil
	}
	c, err := s.Copy(ctx)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNotRecorded, err)
	}
	if c.Gen < gen {
		return fmt.Errorf("%w: the cache tier lost its copy of the settings right after the change (generation %d, now %d); set it again", ErrNotRecorded, gen, c.Gen)
	}
	if _, err := s.Save(ctx, c); err != nil {
		return fmt.Errorf("%w: %w", ErrNotRecorded, err)
	}
	d, err := s.Durable(ctx)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNotRecorded, err)
	}
	if d.Gen < c.Gen {
		return fmt.Errorf("%w: Postgres holds generation %d, the change is generation %d", ErrNotRecorded, d.Gen, c.Gen)
	}
	if d.Gen > c.Gen {
		return fmt.Errorf("%w: Postgres holds generation %d, newer than the cache tier's copy the change was made on (%d): the copy was lost meanwhile; check tidemark rollout status and set it again",
			ErrNotRecorded, d.Gen, c.Gen)
	}
	return nil
}

// Report is what `tidemark rollout status` shows: every tenant of the
// settings in force with its shadow counts, and where those settings came
// from.
type Report struct {
	Tenants []TenantStatus `json:"tenants"`
	// CopyGen and RecordGen are the generations of the cache tier's copy
	// and of Postgres's record (-1: not read).
	CopyGen   int64 `json:"copy_generation"`
	RecordGen int64 `json:"record_generation"`
	// Problem says what is wrong with the copy (empty: nothing), and
	// Restored the last loss a serve process restored (empty: none since
	// the last change).
	Problem  string `json:"problem,omitempty"`
	Restored string `json:"restored,omitempty"`
}

// Report reads the copy and, with a DB, the record: a copy behind the
// record is reported lost, and the record's settings are the ones shown
// (the ones serve processes use).
func (s *Store) Report(ctx context.Context) (Report, error) {
	r := Report{CopyGen: -1, RecordGen: -1}
	c, err := s.Copy(ctx)
	if err != nil {
		return r, err
	}
	r.CopyGen = c.Gen
	ss := c.Settings
	if s.db != nil {
		d, err := s.Durable(ctx)
		if err != nil {
			return r, err
		}
		r.RecordGen = d.Gen
		switch {
		case c.Gen < d.Gen && !c.Written:
			r.Problem = fmt.Sprintf("LOST: the cache tier has no copy of the rollout settings; Postgres's record (generation %d) is shown, and serve processes use it and put it back", d.Gen)
			ss = d.Settings
		case c.Gen < d.Gen:
			r.Problem = fmt.Sprintf("LOST: the cache tier's copy of the rollout settings is at generation %d, older than Postgres's record (%d): the record is shown, and serve processes use it and put it back", c.Gen, d.Gen)
			ss = d.Settings
		case c.Gen > d.Gen:
			r.Problem = fmt.Sprintf("NOT RECORDED: the cache tier's copy (generation %d) is newer than Postgres's record (%d); serve processes record it on their next poll (a loss of the copy before then would undo the change)", c.Gen, d.Gen)
		}
	}
	note, err := s.rdb.Get(ctx, s.lost).Result()
	switch {
	case errors.Is(err, redis.Nil):
	case err != nil:
		return r, fmt.Errorf("rollout: read the loss note: %w", err)
	default:
		f := strings.Fields(note)
		for len(f) < 3 {
			f = append(f, "?")
		}
		r.Restored = fmt.Sprintf("the cache tier's copy of the rollout settings was lost (found at generation %s): a serve process restored Postgres's record (generation %s) at %s",
			f[2], f[1], f[0])
	}
	if r.Tenants, err = s.tenants(ctx, ss); err != nil {
		return r, err
	}
	return r, nil
}
