package chaos

import (
	"math/rand/v2"
	"time"
)

// plannedFault is one entry of the seeded schedule.
type plannedFault struct {
	Kind string
	At   time.Duration // from the start of the load
	Hold time.Duration // how long the fault lasts (kinds that are instants ignore it)
}

// holdRange is how long each kind lasts, drawn uniformly.
var holdRange = map[string][2]time.Duration{
	FaultKillCapture:   {time.Second, 3 * time.Second},
	FaultKillApply:     {time.Second, 3 * time.Second},
	FaultKillServe:     {time.Second, 3 * time.Second},
	FaultStopCapture:   {2 * time.Second, 6 * time.Second},
	FaultStopApply:     {2 * time.Second, 6 * time.Second},
	FaultStopServe:     {2 * time.Second, 6 * time.Second},
	FaultRedisRestart:  {0, time.Second},
	FaultRedisSnapshot: {3 * time.Second, 10 * time.Second}, // age of the snapshot restored
	FaultRedisReadonly: {3 * time.Second, 8 * time.Second},
	FaultRedisHung:     {2 * time.Second, 5 * time.Second},
	FaultPGRestart:     {0, time.Second},
	FaultSourceStall:   {2 * time.Second, 6 * time.Second},
	FaultSlotDrop:      {2 * time.Second, 4 * time.Second},
	FaultBrokerRestart: {time.Second, 3 * time.Second},
	FaultClockOffset:   {5 * time.Second, 15 * time.Second},
	FaultColdBurst:     {2 * time.Second, 4 * time.Second},
	FaultReshard:       {0, 0},
	FaultKillMaster:    {time.Second, 3 * time.Second},
	// Past the 30 s bound: every entry reaches its hard deadline unextended.
	FaultLongOutage:       {40 * time.Second, 50 * time.Second},
	FaultRedisLossNoApply: {3 * time.Second, 8 * time.Second},
	// Past the bound: a value a future watermark would extend is asked
	// for after its hard deadline.
	FaultFutureHeartbeat:    {32 * time.Second, 36 * time.Second},
	FaultMalformedHeartbeat: {0, 0},
	// How long after the TRUNCATE the last quarter of the items is put back
	// (and read again first): past the bound.
	FaultTruncateFastClock: {32 * time.Second, 35 * time.Second},
	FaultExpiredFloors:     {0, 0},
	FaultSharedHTTPCache:   {5 * time.Second, 10 * time.Second},
	// Past FloorTTL: a floor raised before the commit was visible is gone.
	FaultSyncStandbyStall: {ChaosFloorTTL + 3*time.Second, ChaosFloorTTL + 6*time.Second},
	FaultPromotion:        {0, 0},
	// How long the changed items are read after the change: past the bound.
	FaultColdStart: {32 * time.Second, 35 * time.Second},
	// How long the rewritten items are read after the writes: past the bound.
	FaultUnbumpedWrite: {34 * time.Second, 38 * time.Second},
	FaultBadVersionRow: {0, 0},
	// How long the rogue applier stays in the group after the change (its
	// items are read until past the bound after it).
	FaultRogueApplier: {3 * time.Second, 6 * time.Second},
	// How long the catalog's serve processes are asked for the items after
	// the second table's reader was.
	FaultSecondTable: {8 * time.Second, 12 * time.Second},
	// Past the presence TTL (8 s): the cut-off process's local admission
	// and its hold after it.
	FaultServeRedisCut: {10 * time.Second, 14 * time.Second},
	// The same cut, Redis restored from a snapshot 4 s into it.
	FaultServeCutRedisRewind: {10 * time.Second, 14 * time.Second},
	// Several presence beats with the mismatched process in the pool.
	FaultServeBudgetMismatch: {6 * time.Second, 10 * time.Second},
	// Several source registrations with the second pool reading.
	FaultServeSecondPool:  {8 * time.Second, 12 * time.Second},
	FaultServeSecondRedis: {8 * time.Second, 12 * time.Second},
	// How long the changed items are read after the change: past the bound.
	FaultPublicationGap: {32 * time.Second, 35 * time.Second},
	FaultTableRewrite:   {32 * time.Second, 35 * time.Second},
	// The same, the captures down while the state topic is deleted.
	FaultCaptureStateLost: {32 * time.Second, 35 * time.Second},
	// The same, the captures down while a second deployment's capture
	// sends markers on the topic.
	FaultSharedTopic: {32 * time.Second, 35 * time.Second},
}

// warmupAndTail are the quiet spans at the start (the pipeline settles) and
// at the end (the last faults' recovery is observed) of a run.
func warmupAndTail(d time.Duration) (time.Duration, time.Duration) {
	return min(15*time.Second, d/10), min(30*time.Second, d/5)
}

// schedule lays the faults out over the run: every kind once in a seeded
// random order, then seeded random kinds, evenly spaced (every, or closer
// when that is needed to fit every kind), each with jitter.
func schedule(kinds []string, d, every time.Duration, seed int64) []plannedFault {
	if len(kinds) == 0 {
		return nil
	}
	rng := rand.New(rand.NewPCG(uint64(seed), 0xfa17))
	warm, tail := warmupAndTail(d)
	span := d - warm - tail
	n := max(len(kinds), int(span/every))
	spacing := span / time.Duration(n)
	order := append([]string(nil), kinds...)
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	for len(order) < n {
		order = append(order, kinds[rng.IntN(len(kinds))])
	}
	out := make([]plannedFault, n)
	for i, k := range order {
		hr := holdRange[k]
		hold := hr[0]
		if hr[1] > hr[0] {
			hold += time.Duration(rng.Int64N(int64(hr[1] - hr[0])))
		}
		jitter := time.Duration(rng.Int64N(int64(spacing/4) + 1))
		out[i] = plannedFault{Kind: k, At: warm + time.Duration(i)*spacing + jitter, Hold: hold}
	}
	return out
}
