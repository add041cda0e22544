package chaos

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tidemark/tidemark/lab/localserver"
	"github.com/tidemark/tidemark/lab/proc"
)

// FaultServeRedisCut cuts one serve process off from Redis while the other
// keeps it (each serve process reaches Redis through its own TCP proxy), under
// a cold-read burst on both: the cut-off process admits source reads locally
// at its share while the other spends the shared budget, and the source must
// still see no more than the budget (issue 36: with the process on Redis not
// reserving the cut-off one's share it saw rate × 1.5). Held past the
// presence TTL (8 s), so the cut-off process's hold is covered too. Only
// against one Redis server: a Cluster's redirections name the servers
// themselves, past any proxy.
const FaultServeRedisCut = "serve-redis-cut"

// FaultServeCutRedisRewind is FaultServeRedisCut with Redis brought back,
// while the process is cut off and admitting its share locally, from a
// snapshot taken before the cut (a restore, or a failover to a replica that
// had not caught up): the snapshot's presence shows the cut-off process past
// the presence TTL, so the processes on Redis stopped reserving its share
// and the source saw both (the seeded short run found it: 640 foreground
// reads in 1.39 s against 637 allowed). They now find their own entries
// rewound and write back the presence they last read (reader/rewind.go).
// Only against one Redis server, as FaultServeRedisCut.
const FaultServeCutRedisRewind = "serve-cut-redis-rewind"

// proxyStage is a tidemark-lab proxy process in front of the Redis server
// for one serve process. It runs apart from the harness: in the harness's
// own process (race detector on in the tests, the load and the checker
// beside it) its forwarding slowed to Redis timeouts of half a second in
// the serve processes, and a cache that cannot fill stays cold.
type proxyStage struct {
	proc    *proc.Process
	control string // base URL of its control endpoint
}

// serveProxies starts a proxy in front of the Redis server for each serve
// process and returns the URL each is to use.
func (s *system) serveProxies(ctx context.Context, n int) ([]string, error) {
	var urls []string
	for i := range n {
		listen, err := addr()
		if err != nil {
			return nil, err
		}
		control, err := addr()
		if err != nil {
			return nil, err
		}
		p := &proxyStage{proc: s.labStage(fmt.Sprintf("proxy%d", i+1), "proxy", "--listen", listen, "--target", s.redis[0].Addr, "--control", control),
			control: "http://" + control}
		if err := p.proc.Start(); err != nil {
			return nil, err
		}
		s.proxies = append(s.proxies, p)
		if err := waitTCP(ctx, control, 30*time.Second); err != nil {
			return nil, err
		}
		urls = append(urls, strings.Replace(s.redisURL, s.redis[0].Addr, listen, 1))
	}
	return urls, nil
}

// set cuts (POST /cut) or restores (POST /restore) the proxy's forwarding
// and returns once it is done.
func (p *proxyStage) set(ctx context.Context, op string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.control+"/"+op, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", p.proc.Name(), op, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("%s %s: answered %s", p.proc.Name(), op, resp.Status)
	}
	return nil
}

// serveRedisCut cuts a random serve process's proxy for hold with the cold
// burst on, then restores it.
func (in *injector) serveRedisCut(ctx context.Context, hold time.Duration) (string, error) {
	s := in.sys
	if len(s.proxies) != len(s.serves) {
		return "", fmt.Errorf("serve processes reach Redis through %d proxies, not one each", len(s.proxies))
	}
	i := in.intn(len(s.serves))
	// Ids no one has: the process on Redis caches none of them, so it
	// spends its whole rate, and the cut-off one its share on top unless
	// the first reserves it.
	in.load.coldAbsent.Store(true)
	defer in.load.coldAbsent.Store(false)
	in.load.coldUntil.Store(time.Now().Add(hold).UnixNano())
	if err := s.proxies[i].set(ctx, "cut"); err != nil {
		return "", err
	}
	sleep(ctx, hold)
	// Restored even when ctx ended: the run's last checks read through it.
	if err := s.proxies[i].set(ctx, "restore"); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s cut off from Redis, %g reads/s of absent ids", s.serves[i].Name(), 3*s.cfg.SourceBudget), nil
}

// FaultServeBudgetMismatch restarts one serve process with ten times the
// pool's source rates (a typo in one pod, one Helm release's values), under
// a burst of reads of ids no one has at 3x the budget, then restarts it as
// it was: the pool admits at the lowest budget any live process of it is
// configured with, so the source must still see no more than the budget
// the rest run with (before, the process configured higher spent the shared
// buckets at its own pace).
const FaultServeBudgetMismatch = "serve-budget-mismatch"

// budgetFlags are serve's rate flags FaultServeBudgetMismatch multiplies.
var budgetFlags = []string{"--source-foreground-rate", "--source-background-rate", "--source-ryw-rate"}

func (in *injector) serveBudgetMismatch(ctx context.Context, hold time.Duration) (string, error) {
	p := in.sys.serves[in.intn(len(in.sys.serves))]
	orig := p.Config().Args
	args, err := multiplyFlags(orig, budgetFlags, 10)
	if err != nil {
		return p.Name(), err
	}
	in.load.coldAbsent.Store(true)
	defer in.load.coldAbsent.Store(false)
	p.Kill()
	p.SetArgs(args...)
	err = p.Start()
	in.load.coldUntil.Store(time.Now().Add(hold).UnixNano())
	if err == nil {
		sleep(ctx, hold)
	}
	p.Kill()
	p.SetArgs(orig...)
	return fmt.Sprintf("%s at 10x the source rates, %g reads/s of absent ids", p.Name(), 3*in.sys.cfg.SourceBudget), errors.Join(err, p.Start())
}

// serveCutRedisRewind saves a snapshot of Redis, cuts a random serve
// process's proxy 6 s later with the cold burst on, restarts Redis from the
// snapshot 2 s into the cut (its entry there is past the presence TTL, 8 s,
// by the time the cut-off process admits locally, from presenceLate, 3 s,
// after its last beat attempt), and restores the proxy hold after the cut.
func (in *injector) serveCutRedisRewind(ctx context.Context, hold time.Duration) (string, error) {
	s := in.sys
	if len(s.proxies) != len(s.serves) {
		return "", fmt.Errorf("serve processes reach Redis through %d proxies, not one each", len(s.proxies))
	}
	i := in.intn(len(s.serves))
	in.load.coldAbsent.Store(true)
	defer in.load.coldAbsent.Store(false)
	var cut time.Time
	var cutErr error
	redisName, err := in.redisRestart(ctx, true, 6*time.Second, func() {
		if cutErr = s.proxies[i].set(ctx, "cut"); cutErr != nil {
			return
		}
		cut = time.Now()
		in.load.coldUntil.Store(cut.Add(hold).UnixNano())
		sleep(ctx, 2*time.Second)
	})
	if !cut.IsZero() {
		sleep(ctx, time.Until(cut.Add(hold)))
		// Restored even when ctx ended: the run's last checks read through it.
		cutErr = errors.Join(cutErr, s.proxies[i].set(ctx, "restore"))
	}
	return fmt.Sprintf("%s cut off from Redis, then %s, %g reads/s of absent ids", s.serves[i].Name(), redisName, 3*s.cfg.SourceBudget), errors.Join(err, cutErr)
}

// multiplyFlags returns args with the value of each of flags ("--name",
// value as the next argument) multiplied by k; a flag missing is an error.
func multiplyFlags(args, flags []string, k float64) ([]string, error) {
	out := slices.Clone(args)
	for _, f := range flags {
		i := slices.Index(out, f)
		if i < 0 || i+1 >= len(out) {
			return nil, fmt.Errorf("serve's arguments have no %s", f)
		}
		v, err := strconv.ParseFloat(out[i+1], 64)
		if err != nil {
			return nil, fmt.Errorf("serve's %s %q: %w", f, out[i+1], err)
		}
		out[i+1] = strconv.FormatFloat(v*k, 'g', -1, 64)
	}
	return out, nil
}

// FaultServeSecondPool starts a serve process of a second deployment on
// the same source (its own namespace and --source-pool, one Redis), under
// reads of ids no one has at 3x the budget on both deployments: a source
// has one budget whatever pools read it, so each pool admits half of it
// (reader/sourcereaders.go) and the source must still see no more than the
// budget. Before, each pool spent a whole budget of its own (x2).
const FaultServeSecondPool = "serve-second-pool"

// FaultServeSecondRedis is FaultServeSecondPool with the second deployment
// on the same pool and namespace but a Redis of its own (a second release
// with its own cache tier): its buckets are other keys on another server,
// and the source counts them apart. Only against one Redis server (the
// second is one too, and serve's flags are the run's).
const FaultServeSecondRedis = "serve-second-redis"

// secondPool is FaultServeSecondPool's namespace and source pool.
const secondPool = "pool2"

func (in *injector) serveSecondPool(ctx context.Context, hold time.Duration) (string, error) {
	return in.serveSecondDeployment(ctx, hold, fmt.Sprintf("namespace and source pool %s", secondPool),
		[2]string{"--namespace", secondPool}, [2]string{"--source-pool", secondPool})
}

func (in *injector) serveSecondRedis(ctx context.Context, hold time.Duration) (string, error) {
	r, err := localserver.NewRedis(localserver.RedisConfig{Dir: filepath.Join(in.sys.dir, fmt.Sprintf("redis-second-%d", identityRuns.Add(1)))})
	if err != nil {
		return "", err
	}
	defer r.Remove()
	return in.serveSecondDeployment(ctx, hold, "its own Redis "+r.Addr, [2]string{"--redis", r.URL()})
}

// serveSecondDeployment starts a serve process with the first one's flags
// changed by flags, waits for it to be ready (registered on the source and
// counted), then reads ids no one has at 3x the budget through it and
// through the run's load for hold, and stops it.
func (in *injector) serveSecondDeployment(ctx context.Context, hold time.Duration, what string, flags ...[2]string) (string, error) {
	s := in.sys
	a, err := addr()
	if err != nil {
		return "", err
	}
	m, err := addr()
	if err != nil {
		return "", err
	}
	args := slices.Clone(s.serves[0].Config().Args)
	for _, kv := range append([][2]string{{"--addr", a}, {"--metrics-addr", m}}, flags...) {
		args = setArg(args, kv[0], kv[1])
	}
	p := s.stage(fmt.Sprintf("serve-second-%d", identityRuns.Add(1)), args...)
	if err := p.Start(); err != nil {
		return "", err
	}
	defer p.Stop(stageGrace)
	if err := p.Ready(ctx, "http://"+m, secondReadyWithin); err != nil {
		return p.Name(), fmt.Errorf("%s not ready: %w", p.Name(), err)
	}
	in.load.coldAbsent.Store(true)
	defer in.load.coldAbsent.Store(false)
	in.load.coldUntil.Store(time.Now().Add(hold).UnixNano())
	bctx, cancel := context.WithTimeout(ctx, hold)
	defer cancel()
	base := "http://" + a
	in.load.dispatch(bctx, 3*s.cfg.SourceBudget, 512, func(ctx context.Context) {
		_, _, _, _ = in.load.doAt(context.WithoutCancel(ctx), base, in.load.tenant(), http.MethodGet, fmt.Sprintf("/v1/catalog/items/absent-%d", in.load.intn(1<<30)), nil, "")
	})
	return fmt.Sprintf("%s (%s), %g reads/s of absent ids on each deployment", p.Name(), what, 3*s.cfg.SourceBudget), nil
}
