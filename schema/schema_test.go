package schema

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func mustTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

var goldenEvents = map[string]Event{
	"change_upsert.json": &Change{Tenant: "acme", Item: "sku-1", Version: 42, Op: OpUpsert,
		LSN: 0x16B3748, CommitTime: mustTime("2026-11-30T03:16:19.123456Z"), Xid: 7711},
	"change_delete_escaped.json": &Change{Tenant: "té 1", Item: "a/b{c}", Version: 9223372036854775807, Op: OpDelete,
		LSN: 0x1A_FF000028, CommitTime: mustTime("2026-01-02T00:00:00Z"), Xid: 4294967295},
	"change_truncate.json": &Change{Op: OpTruncate,
		LSN: 0, CommitTime: mustTime("2026-11-30T03:16:19.000001Z"), Xid: 0},
	"resolved.json":            &Resolved{ResolvedTime: mustTime("2026-11-30T03:16:18.623456Z"), LSN: 0x16B3790},
	"resolved_partitions.json": &Resolved{ResolvedTime: mustTime("2026-11-30T03:16:18.623456Z"), LSN: 0x16B3790, Partitions: 6},
	"resolved_source.json": &Resolved{ResolvedTime: mustTime("2026-11-30T03:16:18.623456Z"), LSN: 0x16B3790, Partitions: 6,
		Source: "7301234567890123456/catalog/catalog.items"},
	"reset.json": &Reset{ResetTime: mustTime("2026-11-30T03:17:00Z"), Reason: "slot_created"},
}

func TestGoldenEvents(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.json")
	if len(files) != len(goldenEvents) {
		t.Fatalf("testdata has %d golden files, table has %d", len(files), len(goldenEvents))
	}
	for name, want := range goldenEvents {
		t.Run(name, func(t *testing.T) {
			golden, err := os.ReadFile(filepath.Join("testdata", name))
			if err != nil {
				t.Fatal(err)
			}
			got, err := Decode(golden)
			if err != nil {
				t.Fatalf("decode golden: %v", err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("decode golden:\n got %#v\nwant %#v", got, want)
			}
			if enc := Encode(want); string(enc) != string(golden) {
				t.Fatalf("encode:\n got %s\nwant %s", enc, golden)
			}
		})
	}
}

func TestGoldenKeys(t *testing.T) {
	f, err := os.Open("testdata/keys.tsv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		cols := strings.Split(line, "\t")
		if len(cols) != 4 {
			t.Fatalf("bad golden line %q", line)
		}
		n++
		tenant, item, key, rkey := cols[0], cols[1], cols[2], cols[3]
		if got := Key(tenant, item); got != key {
			t.Errorf("Key(%q, %q) = %q, want %q", tenant, item, got, key)
		}
		if gt, gi, err := ParseKey(key); err != nil || gt != tenant || gi != item {
			t.Errorf("ParseKey(%q) = %q, %q, %v", key, gt, gi, err)
		}
		if got := RedisKey("catalog", tenant, item); got != rkey {
			t.Errorf("RedisKey = %q, want %q", got, rkey)
		}
		if gt, gi, err := ParseRedisKey("catalog", rkey); err != nil || gt != tenant || gi != item {
			t.Errorf("ParseRedisKey(%q) = %q, %q, %v", rkey, gt, gi, err)
		}
	}
	if n < 5 {
		t.Fatalf("only %d key vectors", n)
	}
}

func TestDecodeRejects(t *testing.T) {
	var uv *UnsupportedVersionError
	if _, err := Decode([]byte(`{"schema":2,"type":"change"}`)); !errors.As(err, &uv) || uv.Version != 2 {
		t.Fatalf("schema 2: got %v, want UnsupportedVersionError", err)
	}
	for _, bad := range []string{
		``, `null`, `[]`, `{"type":"change"}`, `{"schema":1,"type":"nope"}`,
		`{"schema":1,"type":"change","tenant":"a","item":"b","version":1,"op":"upsert","lsn":"0/1","commit_time":"2026-11-30T03:16:19Z"}`,
		`{"schema":1,"type":"change","tenant":"a","item":"b","version":1,"op":"merge","lsn":"0/1","commit_time":"2026-11-30T03:16:19Z","xid":1}`,
		`{"schema":1,"type":"change","tenant":"a","item":"b","version":1,"op":"upsert","lsn":"zz","commit_time":"2026-11-30T03:16:19Z","xid":1}`,
		`{"schema":1,"type":"resolved","resolved_time":"yesterday","lsn":"0/1"}`,
		`{"schema":1,"type":"reset","reset_time":"2026-11-30T03:16:19Z"} {}`,
	} {
		if _, err := Decode([]byte(bad)); !errors.Is(err, ErrMalformed) {
			t.Errorf("Decode(%q) = %v, want ErrMalformed", bad, err)
		}
	}
}

func TestUnescapeIsStrict(t *testing.T) {
	for _, bad := range []string{"a%2f", "a%4", "a/b", "a%41", "a b", "%"} {
		if _, err := Unescape(bad); !errors.Is(err, ErrBadKey) {
			t.Errorf("Unescape(%q) = %v, want ErrBadKey", bad, err)
		}
	}
}

func TestMarkerKeys(t *testing.T) {
	for _, p := range []int32{0, 7, 2147483647} {
		k := MarkerKey(p)
		if !IsMarkerKey(k) {
			t.Fatalf("IsMarkerKey(%q) false", k)
		}
		if got, ok := ParseMarkerKey(k); !ok || got != p {
			t.Fatalf("ParseMarkerKey(%q) = %d, %v", k, got, ok)
		}
		if _, _, err := ParseKey(k); err == nil {
			t.Fatalf("marker key %q parsed as an item key", k)
		}
	}
	if IsMarkerKey(Key("\x00tidemark", "p")) {
		t.Fatal("an item key looks like a marker")
	}
	if WatermarkField(3) != "p3" || WatermarkKey("catalog") != "catalog:v1:_tidemark" {
		t.Fatal("watermark naming changed")
	}
}

func TestLSN(t *testing.T) {
	l, err := ParseLSN("16/b374d848")
	if err != nil || l != 0x16_B374D848 || l.String() != "16/B374D848" {
		t.Fatalf("ParseLSN = %v %v %s", l, err, l)
	}
}

func FuzzDecode(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.json")
	for _, name := range files {
		b, _ := os.ReadFile(name)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ev, err := Decode(b)
		if err != nil {
			return
		}
		// Whatever decodes must survive a round trip unchanged.
		again, err := Decode(Encode(ev))
		if err != nil {
			t.Fatalf("re-decode of %s: %v", Encode(ev), err)
		}
		if !reflect.DeepEqual(normalize(ev), normalize(again)) {
			t.Fatalf("round trip changed the event:\n%#v\n%#v", ev, again)
		}
	})
}

// normalize truncates times to the microseconds the wire carries.
func normalize(e Event) Event {
	switch v := e.(type) {
	case *Change:
		c := *v
		c.CommitTime = c.CommitTime.Truncate(time.Microsecond)
		return &c
	case *Resolved:
		r := *v
		r.ResolvedTime = r.ResolvedTime.Truncate(time.Microsecond)
		return &r
	case *Reset:
		r := *v
		r.ResetTime = r.ResetTime.Truncate(time.Microsecond)
		return &r
	}
	return e
}

func FuzzKey(f *testing.F) {
	f.Add("acme", "sku-1")
	f.Add("a/b", "{x}:%")
	f.Fuzz(func(t *testing.T, tenant, item string) {
		if tenant == "" || item == "" {
			return
		}
		gt, gi, err := ParseKey(Key(tenant, item))
		if err != nil || gt != tenant || gi != item {
			t.Fatalf("ParseKey(Key(%q, %q)) = %q, %q, %v", tenant, item, gt, gi, err)
		}
		rk := RedisKey("ns", tenant, item)
		if strings.Count(rk, "{") != 1 || strings.Count(rk, "}") != 1 {
			t.Fatalf("RedisKey %q has extra braces: the hash tag would break", rk)
		}
		// Any string that parses must be the canonical spelling.
		if t2, i2, err := ParseKey(tenant); err == nil && Key(t2, i2) != tenant {
			t.Fatalf("ParseKey(%q) accepted a non-canonical key", tenant)
		}
	})
}
