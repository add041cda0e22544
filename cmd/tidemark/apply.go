package main

import "errors"

// applyCmd is replaced by the issue that builds it.
type applyCmd struct{}

func (applyCmd) Run() error { return errors.New("tidemark apply: not built yet") }
