package testenv

import (
	"compress/gzip"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"

	"github.com/tidemark/tidemark/internal/telemetry"
)

// OTLP is a trace receiver speaking the collector's OTLP/HTTP protocol
// (POST /v1/traces, an ExportTraceServiceRequest in protobuf), so a test
// sees the spans a real process exports, as a collector would.
type OTLP struct {
	srv   *httptest.Server
	mu    sync.Mutex
	spans []Span
}

// Span is one received span, flattened.
type Span struct {
	Service           string
	Resource          map[string]string // the resource's attributes (service.name too)
	TraceID, SpanID   string
	ParentID          string // "" for a root
	Name, Kind        string
	Start, End        time.Time
	Attrs             map[string]string
	Events            []string
	Links             []string // trace IDs of the linked spans
	StatusCode, Error string
}

// StartOTLP starts a receiver, stopped with the test.
func StartOTLP(t testing.TB) *OTLP {
	t.Helper()
	o := &OTLP{}
	o.srv = httptest.NewServer(http.HandlerFunc(o.export))
	t.Cleanup(o.srv.Close)
	return o
}

// URL is the collector endpoint to give an exporter (http://host:port).
func (o *OTLP) URL() string { return o.srv.URL }

// StartTracing is a tracing pipeline (every span sampled, batches sent
// within 50 ms) exporting as service to a receiver of its own; both stop
// with the test, the pipeline first.
func StartTracing(t testing.TB, service string) (*telemetry.Tracing, *OTLP) {
	t.Helper()
	o := StartOTLP(t)
	cfg := telemetry.DefaultTraceConfig()
	cfg.Endpoint, cfg.SampleRatio, cfg.Service, cfg.BatchTimeout = o.URL(), 1, service, 50*time.Millisecond
	tr, err := telemetry.NewTracing(cfg, Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); _ = tr.Run(ctx) })
	return tr, o
}

func (o *OTLP) export(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" {
		http.Error(w, "not an OTLP traces export", http.StatusNotFound)
		return
	}
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		gz, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = gz
	}
	b, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &req); err != nil {
		http.Error(w, "not an ExportTraceServiceRequest: "+err.Error(), http.StatusBadRequest)
		return
	}
	var got []Span
	for _, rs := range req.GetResourceSpans() {
		res := attrs(rs.GetResource().GetAttributes())
		service := res["service.name"]
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				sp := Span{Service: service, Resource: res, TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					Name: s.GetName(), Kind: strings.TrimPrefix(s.GetKind().String(), "SPAN_KIND_"),
					Start: time.Unix(0, int64(s.GetStartTimeUnixNano())), End: time.Unix(0, int64(s.GetEndTimeUnixNano())),
					Attrs: attrs(s.GetAttributes()), StatusCode: strings.TrimPrefix(s.GetStatus().GetCode().String(), "STATUS_CODE_"),
					Error: s.GetStatus().GetMessage()}
				if p := s.GetParentSpanId(); len(p) > 0 {
					sp.ParentID = hex.EncodeToString(p)
				}
				for _, e := range s.GetEvents() {
					sp.Events = append(sp.Events, e.GetName())
				}
				for _, l := range s.GetLinks() {
					sp.Links = append(sp.Links, hex.EncodeToString(l.GetTraceId()))
				}
				got = append(got, sp)
			}
		}
	}
	o.mu.Lock()
	o.spans = append(o.spans, got...)
	o.mu.Unlock()
	resp, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(resp)
}

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		v := kv.GetValue()
		switch x := v.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.GetKey()] = x.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.GetKey()] = fmt.Sprint(x.IntValue)
		case *commonpb.AnyValue_BoolValue:
			m[kv.GetKey()] = fmt.Sprint(x.BoolValue)
		case *commonpb.AnyValue_DoubleValue:
			m[kv.GetKey()] = fmt.Sprint(x.DoubleValue)
		default:
			m[kv.GetKey()] = fmt.Sprint(v)
		}
	}
	return m
}

// Spans is every span received so far.
func (o *OTLP) Spans() []Span {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]Span(nil), o.spans...)
}

// Trace is every received span of trace id.
func (o *OTLP) Trace(id string) []Span {
	var out []Span
	for _, s := range o.Spans() {
		if s.TraceID == id {
			out = append(out, s)
		}
	}
	return out
}

// Tree renders spans as an indented tree (children under their parent, in
// start order), with each span's service, duration and the attributes
// named in show, for a test's log and a report.
func Tree(spans []Span, show ...string) string {
	children := map[string][]Span{}
	ids := map[string]bool{}
	for _, s := range spans {
		ids[s.SpanID] = true
	}
	var roots []Span
	for _, s := range spans {
		if s.ParentID == "" || !ids[s.ParentID] {
			roots = append(roots, s)
		} else {
			children[s.ParentID] = append(children[s.ParentID], s)
		}
	}
	byStart := func(ss []Span) { sort.Slice(ss, func(i, j int) bool { return ss[i].Start.Before(ss[j].Start) }) }
	byStart(roots)
	var b strings.Builder
	var walk func(s Span, depth int)
	walk = func(s Span, depth int) {
		fmt.Fprintf(&b, "%s%s [%s %s] %s", strings.Repeat("  ", depth), s.Name, s.Service, strings.ToLower(s.Kind), s.End.Sub(s.Start).Round(10*time.Microsecond))
		for _, k := range show {
			if v, ok := s.Attrs[k]; ok {
				fmt.Fprintf(&b, " %s=%s", k, v)
			}
		}
		if len(s.Events) > 0 {
			fmt.Fprintf(&b, " events=%v", s.Events)
		}
		if s.StatusCode == "ERROR" {
			fmt.Fprintf(&b, " ERROR %q", s.Error)
		}
		b.WriteString("\n")
		kids := children[s.SpanID]
		byStart(kids)
		for _, k := range kids {
			walk(k, depth+1)
		}
	}
	for _, r := range roots {
		if r.ParentID != "" {
			fmt.Fprintf(&b, "(parent %s not received)\n", r.ParentID)
		}
		walk(r, 0)
	}
	return b.String()
}
