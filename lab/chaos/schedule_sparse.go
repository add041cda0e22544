package chaos

import (
	"math/rand/v2"
	"time"
)

// Fault schedules (Config.Schedule).
const (
	// ScheduleDense fits every kind into the run, faults as close as that
	// needs: the freshness promise and the budget under as much as possible.
	ScheduleDense = "dense"
	// ScheduleSparse spaces faults FaultEvery apart, the first one
	// FaultEvery after the start, so that warm-up, each fault's recovery and
	// steady state can be told apart and the read SLO judged (slo.go). The
	// kinds come in a seeded order, as many as fit.
	ScheduleSparse = "sparse"
)

// SparseMinEvery is the least spacing of the sparse schedule: the slowest
// kinds hold for about 50 s, and steady state must exist between faults.
const SparseMinEvery = time.Minute

// plan is the run's fault schedule.
func (c Config) plan() []plannedFault {
	if c.Schedule == ScheduleSparse {
		return sparseSchedule(c.Kinds(), c.Duration, c.FaultEvery, c.Seed)
	}
	return schedule(c.Kinds(), c.Duration, c.FaultEvery, c.Seed)
}

// sparseSchedule puts a fault every `every` (with up to a tenth of it as
// jitter), from `every` after the start until `every` before the end (the
// last one's recovery and some steady state after it are observed), the
// kinds in a seeded order, repeated when the run is longer than one round.
func sparseSchedule(kinds []string, d, every time.Duration, seed int64) []plannedFault {
	if len(kinds) == 0 {
		return nil
	}
	rng := rand.New(rand.NewPCG(uint64(seed), 0x5ba5))
	order := append([]string(nil), kinds...)
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	var out []plannedFault
	for i := 0; time.Duration(i+2)*every <= d; i++ {
		k := order[i%len(order)]
		hr := holdRange[k]
		hold := hr[0]
		if hr[1] > hr[0] {
			hold += time.Duration(rng.Int64N(int64(hr[1] - hr[0])))
		}
		jitter := time.Duration(rng.Int64N(int64(every/10) + 1))
		out = append(out, plannedFault{Kind: k, At: time.Duration(i+1)*every + jitter, Hold: hold})
	}
	return out
}
