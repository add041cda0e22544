package main

import "errors"

// benchCaptureCmd is replaced by the issue that builds it.
type benchCaptureCmd struct{}

func (benchCaptureCmd) Run() error { return errors.New("tidemark bench capture: not built yet") }
