package status

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/catalog"
	"github.com/tidemark/tidemark/lab/testenv"
)

// The watermark's sources are part of the verdict: one source is as
// before; two mean two deployments' captures on one topic (at least AT
// RISK); with --pg, a partition set by another server or database's
// markers is one this source's serve processes do not trust (BREACHED).
func TestVerdictJudgesTheWatermarksSources(t *testing.T) {
	const own, other = "7001/catalog", "7002/catalog"
	for _, tc := range []struct {
		name    string
		source  string // --pg's
		sources map[int32]string
		want    string
		reason  string
	}{
		{"one source", "", map[int32]string{0: own + "/catalog.items", 1: own + "/catalog.items"}, OK, ""},
		{"no source named", own, nil, OK, ""},
		{"two sources", "", map[int32]string{0: own + "/catalog.items", 1: other + "/catalog.items"}, AtRisk, "2 sources"},
		{"two sources, --pg", own, map[int32]string{0: own + "/catalog.items", 1: other + "/catalog.items"}, Breached, "not of this source"},
		{"another source only, --pg", own, map[int32]string{0: other + "/catalog.items", 1: other + "/catalog.items"}, Breached, "not of this source"},
		{"this source, --pg", own, map[int32]string{0: own + "/catalog.items", 1: own + "/catalog.items"}, OK, ""},
	} {
		now := time.Now()
		rep := Report{Source: tc.source}
		wm := cache.Watermark{W: now.Add(-time.Second), Known: true, Partitions: 2, Sources: tc.sources}
		rep.verdict(DefaultConfig(), wm, now)
		rep.sources(wm)
		if rep.Verdict != tc.want || !strings.Contains(rep.Reason, tc.reason) {
			t.Errorf("%s: verdict %s (%s), want %s naming %q", tc.name, rep.Verdict, rep.Reason, tc.want, tc.reason)
		}
	}
}

// With --pg, status reads the start of the name capture gives its markers
// (and serve expects of them): the same server and database.
func TestSourceNameIsCapturesPrefix(t *testing.T) {
	ctx := testenv.Context(t, time.Minute)
	conn, err := pgx.Connect(ctx, testenv.SharedPostgres(t).MigratedDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	got, err := readSourceName(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	full, err := catalog.DefaultTable().Source(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	if full != got+"/"+catalog.DefaultTable().Name {
		t.Fatalf("status reads the source %q, serve %q", got, full)
	}
}
