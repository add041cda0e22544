package elect_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark/tidemark/elect"
	"github.com/tidemark/tidemark/lab/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// Three processes compete: never two tasks at once, and when the holder
// stops, another takes over within a few TTLs.
func TestOneHolderAndTakeover(t *testing.T) {
	r := testenv.StartRedis(t)
	var (
		running, overlaps atomic.Int64
		holder            atomic.Int64 // index+1 of the process running the task
	)
	cancels := make([]context.CancelFunc, 3)
	done := make([]chan struct{}, 3)
	for i := range 3 {
		l, err := elect.New(r.Client(t), "test:lease", 150*time.Millisecond, testenv.Logger(t))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancels[i], done[i] = cancel, make(chan struct{})
		go func() {
			defer close(done[i])
			_ = l.Hold(ctx, func(ctx context.Context) error {
				if running.Add(1) > 1 {
					overlaps.Add(1)
				}
				holder.Store(int64(i + 1))
				<-ctx.Done()
				holder.CompareAndSwap(int64(i+1), 0)
				running.Add(-1)
				return nil
			})
		}()
	}
	stopped := map[int64]bool{}
	for range 2 {
		var h int64
		testenv.Eventually(t, 5*time.Second, "a live process holds the lease", func() error {
			if h = holder.Load(); h == 0 || stopped[h] {
				return errors.New("no holder")
			}
			return nil
		})
		stopped[h] = true
		cancels[h-1]()
		<-done[h-1]
	}
	testenv.Eventually(t, 5*time.Second, "the last process takes over", func() error {
		if h := holder.Load(); h == 0 || stopped[h] {
			return errors.New("no holder")
		}
		return nil
	})
	if n := overlaps.Load(); n != 0 {
		t.Errorf("%d times two tasks ran at once", n)
	}
	for i := range 3 {
		cancels[i]()
		<-done[i]
	}
}
