package pgha

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/tidemark/tidemark/api"
	"github.com/tidemark/tidemark/lab/chaos"
	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/promise"
)

const (
	tenant     = "t"
	partitions = 6
)

// proc is one real `tidemark` process of the pipeline.
type proc struct {
	t    *testing.T
	name string
	args []string
	mu   sync.Mutex
	cmd  *exec.Cmd
	log  *lockedBuffer
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (p *proc) start() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	cmd := exec.Command(testenv.Binary(p.t), p.args...)
	p.log = &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = p.log, p.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		p.t.Fatalf("start %s: %v", p.name, err)
	}
	p.cmd = cmd
}

func (p *proc) kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		p.cmd.Process.Kill()
		p.cmd.Wait()
		p.cmd = nil
	}
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.log == nil {
		return ""
	}
	return p.log.String()
}

// pipeline is capture, apply and serve on one catalog database (dsn, which
// may list several hosts), a private Redis and Kafka.
type pipeline struct {
	t       *testing.T
	dsn     string
	key     string // API key of tenant
	apiBase string
	// metrics endpoints (…/metrics) of each stage
	captureMetrics, applyMetrics, serveMetrics string
	capture, apply, serve                      *proc
	http                                       *http.Client
	redis                                      *testenv.Redis
}

// budget is the serve process's source budget, as the checker judges it:
// the chaos run's.
var budget = chaos.DefaultConfig().Limits()

func rate(class string) string { return strconv.FormatFloat(budget.Classes[class], 'f', -1, 64) }

func freeAddr(t *testing.T) string { return "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t)) }

// seedItems inserts items item-00001.. of tenant at version 1 with the
// payload the checker reads back (tenant, item, version), creates the
// tenant's API key and pg_stat_statements, and records the commits in src.
func seedItems(t *testing.T, dsn string, n int, src *chaos.Source) string {
	t.Helper()
	ctx := testenv.Context(t, time.Minute)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	if _, err := conn.Exec(ctx, `INSERT INTO catalog.items (tenant_id, item_id, version, display)
		SELECT $1::text, format('item-%s', lpad(i::text, 5, '0')), 1,
		       jsonb_build_object('tenant', $1::text, 'item', format('item-%s', lpad(i::text, 5, '0')), 'v', 1)
		FROM generate_series(1, $2::int) AS i`, tenant, n); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= n; i++ {
		src.Add(chaos.Commit{Tenant: tenant, Item: itemID(i), Version: 1, At: at})
	}
	key, err := api.CreateAPIKey(ctx, conn, tenant)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func itemID(i int) string { return fmt.Sprintf("item-%05d", i) }

// flags are a pipeline's flags beyond the endpoints.
type flags struct {
	cache   []string // the cache protocol's settings: every stage that talks to the cache tier takes them
	capture []string
	serve   []string
}

// startPipeline starts the three stages.
func startPipeline(t *testing.T, dsn, key string, f flags) *pipeline {
	t.Helper()
	r := testenv.StartRedis(t)
	k := testenv.StartKafka(t)
	topic, group, slot := testenv.Unique(t, "topic"), testenv.Unique(t, "group"), testenv.Unique(t, "slot")
	p := &pipeline{t: t, dsn: dsn, key: key, http: &http.Client{Timeout: 5 * time.Second}, redis: r}
	cm, am, sm, apiAddr := freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t)
	p.captureMetrics, p.applyMetrics, p.serveMetrics = "http://"+cm+"/metrics", "http://"+am+"/metrics", "http://"+sm+"/metrics"
	p.apiBase = "http://" + apiAddr
	p.capture = &proc{t: t, name: "capture", args: append([]string{"capture", "--pg", dsn, "--kafka", k.BrokerList(), "--topic", topic,
		"--slot", slot, "--partitions", strconv.Itoa(partitions), "--metrics-addr", cm}, f.capture...)}
	p.apply = &proc{t: t, name: "apply", args: append([]string{"apply", "--kafka", k.BrokerList(), "--redis", r.URL(), "--topic", topic,
		"--group", group, "--session-timeout", "2s", "--metrics-addr", am}, f.cache...)}
	p.serve = &proc{t: t, name: "serve", args: append([]string{"serve", "--pg", dsn, "--redis", r.URL(), "--addr", apiAddr,
		"--metrics-addr", sm, "--source-foreground-rate", rate(chaos.ClassForeground),
		"--source-background-rate", rate(chaos.ClassBackground), "--source-ryw-rate", rate(chaos.ClassReadYourWrites)}, append(f.cache, f.serve...)...)}
	for _, s := range p.stages() {
		s.start()
		t.Cleanup(s.kill)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, s := range p.stages() {
				out := s.output()
				if len(out) > 8000 {
					out = out[len(out)-8000:]
				}
				t.Logf("--- %s output (tail) ---\n%s", s.name, out)
			}
		}
	})
	testenv.Eventually(t, 90*time.Second, "pipeline ready (serve answers item-00001, the watermark known)", func() error {
		if a := p.get(context.Background(), itemID(1)); a.Status != http.StatusOK {
			return fmt.Errorf("serve answered %d", a.Status)
		}
		if _, err := p.metric(p.applyMetrics, "tidemark_watermark_age_seconds"); err != nil {
			return err
		}
		return nil
	})
	return p
}

// slot is capture's slot name (its --slot).
func (p *pipeline) slot() string {
	for i, a := range p.capture.args {
		if a == "--slot" {
			return p.capture.args[i+1]
		}
	}
	return ""
}

func (p *pipeline) stages() []*proc { return []*proc{p.capture, p.apply, p.serve} }

type itemBody struct {
	Version int64 `json:"version"`
	Display struct {
		Tenant string `json:"tenant"`
		Item   string `json:"item"`
		V      int64  `json:"v"`
	} `json:"display"`
}

// get reads one item through serve, as the chaos load does.
func (p *pipeline) get(ctx context.Context, item string) chaos.Answer {
	a := chaos.Answer{Tenant: tenant, Item: item, Serve: 1, Sent: time.Now()}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.apiBase+"/v1/catalog/items/"+item, nil)
	req.Header.Set("Authorization", "Bearer "+p.key)
	resp, err := p.http.Do(req)
	if err != nil {
		a.Received = time.Now()
		return a
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	a.Received = time.Now()
	if err != nil {
		return a
	}
	a.Status, a.CacheStatus = resp.StatusCode, resp.Header.Get("Cache-Status")
	if resp.StatusCode == http.StatusOK {
		var it itemBody
		if err := json.Unmarshal(b, &it); err != nil {
			a.Status = 0 // unreadable: reported as an error, not judged
			return a
		}
		a.Version, a.PayloadTenant, a.PayloadItem, a.PayloadVersion = it.Version, it.Display.Tenant, it.Display.Item, it.Display.V
	}
	return a
}

// metric sums every series of name at a stage's metrics endpoint.
func (p *pipeline) metric(url, name string) (float64, error) {
	m, err := p.metrics(url, name)
	if err != nil {
		return 0, err
	}
	var sum float64
	for _, v := range m {
		sum += v
	}
	return sum, nil
}

// metrics returns name's series at url by their label text ("" for none).
func (p *pipeline) metrics(url, name string) (map[string]float64, error) {
	resp, err := p.http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, err
	}
	f := fams[name]
	if f == nil {
		return nil, fmt.Errorf("%s: no metric %s", url, name)
	}
	out := map[string]float64{}
	for _, m := range f.Metric {
		var labels []string
		for _, l := range m.GetLabel() {
			labels = append(labels, l.GetName()+"="+l.GetValue())
		}
		v := m.GetGauge().GetValue()
		if m.Counter != nil {
			v = m.GetCounter().GetValue()
		}
		out[strings.Join(labels, ",")] += v
	}
	return out, nil
}

// readers reads the items pick names through serve from n goroutines until
// ctx ends, keeping every answer.
type readers struct {
	mu      sync.Mutex
	answers []chaos.Answer
	wg      sync.WaitGroup
}

func (p *pipeline) startReaders(ctx context.Context, n int, pick func() string) *readers {
	r := &readers{}
	for i := 0; i < n; i++ {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			for ctx.Err() == nil {
				r.read(ctx, p, pick())
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	return r
}

// read reads one item and keeps the answer.
func (r *readers) read(ctx context.Context, p *pipeline, item string) chaos.Answer {
	a := p.get(ctx, item)
	if ctx.Err() != nil {
		return a // an interrupted request proves nothing
	}
	r.mu.Lock()
	r.answers = append(r.answers, a)
	r.mu.Unlock()
	return a
}

// randomItem picks one of item-00001..items.
func randomItem(items int) func() string { return func() string { return itemID(1 + rand.N(items)) } }

func (r *readers) all() []chaos.Answer {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]chaos.Answer(nil), r.answers...)
}

// judge runs the chaos checker (the 30 s promise) over every answer and
// fails the test on any violation; it returns the answers by status.
func judge(t *testing.T, answers []chaos.Answer, src *chaos.Source) map[int]int {
	t.Helper()
	c := chaos.Checker{Bound: promise.Bound}
	statuses := map[int]int{}
	var bad []chaos.Violation
	for _, a := range answers {
		statuses[a.Status]++
		bad = append(bad, c.Check(a, src).Violations...)
	}
	if statuses[http.StatusOK] < 100 {
		t.Fatalf("only %d answers of 200 (by status: %v): the reads did not run", statuses[http.StatusOK], statuses)
	}
	for i, v := range bad {
		if i == 5 {
			break
		}
		t.Errorf("freshness violation %s: %s (answer %s/%s v%d sent %s, Cache-Status %q; history %+v)", v.Kind, v.Detail,
			v.Answer.Tenant, v.Answer.Item, v.Answer.Version, v.Answer.Sent.Format("15:04:05.000"), v.Answer.CacheStatus, v.History)
	}
	if len(bad) > 0 {
		t.Fatalf("%d freshness violations in %d answers", len(bad), len(answers))
	}
	return statuses
}
