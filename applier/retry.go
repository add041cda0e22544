package applier

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/tidemark/tidemark/cache"
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

// retryHook hears every failed attempt (err) and the success after them
// (nil): how a worker reports its partition stalled and recovered.
type retryHook func(what string, err error)

// retry runs fn until it succeeds or ctx ends (returning ctx's cause). Every
// error is retried, forever: a record leaves its partition only when its
// effect is in Redis. (Errors about one key's data come back inside a
// successful InvalidateBatch, per key; see classify.)
func retry(ctx context.Context, b backoff, log *slog.Logger, what string, fn func(context.Context) error) error {
	return retryNotify(ctx, b, log, what, nil, fn)
}

func retryNotify(ctx context.Context, b backoff, log *slog.Logger, what string, hook retryHook, fn func(context.Context) error) error {
	for attempt := 0; ; attempt++ {
		err := fn(ctx)
		if err == nil {
			if attempt > 0 {
				log.Info("recovered", "op", what, "attempts", attempt+1)
				if hook != nil {
					hook(what, nil)
				}
			}
			return nil
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if kafkaDenied(err) {
			// A missing ACL does not grant itself: stop with it, loudly,
			// rather than hold every partition in silence.
			return fmt.Errorf("%s: %w (the Kafka user lacks an ACL: see the README's table of ACLs per role)", what, err)
		}
		if cache.IsNoPerm(err) {
			return fmt.Errorf("%s: %w (the Redis user lacks a rule of the README's Redis ACL line)", what, err)
		}
		if hook != nil {
			hook(what, err)
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

// kafkaDenied says Kafka refused the request for want of an ACL.
func kafkaDenied(err error) bool {
	return errors.Is(err, kerr.TopicAuthorizationFailed) || errors.Is(err, kerr.GroupAuthorizationFailed) ||
		errors.Is(err, kerr.ClusterAuthorizationFailed) || errors.Is(err, kerr.TransactionalIDAuthorizationFailed)
}

// errClass is what an error means for the record being applied.
type errClass int

const (
	// classRetry: the server, the network or the cluster is the problem
	// (down, loading, read-only, out of memory, refusing writes, resharding,
	// or an error nobody here recognises). Retry the same call; the
	// partition holds meanwhile.
	classRetry errClass = iota
	// classKey: the stored value of this one key cannot take the write
	// (WRONGTYPE, or a script runtime error on its fields). Purging the key
	// is a safe substitute: the next reader misses and reads the source.
	classKey
)

func (c errClass) String() string {
	if c == classKey {
		return "key"
	}
	return "retry"
}

// keyErrorPrefixes are the Redis error replies about the key's own data. A
// script's runtime error ("attempt to compare nil with number" on a
// corrupted field) comes back as "ERR user_script:..." (Redis 7) or "ERR
// Error running script" (Redis 6).
var keyErrorPrefixes = []string{"WRONGTYPE", "ERR user_script:", "ERR Error running script"}

// classify says what err means. Only an error about one key's data is not
// retried; an unknown error is retried, never skipped.
func classify(err error) errClass {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return classRetry // connection, timeout, context, Kafka
	}
	msg := rerr.Error()
	for _, p := range keyErrorPrefixes {
		if strings.HasPrefix(msg, p) {
			return classKey
		}
	}
	return classRetry
}
