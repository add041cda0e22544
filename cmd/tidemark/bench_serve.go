package main

import "errors"

// benchServeCmd is replaced by the issue that builds it.
type benchServeCmd struct{}

func (benchServeCmd) Run() error { return errors.New("tidemark bench serve: not built yet") }
