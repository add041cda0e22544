package main

import "errors"

// serveCmd is replaced by the issue that builds it.
type serveCmd struct{}

func (serveCmd) Run() error { return errors.New("tidemark serve: not built yet") }
