package rollout

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tidemark/tidemark/promise"
)

// Namespace upgrades (docs/design.md, "Namespace upgrade"): the serve
// processes of one source pool may read and fill different cache-tier
// namespaces while an upgrade moves them from the old to the new. Each
// process stamps its namespace in the pool's namespace hash every second
// (and once more as it leaves), so `tidemark status` can tell a namespace
// still served from one draining (no serve process fills it any more; its
// entries reach their hard deadlines) and one drained (nothing in it can be
// served: it may be left alone and its appliers stopped).

// Namespace states.
const (
	NamespaceServing  = "serving"  // a serve process of the pool reads and fills it
	NamespaceDraining = "draining" // no serve process since LastSeen; entries may still be within their hard deadlines
	NamespaceDrained  = "drained"  // every entry filled while it was served is past its hard deadline
)

// DrainMargin is how long after a serve process's last stamp it may still
// have filled an entry: its presence expiry (a process beats every second
// and stamps as it leaves; one killed or frozen stops beating).
const DrainMargin = 5 * time.Second

// namespaceRetention is how long a namespace no process has served stays in
// the hash (long drained by then).
const namespaceRetention = 24 * time.Hour

// ServeKey is the pool's set of live serve processes (a sorted set scored
// by each one's last beat, Redis time in ms); members are
// "<namespace>/<process id>" (a member without "/" is a process of a build
// before namespaces were recorded).
func ServeKey(pool string) string { return pool + ":v1:_serve" }

// NamespacesKey is the pool's hash namespace -> last stamp (Redis time, ms).
func NamespacesKey(pool string) string { return pool + ":v1:_namespaces" }

// ServeMember is a serve process's member of ServeKey.
func ServeMember(namespace, id string) string { return namespace + "/" + id }

// stampLua: HSET namespace at Redis time; drop namespaces not stamped for
// ARGV[2] ms; the hash expires after that long without any stamp.
var stampLua = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[1], ARGV[1], now)
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  if tonumber(all[i + 1]) < now - tonumber(ARGV[2]) then
    redis.call('HDEL', KEYS[1], all[i])
  end
end
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
return now`)

// StampNamespace records that a serve process of pool serves namespace now.
func StampNamespace(ctx context.Context, rdb redis.Scripter, pool, namespace string) error {
	if err := stampLua.Run(ctx, rdb, []string{NamespacesKey(pool)}, namespace, namespaceRetention.Milliseconds()).Err(); err != nil {
		return fmt.Errorf("rollout: stamp namespace %s: %w", namespace, err)
	}
	return nil
}

// Namespace is one namespace of a pool as `tidemark status` shows it.
type Namespace struct {
	Name string `json:"namespace"`
	// Processes is the live serve processes reading and filling it.
	Processes int       `json:"serve_processes"`
	LastSeen  time.Time `json:"last_seen"`
	State     string    `json:"state"`
	// DrainedAt is when the last entry a serve process may have filled is
	// past its hard deadline (LastSeen + DrainMargin + the hard lifetime).
	DrainedAt time.Time `json:"drained_at"`
}

// String is the line status prints.
func (n Namespace) String() string {
	switch n.State {
	case NamespaceServing:
		return fmt.Sprintf("%s: serving (%d serve process(es))", n.Name, n.Processes)
	case NamespaceDraining:
		return fmt.Sprintf("%s: draining (no serve process since %s; drained at %s)", n.Name,
			n.LastSeen.UTC().Format(time.RFC3339), n.DrainedAt.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("%s: drained at %s (nothing in it can be served; its appliers may stop)", n.Name, n.DrainedAt.UTC().Format(time.RFC3339))
}

// Namespaces reads every namespace stamped in pool, at the cache tier's
// clock, sorted serving first, then by name. Live processes of a build that
// does not stamp its namespace are counted under the name "" (unknown).
func Namespaces(ctx context.Context, rdb redis.UniversalClient, pool string) ([]Namespace, error) {
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("rollout: read the cache tier's time: %w", err)
	}
	stamps, err := rdb.HGetAll(ctx, NamespacesKey(pool)).Result()
	if err != nil {
		return nil, fmt.Errorf("rollout: read namespaces: %w", err)
	}
	live, err := rdb.ZRangeByScore(ctx, ServeKey(pool), &redis.ZRangeBy{
		Min: strconv.FormatInt(now.Add(-DrainMargin).UnixMilli(), 10), Max: "+inf"}).Result()
	if err != nil {
		return nil, fmt.Errorf("rollout: read serve processes: %w", err)
	}
	procs := map[string]int{}
	for _, m := range live {
		ns, _, ok := strings.Cut(m, "/")
		if !ok {
			ns = ""
		}
		procs[ns]++
	}
	byName := map[string]*Namespace{}
	for name, v := range stamps {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			continue
		}
		seen := time.UnixMilli(ms)
		byName[name] = &Namespace{Name: name, LastSeen: seen, DrainedAt: seen.Add(DrainMargin + promise.HardLifetime)}
	}
	for name, n := range procs {
		if byName[name] == nil {
			byName[name] = &Namespace{Name: name, LastSeen: now, DrainedAt: now.Add(DrainMargin + promise.HardLifetime)}
		}
		byName[name].Processes = n
	}
	out := make([]Namespace, 0, len(byName))
	for _, n := range byName {
		switch {
		case n.Processes > 0:
			n.State = NamespaceServing
		case now.Before(n.DrainedAt):
			n.State = NamespaceDraining
		default:
			n.State = NamespaceDrained
		}
		out = append(out, *n)
	}
	rank := map[string]int{NamespaceServing: 0, NamespaceDraining: 1, NamespaceDrained: 2}
	sort.Slice(out, func(i, j int) bool {
		if out[i].State != out[j].State {
			return rank[out[i].State] < rank[out[j].State]
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}
