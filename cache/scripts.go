package cache

import (
	_ "embed"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/tidemark/tidemark/promise"
)

// The Lua sources run atomically in Redis; see each file's header for its
// arguments and reply.
var (
	//go:embed scripts/lookup.lua
	lookupLua string
	//go:embed scripts/fill.lua
	fillLua string
	//go:embed scripts/invalidate.lua
	invalidateLua string
	//go:embed scripts/raise.lua
	raiseLua string
	//go:embed scripts/watermark.lua
	watermarkLua string
	//go:embed scripts/wmread.lua
	wmreadLua string
	//go:embed scripts/wmrepair.lua
	wmrepairLua string
	//go:embed scripts/wmidentity.lua
	wmidentityLua string
	//go:embed scripts/gap.lua
	gapLua string
	//go:embed scripts/partitions.lua
	partitionsLua string
	//go:embed scripts/release.lua
	releaseLua string
	//go:embed scripts/version.lua
	versionLua string // vcmp, prepended to the scripts that order versions
	//go:embed scripts/effective.lua
	effectiveLua string // the watermark rule, prepended to the replica scripts that read a primary
	//go:embed scripts/replica_source.lua
	replicaSourceLua string
	//go:embed scripts/replica_put.lua
	replicaPutLua string
	//go:embed scripts/replica_read.lua
	replicaReadLua string
	//go:embed scripts/replica_switch.lua
	replicaSwitchLua string
)

// scripts are the compiled scripts of one Client (go-redis computes each SHA1
// once; Run falls back from EVALSHA to EVAL on NOSCRIPT).
type scripts struct {
	lookup, fill, invalidate, raise, release *redis.Script
	// the watermark hash (watermark.go)
	watermark, wmread, wmrepair, wmidentity, gap, partitions *redis.Script
	// hot-key replicas (replica.go)
	replicaSource, replicaPut, replicaRead, replicaSwitch *redis.Script
}

// clockLua is prepended to the scripts that judge a time against the cache
// tier's clock: the one bound every host's clock must keep (promise.ClockBound).
var clockLua = fmt.Sprintf("local clock_bound_ms = %d\n", promise.ClockBound.Milliseconds())

func newScripts() scripts {
	return scripts{
		watermark:  redis.NewScript(clockLua + watermarkLua),
		wmread:     redis.NewScript(wmreadLua),
		wmrepair:   redis.NewScript(clockLua + wmrepairLua),
		wmidentity: redis.NewScript(wmidentityLua),
		gap:        redis.NewScript(gapLua),
		partitions: redis.NewScript(partitionsLua),

		lookup:     redis.NewScript(clockLua + versionLua + lookupLua),
		fill:       redis.NewScript(versionLua + fillLua),
		invalidate: redis.NewScript(clockLua + versionLua + invalidateLua),
		raise:      redis.NewScript(raiseLua),
		release:    redis.NewScript(releaseLua),

		replicaSource: redis.NewScript(clockLua + versionLua + effectiveLua + replicaSourceLua),
		replicaPut:    redis.NewScript(clockLua + effectiveLua + replicaPutLua),
		replicaRead:   redis.NewScript(clockLua + effectiveLua + replicaReadLua),
		replicaSwitch: redis.NewScript(clockLua + versionLua + effectiveLua + replicaSwitchLua),
	}
}

func (s scripts) all() []*redis.Script {
	return []*redis.Script{s.lookup, s.fill, s.invalidate, s.raise, s.release, s.replicaSource, s.replicaPut, s.replicaRead, s.replicaSwitch,
		s.watermark, s.wmread, s.wmrepair, s.wmidentity, s.gap, s.partitions}
}

// InvalidateScriptSHA is the SHA1 INVALIDATE runs under (EVALSHA), for
// benchmarks that compare it with redis-benchmark on the same script.
func InvalidateScriptSHA() string { return newScripts().invalidate.Hash() }
