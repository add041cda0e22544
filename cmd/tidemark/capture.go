package main

import "errors"

// captureCmd is replaced by the issue that builds it.
type captureCmd struct{}

func (captureCmd) Run() error { return errors.New("tidemark capture: not built yet") }
