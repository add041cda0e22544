package localserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/tidemark/tidemark/internal/config"
)

// Proxy is a TCP proxy on a free local port in front of one server: what
// one process dials instead of the server, so that process alone can be cut
// off from it (Cut) while every other client keeps it.
type Proxy struct {
	Addr   string // 127.0.0.1:<port>, to dial instead of the target
	target string
	ln     net.Listener

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// NewProxy listens on a free local port and forwards every connection to
// target until Close.
func NewProxy(target string) (*Proxy, error) {
	return NewProxyOn("127.0.0.1:0", target)
}

// NewProxyOn is NewProxy listening on listen.
func NewProxyOn(listen, target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("proxy to %s: %w", target, err)
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		if !p.track(c) {
			c.Close() // cut: a new connection is refused as soon as it is made
			continue
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer p.untrack(c)
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				return
			}
			if !p.track(up) {
				up.Close()
				return
			}
			defer p.untrack(up)
			done := make(chan struct{}, 2)
			pipe := func(dst, src net.Conn) {
				_, _ = io.Copy(dst, src) // ends when either side closes; the closes below end the other direction
				dst.Close()
				src.Close()
				done <- struct{}{}
			}
			go pipe(up, c)
			go pipe(c, up)
			<-done
			<-done
		}()
	}
}

// track registers a connection; false when the proxy is cut.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

// Cut closes every connection through the proxy and refuses new ones until
// Restore: to its client, the server is gone.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.Close()
	}
}

// Restore forwards new connections again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// Close stops the proxy and closes its connections.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	p.Cut()
	p.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// ControlHandler serves Cut and Restore to another process: POST /cut and
// POST /restore answer 204 once done, GET /healthz 200 (the proxy run as its
// own process, tidemark-lab proxy, so a harness's own load cannot slow the
// traffic it forwards).
func (p *Proxy) ControlHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /cut", func(w http.ResponseWriter, _ *http.Request) {
		p.Cut()
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /restore", func(w http.ResponseWriter, _ *http.Request) {
		p.Restore()
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
	})
	return mux
}

// ProxyConfig is a proxy run as its own process.
type ProxyConfig struct {
	Listen  string // host:port the proxy's clients dial
	Target  string // host:port of the server behind it
	Control string // host:port of ControlHandler
}

// Validate reports the fields a proxy cannot run with.
func (c ProxyConfig) Validate() error {
	var p config.Problems
	for _, f := range []struct{ name, v string }{{"Listen", c.Listen}, {"Target", c.Target}, {"Control", c.Control}} {
		if _, _, err := net.SplitHostPort(f.v); err != nil {
			p.Add(f.name, "must be host:port (got %q)", f.v)
		}
	}
	return p.Err()
}

// RunProxy forwards cfg.Listen to cfg.Target and serves the control
// endpoint on cfg.Control until ctx ends.
func RunProxy(ctx context.Context, cfg ProxyConfig) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	p, err := NewProxyOn(cfg.Listen, cfg.Target)
	if err != nil {
		return err
	}
	defer p.Close()
	ln, err := net.Listen("tcp", cfg.Control)
	if err != nil {
		return fmt.Errorf("proxy control: %w", err)
	}
	srv := &http.Server{Handler: p.ControlHandler(), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("proxy control: %w", err)
	}
	return nil
}
