package dev

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/status"
)

// browser starts a headless Debian chromium with a fresh profile and no
// network beyond what the page asks for.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath("/usr/bin/chromium"),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true), // tests run as root
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(900, 1000),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// pageState is what the browser shows.
type pageState struct {
	verdict, reason string
	points          int // data points of the watermark-age line
	partitions      int // rows of the partition table
}

func readPage(ctx context.Context, url string) (pageState, error) {
	var st pageState
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS("#verdict"))); err != nil {
		return st, err
	}
	var err error
	if st.verdict, err = chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#verdict"))); err != nil {
		return st, err
	}
	if st.reason, err = chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#reason"))); err != nil {
		return st, err
	}
	if st.points, err = chromedp.Run(ctx, chromedp.Evaluate[int](`Array.from(document.querySelectorAll('#plot polyline[data-series="watermark age"]'))
		.reduce((n, l) => n + l.points.numberOfItems, 0)`)); err != nil {
		return st, err
	}
	st.partitions, err = chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#partitions tr').length - 1`))
	return st, err
}

// waitVerdict polls the page in the browser until it shows want.
func waitVerdict(t *testing.T, ctx context.Context, url, want string, within time.Duration, when string) pageState {
	t.Helper()
	var st pageState
	testenv.Eventually(t, within, "verdict "+want+" "+when, func() error {
		var err error
		if st, err = readPage(ctx, url); err != nil {
			return err
		}
		if st.verdict != want {
			return fmt.Errorf("verdict %q (%s)", st.verdict, st.reason)
		}
		return nil
	})
	return st
}

// TestStatusPageInBrowser drives the serve process's status page with
// headless Chromium: the verdict is OK with a plotted history and the
// partition table, it flips to AT RISK while the applier is paused
// (SIGSTOP), and back to OK when it resumes. A screenshot of the page after
// the pause (the plot shows it) is written to $TIDEMARK_STATUS_SCREENSHOT
// (default: the test's temp dir), which is how docs/status-page.png is made.
func TestStatusPageInBrowser(t *testing.T) {
	t.Parallel()
	e := newE2E(t)
	ctx := browser(t)
	url := "http://" + e.serveMetrics + "/"

	var st pageState
	testenv.Eventually(t, 60*time.Second, "status page OK with a plotted history", func() error {
		var err error
		if st, err = readPage(ctx, url); err != nil {
			return err
		}
		if st.verdict != status.OK || st.points < 5 || st.partitions != 6 {
			return fmt.Errorf("verdict %q (%s), %d plotted points, %d partition rows", st.verdict, st.reason, st.points, st.partitions)
		}
		return nil
	})
	checkStatusJSON(t, e)
	e.applier.signal(syscall.SIGSTOP)
	t.Cleanup(func() { e.applier.signal(syscall.SIGCONT) })
	st = waitVerdict(t, ctx, url, status.AtRisk, 40*time.Second, "while the applier is paused")
	if !strings.Contains(st.reason, "warn") {
		t.Errorf("AT RISK reason %q does not say which level was crossed", st.reason)
	}
	e.applier.signal(syscall.SIGCONT)
	waitVerdict(t, ctx, url, status.OK, 60*time.Second, "once the applier resumes")
	shot := os.Getenv("TIDEMARK_STATUS_SCREENSHOT")
	if shot == "" {
		shot = filepath.Join(t.TempDir(), "status-page.png")
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot of the status page: %s (%d bytes)", shot, len(png))
}

// checkStatusJSON: /status.json is the report `tidemark status --json`
// prints, with the same members.
func checkStatusJSON(t *testing.T, e *e2e) {
	t.Helper()
	// The page serves the report of its last check (every few seconds), so
	// a member that appears meanwhile (the warmer's first run, after the
	// first start's reset) is on the page one check later: poll.
	testenv.Eventually(t, 30*time.Second, "/status.json has the members of `tidemark status --json`", func() error {
		resp, err := http.Get("http://" + e.serveMetrics + "/status.json")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var page map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
			return fmt.Errorf("/status.json: %v", err)
		}
		// The serve process knows Postgres, so its page adds slot health.
		cfg := status.DefaultConfig()
		cfg.Brokers, cfg.Redis, cfg.PG, cfg.Topic, cfg.Group, cfg.Slot = strings.Split(e.brokers, ","), e.redisURL, e.dsn, e.topic, e.group, e.slot
		rep, err := status.Check(context.Background(), cfg)
		if err != nil {
			return err
		}
		var buf bytes.Buffer
		if err := rep.WriteJSON(&buf); err != nil {
			return err
		}
		var cli map[string]any
		if err := json.Unmarshal(buf.Bytes(), &cli); err != nil {
			return err
		}
		// The page also carries the figures of the auditor running in the
		// serving process (its own metrics, which `tidemark status` cannot
		// see) and that process's readiness (its /readyz), which a one-shot
		// `tidemark status` has not; otherwise the two documents have the
		// same members.
		if _, ok := page["audit"]; !ok {
			return errors.New("/status.json lacks the serving process's audit figures")
		}
		if page["process_ready"] != "ready" {
			return fmt.Errorf("/status.json process_ready %v, want ready", page["process_ready"])
		}
		cli["audit"], cli["process_ready"] = nil, nil
		if got, want := slices.Sorted(maps.Keys(page)), slices.Sorted(maps.Keys(cli)); !slices.Equal(got, want) {
			return fmt.Errorf("/status.json members %v, `tidemark status --json` members (and audit) %v", got, want)
		}
		if page["verdict"] != cli["verdict"] || len(page["partitions"].([]any)) != len(rep.Partitions) {
			return fmt.Errorf("/status.json verdict %v with %d partitions; status says %v with %d", page["verdict"],
				len(page["partitions"].([]any)), cli["verdict"], len(rep.Partitions))
		}
		return nil
	})
}
