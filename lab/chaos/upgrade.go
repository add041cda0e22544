package chaos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidemark/tidemark/internal/lifecycle"
	"github.com/tidemark/tidemark/lab/proc"
	"github.com/tidemark/tidemark/rollout"
	"github.com/tidemark/tidemark/status"
)

// Upgrades under load (docs/design.md, "Version skew and rolling upgrades"
// and "Namespace upgrade"). A rolling upgrade (Config.UpgradeFrom) starts
// every stage on the old binary and replaces the processes one at a time
// with Config.Binary, in the order the skew policy gives: the new
// migrations first, then the appliers, the captures (the standby before the
// active one) and the serve processes, each stopped as a deployment stops
// it (SIGTERM), started on the new build and waited for until ready, while
// the load and the faults go on. A namespace upgrade
// (Config.UpgradeNamespace) starts a second applier group on the new
// namespace, moves the serve processes to it one at a time on the same
// source pool, waits for the old namespace to drain by its deadlines (as
// `tidemark status` reports it) and then points the old appliers at the new
// namespace, leaving the old one alone. Each step is a record of the
// report's fault list (kind upgrade), so the checker's verdict, the budget
// and the recovery figures cover the whole upgrade.

// Kinds of the upgrade's records in Report.Faults (not schedulable faults).
const (
	StepUpgrade          = "upgrade"
	StepNamespaceUpgrade = "namespace-upgrade"
)

// UpgradeReport is what an upgrade run did.
type UpgradeReport struct {
	From        string `json:"from,omitempty"`         // the old binary of a rolling upgrade
	FromVersion string `json:"from_version,omitempty"` // its `tidemark version`
	ToVersion   string `json:"to_version,omitempty"`
	Namespace   string `json:"namespace,omitempty"` // the new namespace of a namespace upgrade
	Replaced    int    `json:"processes_replaced"`
	Planned     int    `json:"processes_planned"`
	// Status is the namespace lines of `tidemark status` at each phase of a
	// namespace upgrade, with the time since the run started.
	Status  []string `json:"status,omitempty"`
	Drained bool     `json:"old_namespace_drained,omitempty"`
	Error   string   `json:"error,omitempty"`
}

// Done reports whether every planned step ran.
func (u *UpgradeReport) Done() bool {
	return u != nil && u.Error == "" && u.Replaced == u.Planned && (u.Namespace == "" || u.Drained)
}

func (u *UpgradeReport) writeText(b *strings.Builder) {
	if u == nil {
		return
	}
	if u.From != "" {
		fmt.Fprintf(b, "upgrade      rolling, from %s (%s) to %s: %d of %d processes replaced\n", u.From, u.FromVersion, u.ToVersion, u.Replaced, u.Planned)
	}
	if u.Namespace != "" {
		fmt.Fprintf(b, "upgrade      namespace %s -> %s: %d of %d serve processes moved, old namespace drained: %v\n", namespace, u.Namespace, u.Replaced, u.Planned, u.Drained)
		for _, s := range u.Status {
			fmt.Fprintf(b, "  status %s\n", s)
		}
	}
	if u.Error != "" {
		fmt.Fprintf(b, "  upgrade error: %s\n", u.Error)
	}
}

// upgrading reports whether the run upgrades something.
func (c Config) upgrading() bool { return c.UpgradeFrom != "" || c.UpgradeNamespace != "" }

// stageBinary is what the stages start on.
func (c Config) stageBinary() string {
	if c.UpgradeFrom != "" {
		return c.UpgradeFrom
	}
	return c.Binary
}

// watermarkNS is the namespace whose watermark the harness observes: the
// new one once a namespace upgrade has moved the serve processes.
func (s *system) watermarkNS() string {
	if ns := s.observedNS.Load(); ns != nil {
		return *ns
	}
	return namespace
}

type upgrader struct {
	sys   *system
	in    *injector
	log   *slog.Logger
	start time.Time

	mu         sync.Mutex
	rep        UpgradeReport
	records    []FaultRecord
	extra      []*proc.Process // processes the upgrade added (the new namespace's appliers)
	lastStatus string
	closed     atomic.Bool
	done       chan struct{}
}

func newUpgrader(sys *system, in *injector, log *slog.Logger, start time.Time) *upgrader {
	u := &upgrader{sys: sys, in: in, log: log, start: start, done: make(chan struct{})}
	u.rep.From, u.rep.Namespace = sys.cfg.UpgradeFrom, sys.cfg.UpgradeNamespace
	u.rep.ToVersion = binaryVersion(sys.cfg.Binary)
	if u.rep.From != "" {
		u.rep.FromVersion = binaryVersion(u.rep.From)
		u.rep.Planned = len(sys.stages())
	} else {
		u.rep.Planned = len(sys.serves)
	}
	return u
}

func binaryVersion(bin string) string {
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	return strings.Join(strings.Fields(string(out)), " ")
}

// run carries the upgrade out within the run's fault window (ctx).
func (u *upgrader) run(ctx context.Context, within time.Duration) {
	defer close(u.done)
	var err error
	if u.sys.cfg.UpgradeFrom != "" {
		err = u.rolling(ctx, within)
	} else {
		err = u.namespaceUpgrade(ctx, within)
	}
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("the run's %s ended before the upgrade finished: %w", within, err)
		}
		u.mu.Lock()
		u.rep.Error = err.Error()
		u.mu.Unlock()
		u.log.Warn("chaos: upgrade did not go as planned", "err", err)
	}
}

// wait returns the upgrade's report and records once run has returned.
func (u *upgrader) wait() (*UpgradeReport, []FaultRecord) {
	<-u.done
	u.mu.Lock()
	defer u.mu.Unlock()
	rep := u.rep
	return &rep, slices.Clone(u.records)
}

// close stops the processes the upgrade added.
func (u *upgrader) close() {
	u.closed.Store(true)
	u.mu.Lock()
	extra := slices.Clone(u.extra)
	u.mu.Unlock()
	for _, p := range extra {
		p.Stop(stageGrace)
	}
}

// watch restarts the upgrade's own processes that exit by themselves, as
// the run's watchdog does for the others.
func (u *upgrader) watch(ctx context.Context) {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	lifecycle.Every(ctx, time.Second, func() {
		u.mu.Lock()
		extra := slices.Clone(u.extra)
		u.mu.Unlock()
		for _, p := range extra {
			if u.closed.Load() {
				stop()
				return
			}
			if ok, err := p.RestartIfExited(); ok {
				u.log.Warn("chaos: an upgrade's stage exited by itself; restarted", "stage", p.Name(), "err", err)
			}
		}
	})
}

// pause waits until at of the run (or ctx ends).
func (u *upgrader) pause(ctx context.Context, at time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Until(u.start.Add(at))):
		return nil
	}
}

func (u *upgrader) record(kind, target string, from, to time.Time, err error) {
	fr := FaultRecord{Kind: kind, Target: target, Planned: from.Sub(u.start), Injected: from, Lifted: to}
	if err != nil {
		fr.Error = err.Error()
	}
	u.mu.Lock()
	u.records = append(u.records, fr)
	u.mu.Unlock()
}

// rolling replaces every stage process with the current build: migrations,
// appliers, captures (standby first), serve processes, evenly spread over
// the middle of the run.
func (u *upgrader) rolling(ctx context.Context, within time.Duration) error {
	s := u.sys
	first, last := within/6, within*3/4
	if err := u.pause(ctx, first); err != nil {
		return err
	}
	t0 := time.Now()
	out, err := exec.CommandContext(ctx, s.cfg.Binary, "migrate", "--pg", s.dsn).CombinedOutput()
	u.record(StepUpgrade, "migrations (the new build's tidemark migrate)", t0, time.Now(), err)
	if err != nil {
		return fmt.Errorf("the new build's migrate: %w\n%s", err, out)
	}
	order := []*proc.Process{}
	order = append(order, s.appliers...)
	for i := len(s.captures) - 1; i >= 0; i-- { // capture1 starts active: the standby goes first
		order = append(order, s.captures[i])
	}
	order = append(order, s.serves...)
	// Every stage runs the old build before its step (and the new one
	// after it, replace): a run whose old build is not running proves
	// nothing about the upgrade.
	for _, p := range order {
		unlock := u.in.lock(roleOf(p))
		err := runs(p, s.cfg.UpgradeFrom)
		unlock()
		if err != nil {
			u.record(StepUpgrade, "the old build runs every stage", t0, time.Now(), err)
			return fmt.Errorf("before the upgrade: %w", err)
		}
	}
	step := (last - first) / time.Duration(len(order))
	for i, p := range order {
		if err := u.pause(ctx, first+time.Duration(i)*step); err != nil {
			return err
		}
		if err := u.replace(ctx, p, s.cfg.Binary, nil, p.Name()+" onto the new build", true); err != nil {
			return err
		}
	}
	return nil
}

// replace stops p as a deployment would, starts it on bin (with args
// changed by edit, if set) and waits until it is ready, holding the fault
// lock of its role so no fault of that role overlaps the step.
func (u *upgrader) replace(ctx context.Context, p *proc.Process, bin string, edit func([]string) []string, what string, counted bool) error {
	role := roleOf(p)
	defer u.in.lock(role)()
	t0 := time.Now()
	p.Stop(stageGrace)
	p.SetBin(bin)
	if edit != nil {
		p.SetArgs(edit(slices.Clone(p.Config().Args))...)
	}
	err := p.Start()
	if err == nil {
		err = runs(p, bin)
	}
	if err == nil {
		err = u.ready(ctx, p)
	}
	u.record(StepUpgrade, what, t0, time.Now(), err)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if counted {
		u.mu.Lock()
		u.rep.Replaced++
		u.mu.Unlock()
	}
	u.log.Info("chaos: upgraded", "process", p.Name(), "step", what, "took", time.Since(t0).Round(time.Millisecond))
	return nil
}

// runs checks that p's process executes bin, so a step cannot pass on the
// binary it was meant to replace.
func runs(p *proc.Process, bin string) error {
	pid := p.Pid()
	if pid == 0 {
		return fmt.Errorf("%s is not running", p.Name())
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return fmt.Errorf("which binary %s (pid %d) runs: %w", p.Name(), pid, err)
	}
	want, err := filepath.EvalSymlinks(bin)
	if err == nil {
		want, err = filepath.Abs(want)
	}
	if err != nil {
		return fmt.Errorf("the binary %s should run: %w", p.Name(), err)
	}
	if exe != want {
		return fmt.Errorf("%s (pid %d) runs %s, want %s", p.Name(), pid, exe, want)
	}
	return nil
}

// roleOf is the fault target of a stage process.
func roleOf(p *proc.Process) string {
	for _, role := range []string{"capture", "apply", "serve"} {
		if strings.HasPrefix(p.Name(), role) {
			return role
		}
	}
	return p.Name()
}

const upgradeReadyWithin = time.Minute

// ready waits until p answers its readiness probe, /readyz, as a rollout
// on Kubernetes does. (A read of one item is no probe for serve: in a new
// namespace every read is cold, and under the run's load the foreground
// budget may refuse that one read for longer than the wait.)
func (u *upgrader) ready(ctx context.Context, p *proc.Process) error {
	return waitReady(ctx, p, upgradeReadyWithin, u.sys.keys[u.sys.tenants[0]])
}

// waitReady waits within for p's /readyz (on its --metrics-addr) to answer
// 200, asking with key as a bearer token (serve's), or for p to exit.
func waitReady(ctx context.Context, p *proc.Process, within time.Duration, key string) error {
	url := "http://" + argValue(p.Config().Args, "--metrics-addr") + "/readyz"
	deadline := time.Now().Add(within)
	var last error
	for time.Now().Before(deadline) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("%s answered %d", url, resp.StatusCode)
		}
		last = err
		if p.Exited() {
			return fmt.Errorf("exited before it was ready (log %s)", p.Config().Log)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("not ready within %s: %w (log %s)", within, last, p.Config().Log)
}

func argValue(args []string, flag string) string {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == flag {
			return args[i+1]
		}
	}
	return ""
}

// setArg sets flag's value in args, appending it when absent.
func setArg(args []string, flag, value string) []string {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == flag {
			args[i+1] = value
			return args
		}
	}
	return append(args, flag, value)
}

// namespaceUpgrade moves the system from namespace to UpgradeNamespace.
func (u *upgrader) namespaceUpgrade(ctx context.Context, within time.Duration) error {
	s, ns := u.sys, u.sys.cfg.UpgradeNamespace
	group := s.group + "-" + ns
	if err := u.pause(ctx, within/10); err != nil {
		return err
	}
	// 1. A second applier group invalidates the new namespace; serve moves
	// only once its watermark is known.
	t0 := time.Now()
	for i := range 2 {
		m, err := addr()
		if err != nil {
			return err
		}
		p := s.stage(fmt.Sprintf("apply-%s-%d", ns, i+1), append(append([]string{"apply"}, s.kafkaArgs...), "--redis", s.redisURL,
			"--topic", s.topic, "--group", group, "--namespace", ns, "--session-timeout", "2s", "--metrics-addr", m)...)
		if err := p.Start(); err != nil {
			return err
		}
		u.mu.Lock()
		u.extra = append(u.extra, p)
		u.mu.Unlock()
	}
	go u.watch(ctx)
	err := u.until(ctx, upgradeReadyWithin, "the new namespace's watermark is known", func() error {
		_, err := s.watermarkAgeOf(ctx, ns)
		return err
	})
	u.record(StepNamespaceUpgrade, fmt.Sprintf("applier group %s on namespace %s", group, ns), t0, time.Now(), err)
	if err != nil {
		return err
	}
	u.status(ctx, group)
	// 2. The serve processes move one at a time, on the old namespace's pool.
	// Status is read every 2 s meanwhile, not only after each move: the
	// window with both namespaces served is one move long, and a loaded
	// box can shift a beat past a single reading.
	sctx, stopStatus := context.WithCancel(ctx)
	defer stopStatus()
	go lifecycle.Every(sctx, 2*time.Second, func() { u.status(sctx, group) })
	step := within / 6
	for i, p := range s.serves {
		if err := u.pause(ctx, within/10+time.Duration(i+1)*step); err != nil {
			return err
		}
		edit := func(args []string) []string {
			return setArg(setArg(args, "--namespace", ns), "--source-pool", namespace)
		}
		if err := u.replace(ctx, p, p.Config().Bin, edit, fmt.Sprintf("%s: namespace %s -> %s (source pool %s)", p.Name(), namespace, ns, namespace), true); err != nil {
			return err
		}
		u.status(ctx, group)
	}
	stopStatus()
	s.observedNS.Store(&ns)
	// 3. The old namespace drains by its deadlines; status says when.
	t0 = time.Now()
	err = u.until(ctx, rollout.DrainMargin+2*time.Minute, "the old namespace is drained", func() error {
		st := u.status(ctx, group)
		if st != rollout.NamespaceDrained {
			return fmt.Errorf("old namespace %s is %q", namespace, st)
		}
		return nil
	})
	u.record(StepNamespaceUpgrade, fmt.Sprintf("namespace %s drained", namespace), t0, time.Now(), err)
	if err != nil {
		return err
	}
	u.mu.Lock()
	u.rep.Drained = true
	u.mu.Unlock()
	// 4. Left alone: the old appliers join the new group, so nothing writes
	// the old namespace any more.
	for _, p := range s.appliers {
		edit := func(args []string) []string { return setArg(setArg(args, "--namespace", ns), "--group", group) }
		if err := u.replace(ctx, p, p.Config().Bin, edit, fmt.Sprintf("%s: joins %s on namespace %s", p.Name(), group, ns), false); err != nil {
			return err
		}
	}
	u.status(ctx, group)
	return nil
}

// status reads `tidemark status` of the new namespace, records its
// namespace lines when they changed, and returns the old namespace's state.
func (u *upgrader) status(ctx context.Context, group string) string {
	s := u.sys
	cfg := status.DefaultConfig()
	cfg.Brokers, cfg.Kafka, cfg.Topic, cfg.Group, cfg.Redis = strings.Split(s.brokers, ","), s.cfg.KafkaConn, s.topic, group, s.redisURL
	cfg.Namespace, cfg.SourcePool = s.cfg.UpgradeNamespace, namespace
	rep, err := status.Check(ctx, cfg)
	var lines []string
	old := ""
	if err != nil {
		lines = append(lines, "error: "+err.Error())
	}
	for _, n := range rep.Namespaces {
		lines = append(lines, n.Namespace.String())
		if n.Name == namespace {
			old = n.State
		}
	}
	if ctx.Err() != nil { // a reading cut short by its end, not a state
		return old
	}
	line := fmt.Sprintf("[%s] %s", rep.Verdict, strings.Join(lines, " | "))
	u.mu.Lock()
	defer u.mu.Unlock()
	if line != u.lastStatus { // a new state, not another reading of the same one
		u.lastStatus = line
		u.rep.Status = append(u.rep.Status, fmt.Sprintf("+%s %s", time.Since(u.start).Round(time.Second), line))
	}
	return old
}

// until polls fn every 500 ms until it returns nil or within passes.
func (u *upgrader) until(ctx context.Context, within time.Duration, what string, fn func() error) error {
	deadline := time.Now().Add(within)
	for {
		err := fn()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not within %s: %w", what, within, err)
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}
