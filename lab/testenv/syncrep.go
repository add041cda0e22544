package testenv

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// StallCommit runs sql on a new session of dsn that asks for synchronous
// commit and returns once that session waits for the synchronous standby
// (wait_event SyncRep): the server must name one in
// synchronous_standby_names that never answers (PGConf
// "synchronous_standby_names", "'ghost'"). The commit is then decoded yet
// invisible to new snapshots until release clears the setting; committed
// gets the statement's error once it returns. When the test ends the stall
// is released and the statement waited for before its session is closed.
func StallCommit(t testing.TB, dsn, sql string, args ...any) (committed <-chan error, release func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("testenv: stall: connect: %v", err)
	}
	t.Cleanup(func() { admin.Close(context.Background()) })
	writer, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("testenv: stall: connect: %v", err)
	}
	t.Cleanup(func() { writer.Close(context.Background()) })
	// The lab's servers default to synchronous_commit = off.
	var pid int
	if _, err := writer.Exec(ctx, "SET synchronous_commit = on"); err != nil {
		t.Fatalf("testenv: stall: %v", err)
	}
	if err := writer.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatalf("testenv: stall: %v", err)
	}
	done := make(chan error, 1)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		_, err := writer.Exec(context.Background(), sql, args...)
		done <- err
	}()
	release = func() {
		for _, q := range []string{"ALTER SYSTEM SET synchronous_standby_names = ''", "SELECT pg_reload_conf()"} {
			if _, err := admin.Exec(context.Background(), q); err != nil {
				t.Errorf("testenv: release the stall: %s: %v", q, err)
			}
		}
	}
	// Registered after the sessions: runs before they are closed.
	t.Cleanup(func() { release(); <-finished })
	Eventually(t, 30*time.Second, "the writer waits for the synchronous standby", func() error {
		var ev *string
		if err := admin.QueryRow(context.Background(), "SELECT wait_event FROM pg_stat_activity WHERE pid = $1", pid).Scan(&ev); err != nil {
			return err
		}
		if ev == nil || *ev != "SyncRep" {
			return fmt.Errorf("wait_event %v, want SyncRep", ev)
		}
		return nil
	})
	return done, release
}
