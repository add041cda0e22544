package applier

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// backoff is capped exponential backoff with full jitter.
type backoff struct {
	min, max time.Duration
}

func (b backoff) delay(attempt int) time.Duration {
	d := b.min
	for i := 0; i < attempt && d < b.max; i++ {
		d *= 2
	}
	d = min(d, b.max)
	// Full jitter spreads the retries of many appliers after a shared outage.
	return d/2 + rand.N(d/2+1)
}

// retry runs fn until it succeeds, ctx ends (returning ctx's cause) or fn
// fails with a permanent error (returned as is). Transient failures (Redis or
// Kafka unavailable) are retried forever: losing nothing beats moving on.
func retry(ctx context.Context, b backoff, log *slog.Logger, what string, fn func(context.Context) error) error {
	for attempt := 0; ; attempt++ {
		err := fn(ctx)
		if err == nil {
			if attempt > 0 {
				log.Info("recovered", "op", what, "attempts", attempt+1)
			}
			return nil
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if isPermanent(err) {
			return err
		}
		if attempt == 0 || attempt%20 == 0 {
			log.Warn("retrying", "op", what, "attempt", attempt+1, "err", err)
		}
		t := time.NewTimer(b.delay(attempt))
		select {
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		case <-t.C:
		}
	}
}

// errPermanent marks an error retrying cannot fix.
var errPermanent = errors.New("permanent")

type permanentError struct{ err error }

func (e permanentError) Error() string        { return e.err.Error() }
func (e permanentError) Unwrap() error        { return e.err }
func (e permanentError) Is(target error) bool { return target == errPermanent }

// isPermanent reports an error about the data rather than the connection: a
// Redis error reply (WRONGTYPE, a script error) other than the ones a
// restart, failover or resharding produces.
func isPermanent(err error) bool {
	if errors.Is(err, errPermanent) {
		return true
	}
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	msg := rerr.Error()
	for _, transient := range []string{"LOADING", "READONLY", "CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "BUSY", "MOVED", "ASK", "NOSCRIPT"} {
		if strings.HasPrefix(msg, transient) {
			return false
		}
	}
	return true
}
