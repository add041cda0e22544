package capture_test

import (
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/tidemark/tidemark/lab/testenv"
)

// TestPassiveCaptureIsReady: of two real capture processes on one slot, the
// standby is ready and alive (a two-replica Deployment finishes rolling out)
// while only the active one streams; and the standby's slot gauges stay
// current while it does not stream: with the active one paused, WAL written
// shows in the standby's tidemark_slot_lag_bytes.
func TestPassiveCaptureIsReady(t *testing.T) {
	t.Parallel()
	pg := testenv.SharedPostgres(t)
	dsn, _, cfg := newRig(t, pg)
	conn := connect(t, dsn)
	exec(t, conn, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", cfg.Slot)

	a := startBinary(t, cfg, "--slot-poll", "300ms")
	a.waitReady(t)
	b := startBinary(t, cfg, "--slot-poll", "300ms")
	testenv.Eventually(t, 60*time.Second, "standby ready, not streaming", func() error {
		if err := b.ready(); err != nil {
			return err
		}
		if v := b.metric("tidemark_capture_active"); v != 0 {
			return errorf("standby tidemark_capture_active %v, want 0", v)
		}
		return nil
	})
	if v := a.metric("tidemark_capture_active"); v != 1 {
		t.Fatalf("active tidemark_capture_active %v, want 1", v)
	}
	for _, p := range []*binary{a, b} {
		resp, err := http.Get("http://" + p.addr + "/healthz")
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("/healthz of %s: %v %v", p.addr, err, resp)
		}
		resp.Body.Close()
	}

	if err := a.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = a.Signal(syscall.SIGCONT) }()
	exec(t, conn, "SELECT pg_logical_emit_message(false, 'probe-test', repeat('x', 4000000))")
	testenv.Eventually(t, 30*time.Second, "standby's slot lag gauge follows the WAL", func() error {
		if v := b.metric("tidemark_slot_lag_bytes"); v < 4000000 {
			return errorf("standby tidemark_slot_lag_bytes %v, want >= 4000000", v)
		}
		return nil
	})
}
