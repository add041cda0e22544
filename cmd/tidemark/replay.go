package main

import "errors"

// replayCmd is replaced by the issue that builds it.
type replayCmd struct{}

func (replayCmd) Run() error { return errors.New("tidemark replay: not built yet") }
