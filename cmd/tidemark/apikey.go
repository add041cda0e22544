package main

import "errors"

// apikeyCmd is replaced by the issue that builds it (serve).
type apikeyCmd struct {
	Create apikeyCreateCmd `cmd:"" help:"Create an API key for a tenant."`
}

type apikeyCreateCmd struct{}

func (apikeyCreateCmd) Run() error { return errors.New("tidemark apikey create: not built yet") }
