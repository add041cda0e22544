package testenv

import (
	"testing"
	"time"
)

// A line logged after the test ended (a client's goroutine winding down) is
// dropped, not a race with the test's end (run with -race) nor a panic.
func TestLoggerAfterTheTestEnded(t *testing.T) {
	done := make(chan struct{})
	t.Run("inner", func(t *testing.T) {
		log := Logger(t)
		go func() {
			defer close(done)
			deadline := time.Now().Add(200 * time.Millisecond)
			for time.Now().Before(deadline) {
				log.Info("still winding down")
			}
		}()
	})
	<-done
}
