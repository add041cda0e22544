package main

import "errors"

// devCmd is replaced by the issue that builds it.
type devCmd struct{}

func (devCmd) Run() error { return errors.New("tidemark dev: not built yet") }
