package rollout

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/lab/testenv"
)

// A write is recorded in Postgres at the copy's generation; a copy the cache
// tier lost (the hash deleted, or everything flushed) is reported behind
// the record with the record's settings, and Restore puts them back with a
// note that the next write clears.
func TestLostCopyIsFoundBehindTheRecord(t *testing.T) {
	r := testenv.StartRedis(t)
	rdb, err := cache.ParseRedisURL(r.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	ctx := testenv.Context(t, time.Minute)
	conn, err := pgx.Connect(ctx, testenv.SharedPostgres(t).MigratedDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	s := NewStore(rdb, "catalog").WithDB(conn)
	now := time.Unix(1_800_000_000, 0)

	if _, err := s.Set(ctx, "acme", ModeSource, 0, false, now); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Set(ctx, AllTenants, ModeShadow, 0, false, now); err != nil {
		t.Fatal(err)
	}
	c, err := s.Copy(ctx)
	if err != nil || c.Gen != 2 {
		t.Fatalf("copy after two writes: generation %d, %v; want 2", c.Gen, err)
	}
	d, err := s.Durable(ctx)
	if err != nil || d.Gen != 2 || d.Settings["acme"].Mode != ModeSource || d.Settings[AllTenants].Mode != ModeShadow {
		t.Fatalf("record after two writes: %+v, %v; want generation 2 with acme source and * shadow", d, err)
	}

	for _, lose := range []struct {
		name string
		do   func() error
	}{
		{"the hash deleted", func() error { return rdb.Del(ctx, s.modes).Err() }},
		{"FLUSHALL", func() error { return rdb.FlushAll(ctx).Err() }},
	} {
		if err := lose.do(); err != nil {
			t.Fatal(err)
		}
		rep, err := s.Report(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]Mode{}
		for _, ts := range rep.Tenants {
			got[ts.Tenant] = ts.Setting.Mode
		}
		if !strings.HasPrefix(rep.Problem, "LOST") || rep.CopyGen != 0 || rep.RecordGen != 2 || got["acme"] != ModeSource {
			t.Fatalf("%s: report %+v; want LOST, copy at 0, record at 2, acme source", lose.name, rep)
		}
		found, err := s.Restore(ctx, d, now)
		if err != nil || found != 0 {
			t.Fatalf("%s: restore found generation %d, %v; want 0 (lost)", lose.name, found, err)
		}
		if again, err := s.Restore(ctx, d, now); err != nil || again != -1 {
			t.Fatalf("%s: a second restore replaced generation %d, %v; want nothing (-1)", lose.name, again, err)
		}
		c, err := s.Copy(ctx)
		if err != nil || c.Gen != 2 || c.Settings["acme"].Mode != ModeSource {
			t.Fatalf("%s: copy after the restore %+v, %v", lose.name, c, err)
		}
		if rep, _ := s.Report(ctx); rep.Problem != "" || !strings.Contains(rep.Restored, "restored Postgres's record (generation 2)") {
			t.Fatalf("%s: report after the restore %+v; want no problem and the restore noted", lose.name, rep)
		}
	}

	// A write on a lost copy first puts the record back, so it keeps the
	// other tenants' settings and is generation 3.
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Set(ctx, "other", ModeCache, 10, false, now); err != nil {
		t.Fatal(err)
	}
	if d, err = s.Durable(ctx); err != nil || d.Gen != 3 || d.Settings["acme"].Mode != ModeSource || d.Settings["other"].Ramp != 10 {
		t.Fatalf("record after a write on a lost copy: %+v, %v; want generation 3 keeping acme source", d, err)
	}
	if rep, _ := s.Report(ctx); rep.Restored != "" {
		t.Fatalf("an operator's write must clear the loss note: %q", rep.Restored)
	}
}
