package reader

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// The local fallback (Redis unreachable): it starts empty, not with a fresh
// burst; every class spends the total, so the classes' shares never add up
// above it; and background reads leave the last half of the total's burst
// to the request path.
func TestLocalFallbackBuckets(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ForegroundRate, cfg.BackgroundRate, cfg.ReadYourWritesRate, cfg.BudgetBurst = 100, 50, 100, 100*time.Millisecond
	b := newBudget(cfg, nil, newPresence("t", "t", "", nil, slog.New(slog.DiscardHandler)), nil, nil, nil)
	const n = 2 // live serve processes: this one's share is half
	now := time.Now()
	admitted := func(class string, at time.Time, tries int) int {
		k := 0
		for range tries {
			if ok, _ := b.local(at, b.rates.Load(), b.classes[class], n, 1); ok {
				k++
			}
		}
		return k
	}
	if got := admitted(ClassForeground, now, 100); got != 1 {
		t.Fatalf("fallback admitted %d foreground reads at once when it began, want 1 (it starts empty)", got)
	}
	// Over 10 s, every class asking 1,000 times every 10 ms: the total's
	// share is 150/2 = 75/s, whatever the classes' own rates add up to.
	total, byClass := 0, map[string]int{}
	for i := range 1000 {
		at := now.Add(time.Duration(i+1) * 10 * time.Millisecond)
		for _, c := range []string{ClassForeground, ClassReadYourWrites, ClassBackground} {
			k := admitted(c, at, 3)
			total += k
			byClass[c] += k
		}
	}
	if limit := 75*10 + 75/10 + 1; total > limit {
		t.Fatalf("fallback admitted %d reads in 10 s across classes %v, want at most %d (the total's share, 75/s, and its burst)", total, byClass, limit)
	}
	if byClass[ClassBackground] > byClass[ClassForeground]/4 {
		t.Errorf("background got %d reads against foreground's %d while both were busy: it should back off first", byClass[ClassBackground], byClass[ClassForeground])
	}
	t.Logf("fallback over 10 s: %d reads (%v)", total, byClass)
}

// A live reader's settings this release cannot read (another release's
// format, a hand-written row) are said once, not skipped silently, and not
// taken as rates; its share of the source is still counted.
func TestUnreadableSourceSettingsAreSaidOnce(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ForegroundRate, cfg.BackgroundRate, cfg.ReadYourWritesRate, cfg.BudgetBurst = 100, 50, 100, 100*time.Millisecond
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	b := newBudget(cfg, nil, newPresence("t", "t", "", nil, log), nil, nil, log)
	for range 3 {
		b.agreeSource([]string{"fast please", b.own.String()}, 2)
	}
	if n := strings.Count(buf.String(), "cannot read"); n != 1 {
		t.Fatalf("%d warnings of the unreadable settings, want 1:\n%s", n, buf.String())
	}
	if !strings.Contains(buf.String(), `settings="fast please"`) {
		t.Fatalf("the warning does not name the settings:\n%s", buf.String())
	}
	if got := b.rates.Load().settings.Foreground; got != 50 {
		t.Fatalf("admitting foreground at %v/s, want 50 (this process's 100 shared by 2)", got)
	}
}
