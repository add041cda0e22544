package main

import (
	"context"

	"github.com/tidemark/tidemark/cmd/internal/cli"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/lab/localserver"
)

type proxyCmd struct {
	proxy localserver.ProxyConfig
}

func (c *proxyCmd) Bind(b *cli.Binder) {
	p := &c.proxy
	b.Flag(&p.Listen, "listen", "Address the proxy's clients dial (host:port).")
	b.Flag(&p.Target, "target", "Address of the server behind the proxy (host:port).")
	b.Flag(&p.Control, "control", "Address of the control endpoint: POST /cut closes every connection and refuses new ones, POST /restore forwards again.")
}

func (c *proxyCmd) Check() error {
	var p config.Problems
	p.Nested("proxy", c.proxy.Validate())
	return p.Err()
}

func (c *proxyCmd) Run(ctx context.Context, e *cli.Env) error {
	e.Log.Info("proxy forwarding", "listen", c.proxy.Listen, "target", c.proxy.Target, "control", c.proxy.Control)
	return localserver.RunProxy(ctx, c.proxy)
}
