package main

import "errors"

// benchApplyCmd is replaced by the issue that builds it.
type benchApplyCmd struct{}

func (benchApplyCmd) Run() error { return errors.New("tidemark bench apply: not built yet") }
