package localserver

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// The proxy run as its own process (tidemark-lab proxy runs RunProxy):
// bytes go through, POST /cut closes the open connection and refuses the
// next one, POST /restore forwards again.
func TestRunProxyCutAndRestore(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); c.Close() }()
		}
	}()
	free := func() string {
		p, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("127.0.0.1:%d", p)
	}
	cfg := ProxyConfig{Listen: free(), Target: echo.Addr().String(), Control: free()}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- RunProxy(ctx, cfg) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	post := func(op string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			resp, err := http.Post("http://"+cfg.Control+"/"+op, "", nil)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode != http.StatusNoContent {
					t.Fatalf("POST /%s: %s", op, resp.Status)
				}
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("POST /%s: %v", op, err)
			}
			time.Sleep(20 * time.Millisecond) // the control endpoint is still starting
		}
	}
	roundTrip := func() (*net.TCPConn, error) {
		c, err := net.DialTimeout("tcp", cfg.Listen, 5*time.Second)
		if err != nil {
			return nil, err
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("ping\n")); err != nil {
			c.Close()
			return nil, err
		}
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			c.Close()
			return nil, err
		}
		if line != "ping\n" {
			c.Close()
			return nil, fmt.Errorf("echoed %q", line)
		}
		return c.(*net.TCPConn), nil
	}
	post("restore") // waits for the control endpoint
	open, err := roundTrip()
	if err != nil {
		t.Fatalf("through the proxy: %v", err)
	}
	defer open.Close()
	post("cut")
	if n, err := open.Read(make([]byte, 1)); err == nil {
		t.Fatalf("the open connection still reads after the cut (%d bytes)", n)
	}
	if c, err := roundTrip(); err == nil {
		c.Close()
		t.Fatal("a new connection went through a cut proxy")
	}
	post("restore")
	c, err := roundTrip()
	if err != nil {
		t.Fatalf("through the restored proxy: %v", err)
	}
	c.Close()
}
