package cache

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/tidemark/tidemark/schema"
)

// One namespace, one deployment. The identity hash (schema.IdentityKey)
// binds a namespace to the table mapping its readers read, its appliers'
// consumer group and its source pool. Every reader and applier claims what
// it knows of it at start and again every few seconds: the first claim of a
// field stores it, and a process whose value differs refuses to run, so two
// tables cannot fill one namespace with each other's rows, and a namespace's
// appliers cannot be split over two groups. A record lost with its Redis
// node is claimed again by the next process that checks: the processes
// still running rewrite what they run with, and any other value is refused
// from then on.

// Identity is what a process knows of its namespace's deployment; an empty
// field is not claimed.
type Identity struct {
	Mapping string // the table mapping's fingerprint (catalog.Table.Fingerprint)
	Group   string // the appliers' consumer group
	Pool    string // the source pool (budget and rollout settings)
}

// IdentityError is a claim that differs from the namespace's record.
type IdentityError struct {
	Namespace string
	Field     string // mapping, group or pool
	Stored    string // what the namespace is bound to
	Ours      string // what this process runs with
}

func (e *IdentityError) Error() string {
	return fmt.Sprintf("cache: namespace %q is bound to %s %q, but this process runs with %s %q: one namespace is one deployment's "+
		"(one table mapping, one consumer group, one source pool); give this process its own namespace, or run it with %q "+
		"(after retiring the deployment that claimed it, delete %s to bind the namespace anew)",
		e.Namespace, e.Field, e.Stored, e.Field, e.Ours, e.Stored, schema.IdentityKey(e.Namespace))
}

// ErrIdentity matches an *IdentityError with errors.Is.
var ErrIdentity = errors.New("cache: namespace bound to another deployment")

// Is makes errors.Is(err, ErrIdentity) true.
func (e *IdentityError) Is(target error) bool { return target == ErrIdentity }

// claimLua: for each (field, value) pair in ARGV, store it if the field is
// unset; return the first field whose stored value differs, with it. (The
// chaos harness's build with the tag tidemark_no_identity replaces it with a
// claim that never refuses: no_identity.go.)
var claimLua = redis.NewScript(`
for i = 1, #ARGV, 2 do
  local v = redis.call('HGET', KEYS[1], ARGV[i])
  if v and v ~= ARGV[i + 1] then
    return {ARGV[i], v}
  end
end
for i = 1, #ARGV, 2 do
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
end
return {}`)

// ClaimIdentity checks id against the namespace's identity record, storing
// the fields not set yet. A difference is an *IdentityError (errors.Is
// ErrIdentity); any other error is Redis's, to retry.
func (c *Client) ClaimIdentity(ctx context.Context, id Identity) error {
	var args []any
	for _, f := range [][2]string{{schema.FieldIdentityMapping, id.Mapping}, {schema.FieldIdentityGroup, id.Group}, {schema.FieldIdentityPool, id.Pool}} {
		if f[1] != "" {
			args = append(args, f[0], f[1])
		}
	}
	if len(args) == 0 {
		return nil
	}
	res, err := claimLua.Run(ctx, c.rdb, []string{schema.IdentityKey(c.cfg.Namespace)}, args...).StringSlice()
	if err != nil {
		return fmt.Errorf("cache: claim namespace identity: %w", err)
	}
	if len(res) == 2 {
		ours := map[string]string{schema.FieldIdentityMapping: id.Mapping, schema.FieldIdentityGroup: id.Group, schema.FieldIdentityPool: id.Pool}[res[0]]
		return &IdentityError{Namespace: c.cfg.Namespace, Field: res[0], Stored: res[1], Ours: ours}
	}
	return nil
}
