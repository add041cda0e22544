package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// ShutdownGrace is how long in-flight requests get to finish at shutdown.
const ShutdownGrace = 5 * time.Second

// ServeHTTP serves srv on ln until ctx ends, then shuts it down: the
// listener closes at once (no new requests), in-flight requests get grace
// to finish, and whatever is still open after it is closed. A serve error
// (other than the shutdown's own) is returned.
func ServeHTTP(ctx context.Context, srv *http.Server, ln net.Listener, grace time.Duration) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close() // past the grace: drop what is left
		if !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("shutdown: %w", err)
		}
	}
	return nil
}
